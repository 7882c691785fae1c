#include "image/tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "base/ids.h"

namespace sandstream::image {

UniqueFd OpenBeneath(int dir, std::string_view path, int flags) {
  const std::string rel = path.empty() ? "." : std::string(path);
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  for (int attempt = 0;; ++attempt) {
    const long fd = ::syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    // EAGAIN: a rename raced with the lookup; the kernel asks for a retry.
    if (errno != EAGAIN || attempt >= 8) return UniqueFd();
  }
}

Result<std::vector<std::string>> ListDir(int dir) {
  const int copy = ::fcntl(dir, F_DUPFD_CLOEXEC, 0);
  DIR* d = copy < 0 ? nullptr : ::fdopendir(copy);
  if (!d) {
    const int err = errno;
    if (copy >= 0) ::close(copy);
    return SysError(ErrorCode::kInternal, "list", err);
  }
  // From the start, whatever the fd's offset: the copy shares it.
  ::rewinddir(d);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

Result<void> RemoveTree(int dir, const std::string& name, std::string_view shown) {
  auto fail = [&](std::string_view step) {
    return SysError(ErrorCode::kInternal, "remove " + std::string(shown) + ": " + std::string(step),
                    errno);
  };
  if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) return Ok{};
  if (errno != EISDIR) return fail("unlink");
  // Directories to empty, by path from `dir`; each is listed once (its files unlinked, its
  // directories pushed), then removed once empty. One directory is open at a time, however deep
  // the tree: a chain of open fds would run out at a few thousand levels.
  struct Pending {
    std::string path;
    bool listed = false;
  };
  std::vector<Pending> stack{{name}};
  while (!stack.empty()) {
    if (stack.back().listed) {
      const std::string path = std::move(stack.back().path);
      stack.pop_back();
      const size_t slash = path.rfind('/');
      UniqueFd parent = slash == std::string::npos
                            ? UniqueFd(::fcntl(dir, F_DUPFD_CLOEXEC, 0))
                            : OpenBeneath(dir, std::string_view(path).substr(0, slash),
                                          O_PATH | O_DIRECTORY);
      if (!parent) return fail("open");
      const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
      if (::unlinkat(parent.get(), base.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        return fail("rmdir");
      }
      continue;
    }
    stack.back().listed = true;
    const std::string path = stack.back().path;
    UniqueFd fd = OpenBeneath(dir, path, O_RDONLY | O_DIRECTORY);
    if (!fd) return fail("open");
    auto names = ListDir(fd.get());
    if (!names) return fail("list");
    // Unlinked after the listing: what readdir returns while entries go is unspecified.
    std::vector<std::string> subdirs;
    for (auto& n : *names) {
      if (::unlinkat(fd.get(), n.c_str(), 0) == 0 || errno == ENOENT) continue;
      if (errno != EISDIR) return fail("unlink");
      subdirs.push_back(std::move(n));
    }
    for (auto& n : subdirs) stack.push_back({path + "/" + n});
  }
  return Ok{};
}

Result<std::string> MakeRandomDir(int dir, std::string_view what) {
  for (;;) {
    std::string name = NewId("");
    if (::mkdirat(dir, name.c_str(), 0700) == 0) return name;
    if (errno != EEXIST) {
      return SysError(ErrorCode::kInternal, std::string(what) + ": mkdir", errno);
    }
  }
}

}  // namespace sandstream::image
