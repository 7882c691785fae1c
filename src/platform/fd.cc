#include "platform/fd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace sandstream {

Result<Pipe> MakePipe(bool nonblock_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return SysError(ErrorCode::kInternal, "pipe2", errno);
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblock_read) {
    if (auto r = SetNonBlocking(p.read.get(), true); !r) return std::move(r).error();
  }
  return p;
}

Result<UniqueFd> OpenPidFd(pid_t pid) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return SysError(ErrorCode::kInternal, "pidfd_open", errno);
  // pidfd_open sets O_CLOEXEC itself.
  return UniqueFd(fd);
}

Result<void> SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return SysError(ErrorCode::kInternal, "fcntl F_GETFL", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return SysError(ErrorCode::kInternal, "fcntl F_SETFL", errno);
  return Ok{};
}

void GrowPipe(int fd, int bytes) { (void)::fcntl(fd, F_SETPIPE_SZ, bytes); }

Result<void> WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return SysError(ErrorCode::kInternal, "write", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Ok{};
}

Result<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return SysError(ErrorCode::kNotFound, "open " + path, errno);
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SysError(ErrorCode::kInternal, "read " + path, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<void> WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return SysError(ErrorCode::kInternal, "open " + tmp, errno);
  if (auto r = WriteAll(fd.get(), data); !r) return std::move(r).error();
  if (::fsync(fd.get()) != 0) return SysError(ErrorCode::kInternal, "fsync " + tmp, errno);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return SysError(ErrorCode::kInternal, "rename " + path, errno);
  return Ok{};
}

}  // namespace sandstream
