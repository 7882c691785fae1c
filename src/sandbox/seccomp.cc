// The default seccomp profile, built with libseccomp and exported as raw BPF.
#include "sandbox/seccomp.h"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>

#include "platform/unique_fd.h"

namespace sandstream::sandbox {
namespace {

// Denied with EPERM for every sandbox. chroot is not: root holds CAP_SYS_CHROOT as under
// Docker (package scripts, debootstrap), and a chroot cannot leave the sandbox's own root.
constexpr const char* kDenied[] = {
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "ptrace",
    "process_vm_readv", "process_vm_writev", "userfaultfd", "mount", "umount2", "pivot_root",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    "setns", "open_by_handle_at", "name_to_handle_at", "reboot", "swapon", "swapoff", "acct",
    "syslog", "quotactl", "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "lookup_dcookie", "vhangup",
    // A kernel attack surface of its own, and work done outside the caller's seccomp filter.
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "modify_ldt", "pidfd_getfd", "kcmp", "process_madvise",
};

// personality(2) values allowed, as in Docker's profile: PER_LINUX, PER_LINUX32, each with
// UNAME26, and 0xffffffff, the query.
constexpr uint32_t kPersonaFlagsAllowed = 0x20008;
constexpr uint32_t kPersonaQuery = 0xffffffff;

struct CtxDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};

}  // namespace

SeccompProgram& SeccompProgram::operator=(SeccompProgram&& other) noexcept {
  filter_ = std::move(other.filter_);
  fprog_.len = static_cast<unsigned short>(filter_.size());
  fprog_.filter = filter_.data();
  other.fprog_ = {};
  return *this;
}

Result<SeccompProgram> SeccompProgram::Build(bool allow_nested_userns) {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Error{ErrorCode::kInternal, "seccomp: init failed"};
  auto fail = [](const char* what, int rc) {
    return SysError(ErrorCode::kInternal, std::string("seccomp: ") + what, -rc);
  };
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int rc = seccomp_rule_add(ctx.get(), eperm, nr, 0); rc != 0) return fail(name, rc);
  }
  if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0) {
    return fail("clone3", rc);
  }
  // Terminal injection into a shared terminal; line disciplines are kernel code few need.
  for (unsigned long req : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX),
                            static_cast<unsigned long>(TIOCSETD)}) {
    if (int rc = seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, req));
        rc != 0) {
      return fail("ioctl", rc);
    }
  }
  // A rule compares an argument once, so "anything but these values" is a union of masked
  // tests: from 2^31, any clear bit (which only the query lacks), as "the bits above k set and
  // bit k clear"; below 2^31, any bit outside the allowed flags.
  auto deny_personality = [&](scmp_arg_cmp test) {
    return seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(personality), 1, test);
  };
  for (uint32_t bit = 0; bit < 31; ++bit) {
    const uint32_t flag = uint32_t{1} << bit;
    const uint32_t from_bit = kPersonaQuery << bit;
    if (int rc = deny_personality(SCMP_A0_32(SCMP_CMP_MASKED_EQ, from_bit, from_bit << 1)); rc != 0) {
      return fail("personality", rc);
    }
    if ((flag & kPersonaFlagsAllowed) != 0) continue;
    if (int rc = deny_personality(SCMP_A0_32(SCMP_CMP_MASKED_EQ, 0x80000000u | flag, flag)); rc != 0) {
      return fail("personality", rc);
    }
  }
  if (!allow_nested_userns) {
    if (int rc = seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(unshare), 0); rc != 0) {
      return fail("unshare", rc);
    }
    if (int rc = seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
        rc != 0) {
      return fail("clone", rc);
    }
  }

  UniqueFd mem(::memfd_create("seccomp", MFD_CLOEXEC));
  if (!mem) return SysError(ErrorCode::kInternal, "seccomp: memfd_create", errno);
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc != 0) return fail("export", rc);
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) {
    return Error{ErrorCode::kInternal, "seccomp: bad exported program size"};
  }
  SeccompProgram program;
  program.filter_.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), program.filter_.data(), static_cast<size_t>(size), 0) != size) {
    return SysError(ErrorCode::kInternal, "seccomp: read exported program", errno);
  }
  program.fprog_.len = static_cast<unsigned short>(program.filter_.size());
  program.fprog_.filter = program.filter_.data();
  return program;
}

}  // namespace sandstream::sandbox
