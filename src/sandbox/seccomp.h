// The default seccomp-bpf profile of sandboxed processes: compiled once with libseccomp in the
// daemon, sent as raw instructions with each spawn request and loaded by the process with one
// prctl (launch.cc), so that the sandbox's PID 1 never links libseccomp.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "base/result.h"

namespace sandstream::sandbox {

class SeccompProgram {
 public:
  // Denies module loading, kexec, bpf, perf, keyrings, ptrace, userfaultfd, io_uring, kcmp,
  // pidfd_getfd, modify_ldt, every mount API, setns, namespace creation (user namespaces
  // allowed when `allow_nested_userns`), TIOCSTI/TIOCLINUX/TIOCSETD and personality(2) beyond
  // Docker's defaults; clone3 returns ENOSYS so that libc falls back to clone, whose flags the
  // filter can inspect.
  static Result<SeccompProgram> Build(bool allow_nested_userns);

  SeccompProgram() = default;
  SeccompProgram(SeccompProgram&& other) noexcept { *this = std::move(other); }
  SeccompProgram& operator=(SeccompProgram&& other) noexcept;

  const sock_fprog* program() const { return &fprog_; }

 private:
  std::vector<sock_filter> filter_;
  sock_fprog fprog_{};
};

}  // namespace sandstream::sandbox
