// Thin wrappers over fd-creating syscalls. Every fd is created close-on-exec. No policy here.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream {

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// pipe2(O_CLOEXEC); `nonblock_read` makes only the read end non-blocking.
Result<Pipe> MakePipe(bool nonblock_read = false);
// pidfd_open(2) for a child; the daemon waits on it instead of SIGCHLD.
Result<UniqueFd> OpenPidFd(pid_t pid);
Result<void> SetNonBlocking(int fd, bool on);
// Grow a pipe towards `bytes` (F_SETPIPE_SZ); failures are ignored: it is only a hint.
void GrowPipe(int fd, int bytes);
// Write all of `data`, retrying on EINTR; blocking fds only.
Result<void> WriteAll(int fd, std::string_view data);
Result<std::string> ReadFile(const std::string& path);
// Write a file atomically (temp + rename) with `mode`.
Result<void> WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode);

}  // namespace sandstream
