// The sandbox policy table (nsjail style): a sandbox spec, a command, the expected exit and
// output, run through the real NamespaceRuntime (namespaces, cgroups, seccomp). Needs root;
// without it every case skips and says why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "net/nft.h"
#include "net/rtnl.h"
#include "sandbox/embedded.h"
#include "sandbox/fault.h"
#include "sandbox/namespace_runtime.h"
#include "sandbox/spawner.h"
#include "sandbox/userns.h"

namespace sandstream::sandbox {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit = -1;       // exit code, or 128 + signal
  std::string output;  // stdout and stderr, merged
};

ProcessSpec Command(std::vector<std::string> argv, bool as_root = false) {
  ProcessSpec p;
  p.argv = std::move(argv);
  p.env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/workspace", "LANG=C"};
  p.merge_stderr = true;
  p.open_stdin = false;
  p.as_root = as_root;
  return p;
}

ProcessSpec Shell(const std::string& script, bool as_root = false) {
  return Command({"sh", "-c", script}, as_root);
}

// The keeper reaps the process and writes its wait status to the exit pipe.
int Wait(const SpawnedProcess& p) {
  int status = 0;
  size_t got = 0;
  pollfd fd{p.exit_fd.get(), POLLIN, 0};
  while (got < sizeof status) {
    ::poll(&fd, 1, -1);
    const ssize_t n = ::read(fd.fd, reinterpret_cast<char*>(&status) + got, sizeof status - got);
    if (n == 0) return -1;
    if (n > 0) got += static_cast<size_t>(n);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A child of this test process, not of a keeper.
int Wait(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

RunResult RunIn(Sandbox& sandbox, const ProcessSpec& spec) {
  auto p = RunBlocking(sandbox.Spawn(spec));
  if (!p) return RunResult{-1, "spawn failed: " + p.error().message};
  RunResult r;
  char buf[4096];
  pollfd fd{p->stdout_fd.get(), POLLIN, 0};
  for (;;) {
    ::poll(&fd, 1, -1);
    ssize_t n = ::read(fd.fd, buf, sizeof buf);
    if (n > 0) {
      r.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      break;
    }
  }
  r.exit = Wait(*p);
  return r;
}

// One runtime for the whole binary: its own state directory, cgroup parent and host id range,
// so that it cannot touch the sandboxes of a daemon running on the same machine.
class RuntimeEnvironment : public ::testing::Environment {
 public:
  static inline NamespaceRuntime* runtime = nullptr;
  static inline std::string state_dir;
  static inline NamespaceRuntimeOptions options;

  void SetUp() override {
    if (::geteuid() != 0) return;
    char tmpl[] = "/tmp/sandstream-policy-XXXXXX";
    state_dir = std::string(::mkdtemp(tmpl)) + "/sandboxes";
    NamespaceRuntimeOptions o;
    o.state_dir = state_dir;
    o.host_id_base = 3000000;
    o.max_sandboxes = 64;
    o.cgroup_parent = "sandstream-test-" + std::to_string(::getpid());
    options = o;
    runtime = new NamespaceRuntime(o);
  }
  void TearDown() override {
    if (runtime == nullptr) return;
    runtime->CleanupLeftovers({});
    for (const auto& parent : runtime->CgroupParents()) ::rmdir(parent.c_str());
    delete runtime;
    std::error_code ec;
    fs::remove_all(fs::path(state_dir).parent_path(), ec);
  }
};

[[maybe_unused]] const auto* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new RuntimeEnvironment);

std::string UniqueId(const std::string& base) {
  static int counter = 0;
  return "sb_" + base + "_" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
}

class SandboxPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, cgroups, uid maps)";
    ASSERT_NE(RuntimeEnvironment::runtime, nullptr);
    const auto& ready = RuntimeEnvironment::runtime->ready();
    ASSERT_TRUE(ready.ok()) << ready.error().message;
  }

  std::unique_ptr<Sandbox> Make(SandboxSpec spec = {}) {
    if (spec.id.empty()) spec.id = UniqueId("t");
    spec.template_name = "base";
    auto sb = RunBlocking(RuntimeEnvironment::runtime->Create(spec));
    EXPECT_TRUE(sb.ok()) << (sb.ok() ? "" : sb.error().message);
    return sb.ok() ? std::move(*sb) : nullptr;
  }
};

// ---- the table ----

struct PolicyCase {
  const char* name;
  Limits limits;
  bool allow_nested_userns;
  ProcessSpec process;
  int exit;            // expected exit; -2: any non-zero
  std::string output;  // expected output; with `contains`, a substring of it
  bool contains;
};

constexpr int kNonZero = -2;

// Host-wide kernel state a sandbox must not read, as Docker and Podman mask it.
constexpr const char* kMaskedProcFiles =
    "kallsyms kcore keys key-users timer_list sched_debug sysrq-trigger latency_stats "
    "timer_stats interrupts slabinfo kpagecount kpageflags kpagecgroup vmallocinfo pagetypeinfo";

std::string Perl(const std::string& code) {
  return "perl -e '" + code + "'";
}

// "-1 <errno>" for a syscall the profile refuses.
std::string SyscallErrno(int nr) {
  return Perl("$r = syscall(" + std::to_string(nr) + ", 0, 0, 0, 0, 0); print $r, \" \", $!+0");
}

// Raw and packet sockets, a privileged port, an interface's flags (NET_ADMIN), the hostname
// (SYS_ADMIN): each line says 0 or the errno.
constexpr const char* kNetworkProbe = R"(import fcntl, socket, struct
def attempt(name, f):
    try:
        f()
        print(name, 0)
    except OSError as e:
        print(name, e.errno)
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
attempt("bind80", lambda: socket.socket().bind(("127.0.0.1", 80)))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0) + bytes(22))
attempt("ifflags", lambda: fcntl.ioctl(s, 0x8914, flags))
attempt("sethostname", lambda: socket.sethostname("other"))
)";

// A block device (the host's first disk) and /dev/mem: "unusable" when neither can be made
// and opened.
constexpr const char* kDeviceProbe = R"(import os, stat
usable = []
devices = (("blk", stat.S_IFBLK, os.makedev(8, 0)), ("mem", stat.S_IFCHR, os.makedev(1, 1)))
for name, kind, dev in devices:
    path = "/tmp/" + name
    try:
        os.mknod(path, kind | 0o600, dev)
        os.close(os.open(path, os.O_RDONLY))
        usable.append(name)
    except OSError:
        pass
print("usable: " + " ".join(usable) if usable else "unusable")
)";

std::vector<PolicyCase> Table(const std::string& marker, const std::string& state_dir,
                              int host_port) {
  Limits small;
  small.open_files = 321;
  Limits small_disk;
  small_disk.disk_mb = 100;
  return {
      {"ps_sees_only_own_processes",
       {},
       false,
       Command({"ps", "-e", "-o", "comm="}),
       0,
       "sandstream-init\nps\n",
       false},
      {"runs_as_user_1000",
       {},
       false,
       Shell("id -u; id -un; echo $(pwd)"),
       0,
       "1000\nuser\n/workspace\n",
       false},
      {"root_on_request", {}, false, Shell("id -u; id -un", true), 0, "0\nroot\n", false},
      // Docker's default set, 0xa80425fb: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID
      // SETPCAP NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
      {"root_holds_dockers_capabilities",
       {},
       false,
       Shell("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status", true),
       0,
       "CapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\n"
       "CapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\n",
       false},
      {"user_holds_none",
       {},
       false,
       Shell("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status"),
       0,
       "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
       "CapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\n",
       false},
      {"seccomp_without_no_new_privs",
       {},
       false,
       Shell("grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"),
       0,
       "NoNewPrivs:\t0\nSeccomp:\t2\n",
       false},
      {"seccomp_without_no_new_privs_for_root",
       {},
       false,
       Shell("grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status", true),
       0,
       "NoNewPrivs:\t0\nSeccomp:\t2\n",
       false},
      // CHOWN, FOWNER (chmod of another's file), DAC_OVERRIDE (reading it), SYS_CHROOT.
      {"root_uses_its_capabilities",
       {},
       false,
       Shell("touch /tmp/f && chown 1234:4321 /tmp/f && stat -c %u:%g /tmp/f && "
             "echo secret > /tmp/s && chown 1000:1000 /tmp/s && chmod 600 /tmp/s && cat /tmp/s && "
             "chroot / true && echo chroot",
             true),
       0,
       "1234:4321\nsecret\nchroot\n",
       false},
      // SETGID and SETUID: root becomes nobody, which has nothing left.
      {"root_switches_user_and_loses_everything",
       {},
       false,
       Command({"python3", "-c",
                "import os\nos.setgroups([65534]); os.setgid(65534); os.setuid(65534)\n"
                "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]\n"
                "print(os.getuid(), os.getgid(), os.getgroups(), caps)"},
               true),
       0,
       "65534 65534 [65534] ['0000000000000000', '0000000000000000', '0000000000000000', "
       "'00000000a80425fb', '0000000000000000']\n",
       false},
      {"user_cannot_chown_or_switch",
       {},
       false,
       Shell("chown 0 /workspace 2>/dev/null || echo chown refused; "
             "chroot / true 2>/dev/null || echo chroot refused; "
             "python3 -c 'import os; os.setuid(0)' 2>&1 | tail -1"),
       0,
       "chown refused\nchroot refused\nPermissionError: [Errno 1] Operation not permitted\n",
       false},
      // NET_RAW and NET_BIND_SERVICE in its own network namespace; never NET_ADMIN, SYS_ADMIN.
      {"root_network_capabilities_are_its_namespaces",
       {},
       false,
       Command({"python3", "-c", std::string(kNetworkProbe)}, true),
       0,
       "raw 0\npacket 0\nbind80 0\nifflags 1\nsethostname 1\n",
       false},
      {"user_network_capabilities_are_none",
       {},
       false,
       Command({"python3", "-c", std::string(kNetworkProbe)}),
       0,
       "raw 1\npacket 1\nbind80 13\nifflags 1\nsethostname 1\n",
       false},
      // MKNOD in a user namespace makes no usable device: refused at mknod or at open.
      {"root_makes_no_usable_device",
       {},
       false,
       Command({"python3", "-c", std::string(kDeviceProbe)}, true),
       0,
       "unusable\n",
       false},
      // Every mount API call, as root: mount, umount2, pivot_root, fsopen, fsconfig, fsmount,
      // fspick, open_tree, move_mount, mount_setattr.
      {"root_mount_api_denied",
       {},
       false,
       Shell(Perl("print join(\" \", map { syscall($_, 0, 0, 0, 0, 0) . \"/\" . ($!+0) } "
                  "(165, 166, 155, 430, 431, 432, 433, 428, 429, 442))"),
             true),
       0,
       "-1/1 -1/1 -1/1 -1/1 -1/1 -1/1 -1/1 -1/1 -1/1 -1/1",
       false},
      {"root_cannot_remount_read_only_binds",
       {},
       false,
       Shell("mount -o remount,rw /usr 2>/dev/null || mount -o remount,bind,rw /usr 2>/dev/null "
             "|| echo refused; touch /usr/sandstream-x 2>&1 | grep -c Read-only",
             true),
       0,
       "refused\n1\n",
       false},
      // unshare(CLONE_NEWUSER), unshare(CLONE_NEWNS), clone(CLONE_NEWUSER), setns, as root.
      {"root_namespaces_denied",
       {},
       false,
       Shell(Perl("sub e { return $_[0] . \"/\" . ($!+0) } print join(\" \", "
                  "e(syscall(272, 0x10000000)), e(syscall(272, 0x20000)), "
                  "e(syscall(56, 0x10000011, 0, 0, 0, 0)), e(syscall(308, 0, 0)))"),
             true),
       0,
       "-1/1 -1/1 -1/1 -1/1",
       false},
      // Out of its cgroup: no cgroupfs to write to, none to mount, and it stays where it was.
      {"root_cgroup_escape_refused",
       {},
       false,
       Shell("before=$(cat /proc/self/cgroup); mkdir -p /tmp/cg; "
             "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/../cgroup.procs "
             "/sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/*/../cgroup.procs; do "
             "echo $$ 2>/dev/null > $f && echo moved: $f; done; "
             "mount -t cgroup2 none /tmp/cg 2>/dev/null && echo mounted v2; "
             "mount -t cgroup -o pids none /tmp/cg 2>/dev/null && echo mounted v1; "
             "[ \"$(cat /proc/self/cgroup)\" = \"$before\" ] && echo same",
             true),
       0,
       "same\n",
       false},
      {"rlimits", small, false, Shell("ulimit -n; ulimit -c"), 0, "321\n0\n", false},
      {"host_files_absent",
       {},
       false,
       // /home is the sandbox's own, holding only the user's empty home.
       Shell("for p in /root/.bashrc " + marker + " " + state_dir +
                 " /work /var/lib /etc/shadow; do test -e $p && echo present: $p; done; "
                 "ls -A /root; ls -A /home/user; ls -A /home; echo checked",
             true),
       0,
       "user\nchecked\n",
       false},
      {"system_dirs_read_only",
       {},
       false,
       Shell("echo x > /usr/bin/sandstream-x", true),
       kNonZero,
       "Read-only file system",
       true},
      {"etc_is_the_sandboxes",
       {},
       false,
       Shell("grep -c . /etc/passwd; grep ^user: /etc/passwd"),
       0,
       "3\nuser:x:1000:1000:user:/workspace:/bin/bash\n",
       false},
      // One tmpfs holds /, /tmp and /dev/shm: disk_mb, within memory_mb (512) less a quarter.
      {"writable_space_fits_in_memory",
       {},
       false,
       Shell("df -m / /tmp /dev/shm | tail -n +2 | awk '{print $2}' | uniq"),
       0,
       "384\n",
       false},
      {"writable_space_is_disk_mb", small_disk, false,
       Shell("df -m /tmp | tail -1 | awk '{print $2}'"), 0, "100\n", false},
      {"dev_is_minimal",
       {},
       false,
       Shell("ls /dev | tr '\\n' ' '; echo; echo x > /dev/null && head -c 4 /dev/zero | wc -c"),
       0,
       "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \n4\n",
       false},
      {"host_tcp_unreachable",
       {},
       false,
       Command({"bash", "-c", "echo hi > /dev/tcp/127.0.0.1/" + std::to_string(host_port)}),
       kNonZero,
       "Connection refused",
       true},
      {"only_loopback",
       {},
       false,
       Shell("ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d "
             "' '"),
       0,
       "lo\n",
       false},
      {"mount_denied",
       {},
       false,
       Shell("mount -t tmpfs none /mnt 2>&1 || mount -t tmpfs none /tmp", true),
       kNonZero,
       "",
       true},
      {"unshare_user_denied",
       {},
       false,
       Command({"unshare", "-U", "true"}),
       kNonZero,
       "Operation not permitted",
       true},
      {"unshare_user_allowed_on_request",
       {},
       true,
       Command({"unshare", "-U", "true"}),
       0,
       "",
       false},
      {"bpf_denied", {}, false, Shell(SyscallErrno(321)), 0, "-1 1", false},
      {"keyctl_denied", {}, false, Shell(SyscallErrno(250)), 0, "-1 1", false},
      {"add_key_denied", {}, false, Shell(SyscallErrno(248)), 0, "-1 1", false},
      {"init_module_denied", {}, false, Shell(SyscallErrno(175), true), 0, "-1 1", false},
      {"finit_module_denied", {}, false, Shell(SyscallErrno(313), true), 0, "-1 1", false},
      {"kexec_load_denied", {}, false, Shell(SyscallErrno(246), true), 0, "-1 1", false},
      {"perf_event_open_denied", {}, false, Shell(SyscallErrno(298)), 0, "-1 1", false},
      {"ptrace_denied", {}, false, Shell(SyscallErrno(101)), 0, "-1 1", false},
      {"userfaultfd_denied", {}, false, Shell(SyscallErrno(323)), 0, "-1 1", false},
      {"setns_denied", {}, false, Shell(SyscallErrno(308), true), 0, "-1 1", false},
      {"clone3_is_enosys", {}, false, Shell(SyscallErrno(435)), 0, "-1 38", false},
      {"io_uring_setup_denied", {}, false, Shell(SyscallErrno(425)), 0, "-1 1", false},
      {"io_uring_enter_denied", {}, false, Shell(SyscallErrno(426)), 0, "-1 1", false},
      {"io_uring_register_denied", {}, false, Shell(SyscallErrno(427)), 0, "-1 1", false},
      {"modify_ldt_denied", {}, false, Shell(SyscallErrno(154)), 0, "-1 1", false},
      {"pidfd_getfd_denied", {}, false, Shell(SyscallErrno(438)), 0, "-1 1", false},
      {"kcmp_denied", {}, false, Shell(SyscallErrno(312)), 0, "-1 1", false},
      {"process_madvise_denied", {}, false, Shell(SyscallErrno(440)), 0, "-1 1", false},
      // On /dev/null, an ioctl the filter lets through fails with ENOTTY (25).
      {"tiocsetd_denied",
       {},
       false,
       Shell(Perl("$r = syscall(16, 0, 0x5423, 0); print $r, \" \", $!+0")),
       0,
       "-1 1",
       false},
      // Each call returns the previous persona: query, PER_LINUX32, UNAME26 with and without it.
      {"personality_defaults_allowed",
       {},
       false,
       Shell(Perl("print join(\" \", map { syscall(135, $_) } "
                  "(0xffffffff, 8, 0x20008, 0x20000, 0))")),
       0,
       "0 0 8 131080 131072",
       false},
      // ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, PER_SVR4, and a flag with
      // PER_LINUX32.
      {"personality_others_denied",
       {},
       false,
       Shell(Perl("print join(\" \", map { syscall(135, $_) . \"/\" . ($!+0) } "
                  "(0x40000, 0x400000, 0x100000, 0x68, 0x40008, 0xfffffffe)); "
                  "print \" \", syscall(135, 0xffffffff)")),
       0,
       "-1/1 -1/1 -1/1 -1/1 -1/1 -1/1 0",
       false},
      {"proc_masked",
       {},
       false,
       Shell(
           "for f in " + std::string(kMaskedProcFiles) +
               "; do [ -e /proc/$f ] || continue; "
               "[ \"$(head -c 1 /proc/$f 2>/dev/null | wc -c)\" = 0 ] || echo readable: $f; done; "
               "for d in acpi asound scsi; do [ -d /proc/$d ] || continue; "
               "[ -z \"$(ls -A /proc/$d)\" ] || echo listed: $d; done; echo checked",
           true),
       0,
       "checked\n",
       false},
      {"proc_sys_read_only",
       {},
       false,
       Shell("echo 1 > /proc/sys/net/ipv4/ip_forward", true),
       kNonZero,
       "Read-only file system",
       true},
      {"proc_dirs_read_only",
       {},
       false,
       Shell("for d in sys irq bus fs; do [ -d /proc/$d ] || continue; "
             "o=$(awk -v p=/proc/$d '$5 == p {split($6, o, \",\"); print o[1]}' "
             "/proc/self/mountinfo); [ \"$o\" = ro ] || echo writable: $d; done; echo checked"),
       0,
       "checked\n",
       false},
      {"ptys_capped_per_sandbox",
       {},
       false,
       Command({"python3", "-c",
                "import os\nn = 0\ntry:\n    while n < 200:\n        os.openpty(); n += 1\n"
                "except OSError as e:\n    print(n, e.errno)\nelse:\n    print(n, 0)"}),
       0,
       "64 28\n",
       false},
      {"processes_are_the_oom_victims",
       {},
       false,
       Shell("cat /proc/self/oom_score_adj"),
       0,
       "500\n",
       false},
  };
}

// A listener on the host's loopback, to show that the sandbox cannot reach it.
class HostListener {
 public:
  HostListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    (void)::listen(fd_, 4);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~HostListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(SandboxPolicyTest, PolicyTable) {
  const std::string marker_dir = fs::path(RuntimeEnvironment::state_dir).parent_path().string();
  const std::string marker = marker_dir + "/host-marker";
  std::ofstream(marker) << "host\n";
  HostListener listener;
  for (const auto& c : Table(marker, RuntimeEnvironment::state_dir, listener.port())) {
    SCOPED_TRACE(c.name);
    SandboxSpec spec;
    spec.limits = c.limits;
    spec.allow_nested_userns = c.allow_nested_userns;
    auto sb = Make(spec);
    ASSERT_NE(sb, nullptr);
    const RunResult r = RunIn(*sb, c.process);
    if (c.exit == kNonZero) {
      EXPECT_NE(r.exit, 0) << r.output;
    } else {
      EXPECT_EQ(r.exit, c.exit) << r.output;
    }
    if (c.contains) {
      EXPECT_NE(r.output.find(c.output), std::string::npos) << r.output;
    } else {
      EXPECT_EQ(r.output, c.output);
    }
    EXPECT_TRUE(RunBlocking(sb->Destroy()).ok());
  }
}

TEST_F(SandboxPolicyTest, HostnameIsTheSandboxId) {
  SandboxSpec spec;
  spec.id = UniqueId("host");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(RunIn(*sb, Command({"hostname"})).output, spec.id + "\n");
  EXPECT_EQ(RunIn(*sb, Command({"cat", "/etc/hostname"})).output, spec.id + "\n");
}

TEST_F(SandboxPolicyTest, WorkspacePersistsAcrossSpawns) {
  auto sb = Make();
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(RunIn(*sb, Shell("echo kept > /workspace/note && mkdir -p sub")).exit, 0);
  const RunResult r = RunIn(*sb, Shell("cat /workspace/note; ls -ld sub | cut -d' ' -f3"));
  EXPECT_EQ(r.exit, 0);
  EXPECT_EQ(r.output, "kept\nuser\n");
  EXPECT_EQ(RunIn(*sb, Shell("echo rooted > /opt-test && cat /opt-test", true)).output, "rooted\n");
}

TEST_F(SandboxPolicyTest, ProcessesOfOneSandboxSeeEachOther) {
  auto sb = Make();
  ASSERT_NE(sb, nullptr);
  auto bg = RunBlocking(sb->Spawn(Command({"sleep", "30"})));
  ASSERT_TRUE(bg.ok()) << bg.error().message;
  EXPECT_EQ(RunIn(*sb, Command({"pgrep", "-x", "sleep"})).exit, 0);
  (void)RunBlocking(sb->KillAll());
  EXPECT_EQ(Wait(*bg), 128 + SIGKILL);
  EXPECT_EQ(RunIn(*sb, Command({"echo", "alive"})).output, "alive\n");
}

TEST_F(SandboxPolicyTest, ForkBombHitsPidsLimitAndSandboxStaysUsable) {
  SandboxSpec spec;
  spec.limits.pids = 24;
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  // Sleepers fill the limit and stay: fork fails inside. A new process takes one place, no
  // more: the exited shell's place fits one, the next is refused.
  const RunResult bounded = RunIn(
      *sb, Shell("i=0; while [ $i -lt 100 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); done"));
  EXPECT_NE(bounded.exit, 0);
  EXPECT_NE(bounded.output.find("Cannot fork"), std::string::npos) << bounded.output;
  auto last = RunBlocking(sb->Spawn(Command({"sleep", "60"})));
  ASSERT_TRUE(last.ok()) << last.error().message;
  auto refused = RunBlocking(sb->Spawn(Command({"true"})));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("EAGAIN"), std::string::npos) << refused.error().message;
  pid_t host_child = ::fork();
  ASSERT_GE(host_child, 0) << "the host could not fork";
  if (host_child == 0) ::_exit(0);
  Wait(host_child);
  (void)RunBlocking(sb->KillAll());
  EXPECT_EQ(Wait(*last), 128 + SIGKILL);
  EXPECT_EQ(RunIn(*sb, Command({"echo", "usable"})).output, "usable\n");

  // A real fork bomb churns at the limit; one kill request ends it.
  auto bomb = RunBlocking(sb->Spawn(Shell("b() { b | b & }; b >/dev/null 2>&1")));
  ASSERT_TRUE(bomb.ok()) << bomb.error().message;
  Wait(*bomb);
  for (int i = 0; i < 50; ++i) {
    auto p = RunBlocking(sb->Spawn(Command({"true"})));
    if (p.ok()) Wait(*p);
  }
  (void)RunBlocking(sb->KillAll());
  const RunResult after = RunIn(*sb, Command({"echo", "usable"}));
  EXPECT_EQ(after.exit, 0);
  EXPECT_EQ(after.output, "usable\n");
}

TEST_F(SandboxPolicyTest, MemoryHogIsOomKilled) {
  SandboxSpec spec;
  spec.limits.memory_mb = 64;
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  const uint64_t before = sb->OomKills();
  const RunResult r =
      RunIn(*sb, Command({"python3", "-c", "b = bytearray(512 << 20); print('survived')"}));
  EXPECT_EQ(r.exit, 128 + SIGKILL) << r.output;
  EXPECT_GT(sb->OomKills(), before);
  EXPECT_EQ(RunIn(*sb, Command({"echo", "still here"})).output, "still here\n");
}

TEST_F(SandboxPolicyTest, TwoSandboxesCannotSeeEachOther) {
  auto a = Make();
  auto b = Make();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(RunIn(*a, Shell("echo secret-a > /workspace/secret; echo secret-a > /tmp/secret")).exit,
            0);
  auto sleeper = RunBlocking(a->Spawn(Command({"sleep", "30"})));
  ASSERT_TRUE(sleeper.ok());
  const RunResult r =
      RunIn(*b, Shell("cat /workspace/secret /tmp/secret 2>&1; ps -e -o comm= | grep -c sleep"));
  EXPECT_EQ(r.output.find("secret-a"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0\n"), std::string::npos) << r.output;
  (void)RunBlocking(a->KillAll());
  Wait(*sleeper);
}

std::vector<std::string> CgroupDirs(const std::string& id) {
  std::vector<std::string> dirs;
  for (const auto& parent : RuntimeEnvironment::runtime->CgroupParents()) {
    dirs.push_back(parent + "/" + id);
  }
  return dirs;
}

// Reads what `fd` gives until a newline (or EOF); for processes that report and keep running.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 10000) == 1) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 1 && c != '\n') {
      line += c;
    } else if (n == 1 || n == 0 || errno != EAGAIN) {
      break;
    }
  }
  return line;
}

TEST_F(SandboxPolicyTest, SignalsFromInsideDoNotEndPid1) {
  auto sb = Make();
  ASSERT_NE(sb, nullptr);
  // The kernel drops KILL and STOP sent to a namespace's init from inside; init handles the
  // others, and must tell its own sandbox's senders from the daemon.
  const std::string forged_term =
      "import ctypes, struct; libc = ctypes.CDLL(None, use_errno=True); "
      "info = ctypes.create_string_buffer(struct.pack('iiiII', 15, 0, -1, 0, 0) + bytes(108)); "
      "rc = libc.syscall(129, 1, 15, info); print(rc, ctypes.get_errno()); raise SystemExit(rc)";
  const std::vector<ProcessSpec> senders = {Shell("kill -TERM 1", true),
                                            Shell("kill -KILL 1", true),
                                            Shell("kill -INT 1", true),
                                            Shell("kill -HUP 1", true),
                                            Shell("kill -QUIT 1", true),
                                            Shell("kill -USR1 1", true),
                                            Shell("kill -TERM -1 2>/dev/null; true", true),
                                            Command({"python3", "-c", forged_term}, true)};
  for (const auto& sender : senders) {
    SCOPED_TRACE(sender.argv.back());
    const RunResult sent = RunIn(*sb, sender);
    EXPECT_EQ(sent.exit, 0) << sent.output;
    // Past the graceful end's grace: a init that took the signal would be gone by now.
    pollfd life{sb->LifeFd(), POLLIN, 0};
    EXPECT_EQ(::poll(&life, 1, 300), 0) << "PID 1 ended";
    EXPECT_EQ(RunIn(*sb, Command({"echo", "alive"})).output, "alive\n");
  }
  EXPECT_FALSE(sb->Ended());
  // From outside (the daemon, the host), TERM still ends the sandbox gracefully.
  const pid_t init = std::stoi(sb->RootPath().substr(6));
  ASSERT_EQ(::kill(init, SIGTERM), 0);
  pollfd life{sb->LifeFd(), POLLIN, 0};
  EXPECT_EQ(::poll(&life, 1, 5000), 1) << "TERM from outside did not end PID 1";
}

TEST_F(SandboxPolicyTest, InotifyInstancesAreCountedPerSandbox) {
  auto hog = Make();
  auto other = Make();
  ASSERT_NE(hog, nullptr);
  ASSERT_NE(other, nullptr);
  const std::string take_all =
      "import ctypes, time; libc = ctypes.CDLL(None, use_errno=True); fds = []\n"
      "while len(fds) < 1000:\n"
      "    fd = libc.inotify_init1(0)\n"
      "    if fd < 0: break\n"
      "    fds.append(fd)\n"
      "print(len(fds), ctypes.get_errno(), flush=True); time.sleep(60)";
  ProcessSpec spec = Command({"python3", "-c", take_all});
  auto p = RunBlocking(hog->Spawn(spec));
  ASSERT_TRUE(p.ok()) << p.error().message;
  const std::string taken = ReadLine(p->stdout_fd.get());
  EXPECT_NE(taken.find(" 24"), std::string::npos) << "stopped by EMFILE: " << taken;
  // The kernel counts instances per user at every level of user namespaces up to the host's;
  // there, every sandbox must be a user of its own, not the daemon's root.
  const RunResult r =
      RunIn(*other, Command({"python3", "-c",
                             "import ctypes; libc = ctypes.CDLL(None); "
                             "print('ok' if libc.inotify_init1(0) >= 0 else 'failed')"}));
  EXPECT_EQ(r.output, "ok\n");
  const int host = ::inotify_init1(IN_CLOEXEC);
  EXPECT_GE(host, 0) << "the host's root has no inotify instance left";
  if (host >= 0) ::close(host);
  (void)RunBlocking(hog->KillAll());
  Wait(*p);
}

// The file under /proc/<pid> of `pid` as one trimmed line.
std::string ProcLine(pid_t pid, const std::string& file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST_F(SandboxPolicyTest, FillingTmpfsPastMemoryLeavesTheSandboxUsable) {
  SandboxSpec spec;
  spec.id = UniqueId("fill");
  spec.limits.memory_mb = 64;
  spec.limits.disk_mb = 1024;
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  // tmpfs pages are memory the OOM killer cannot free: the writable space must stay inside the
  // memory limit, with room left to run something.
  const RunResult fill = RunIn(*sb, Shell("head -c 200M /dev/zero > /tmp/fill; "
                                          "head -c 200M /dev/zero > /workspace/fill; "
                                          "head -c 200M /dev/zero > /dev/shm/fill; echo done"));
  EXPECT_EQ(fill.exit, 0) << fill.output;
  EXPECT_NE(fill.output.find("No space left on device"), std::string::npos) << fill.output;
  EXPECT_FALSE(sb->Ended());
  EXPECT_EQ(RunIn(*sb, Command({"echo", "alive"})).output, "alive\n");
  // With the space full, a memory hog is the one killed.
  const RunResult hog =
      RunIn(*sb, Command({"python3", "-c", "b = bytearray(512 << 20); print('survived')"}));
  EXPECT_EQ(hog.exit, 128 + SIGKILL) << hog.output;
  EXPECT_FALSE(sb->Ended());
  EXPECT_EQ(RunIn(*sb, Command({"echo", "still here"})).output, "still here\n");
}

// The value of `field` in /proc/<pid>/status.
std::string StatusField(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":\t", 0) == 0) return line.substr(field.size() + 2);
  }
  return "";
}

// Whether this process has `cap` in its effective set.
bool HasCapability(int cap) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
  }
  return false;
}

TEST_F(SandboxPolicyTest, InitIsExemptFromTheOomKiller) {
  SandboxSpec spec;
  spec.id = UniqueId("oom");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  const RunResult r = RunIn(*sb, Shell("cat /proc/1/oom_score_adj; cat /proc/self/oom_score_adj"));
  const pid_t init = std::stoi(sb->RootPath().substr(6));
  const int init_score = std::stoi(ProcLine(init, "oom_score_adj"));
  EXPECT_EQ(r.output, std::to_string(init_score) + "\n500\n");
  EXPECT_LT(init_score, 500);
  if (!HasCapability(CAP_SYS_RESOURCE)) {
    GTEST_SKIP() << "no CAP_SYS_RESOURCE here: init cannot be given -1000";
  }
  EXPECT_EQ(init_score, -1000);
}

// SysV segments outlive their processes unless removed: memory the OOM killer could not free.
TEST_F(SandboxPolicyTest, SharedMemoryGoesWithItsProcesses) {
  SandboxSpec spec;
  spec.limits.memory_mb = 64;
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  const std::string leak =
      "import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n"
      "libc.shmat.restype = ctypes.c_void_p\n"
      "id = libc.shmget(0, 24 << 20, 0o1600)\n"
      "p = libc.shmat(id, None, 0)\n"
      "ctypes.memset(p, 1, 24 << 20)\n"
      "print(id >= 0, libc.shmdt(ctypes.c_void_p(p)))";
  const RunResult made = RunIn(*sb, Command({"python3", "-c", leak}));
  EXPECT_EQ(made.output, "True 0\n");
  EXPECT_EQ(RunIn(*sb, Shell("tail -n +2 /proc/sysvipc/shm | wc -l")).output, "0\n");
}

TEST_F(SandboxPolicyTest, SwapIsLimitedWithMemory) {
  SandboxSpec spec;
  spec.id = UniqueId("swap");
  spec.limits.memory_mb = 96;
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  const std::string memsw = CgroupDirs(spec.id)[0] + "/memory.memsw.limit_in_bytes";
  if (!fs::exists(memsw)) GTEST_SKIP() << "no cgroup v1 swap accounting on this host";
  std::ifstream in(memsw);
  int64_t limit = 0;
  in >> limit;
  EXPECT_EQ(limit, int64_t{96} << 20);
}

// A socket connected, from the sandbox's network namespace, to where its PID 1 listens for a
// daemon started later; invalid if the connection failed.
UniqueFd ConnectToKeeper(pid_t init) {
  UniqueFd netns(::open(("/proc/" + std::to_string(init) + "/ns/net").c_str(), O_RDONLY));
  UniqueFd fd;
  // A thread of its own enters the namespace and ends there.
  std::thread([&] {
    if (!netns || ::setns(netns.get(), CLONE_NEWNET) != 0) return;
    fd.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, kKeeperSocketName, sizeof kKeeperSocketName - 1);
    const auto len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + sizeof kKeeperSocketName);
    if (fd && ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) fd.reset();
  }).join();
  return fd;
}

// A keeper of an earlier build is upgraded in place: it execs the new executable, which takes
// over everything held; its process stays its child and still reports its exit. The keeper is
// PID 1, which stays PID 1.
TEST_F(SandboxPolicyTest, KeeperUpgradesInPlaceKeepingItsProcesses) {
  SandboxSpec spec;
  spec.id = UniqueId("upgrade");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  auto p = RunBlocking(sb->Spawn(Shell("sleep 0.5; exit 3")));
  ASSERT_TRUE(p.ok()) << p.error().message;
  const pid_t init = std::stoi(sb->RootPath().substr(6));

  // A daemon started again connects, as Restore does, and sends the keeper executable.
  Spawner next;
  auto exe = LoadInitExecutable();
  ASSERT_TRUE(exe.ok());
  UniqueFd socket = ConnectToKeeper(init);
  ASSERT_TRUE(socket) << "no keeper at @" << kKeeperSocketName;
  ASSERT_TRUE(RunBlocking(next.Connect(std::move(socket), exe->get())).ok());
  auto upgraded = RunBlocking(next.Upgrade(exe->get()));
  ASSERT_TRUE(upgraded.ok()) << upgraded.error().message;
  EXPECT_TRUE(next.is_init()) << "the same process, a new executable";
  EXPECT_EQ(next.version(), kKeeperVersion);
  EXPECT_EQ(ProcLine(init, "comm"), "sandstream-init");
  // Its capabilities, which its children start from, survive the exec: Docker's set plus
  // SYS_ADMIN (bit 21), no no_new_privs.
  EXPECT_EQ(StatusField(init, "CapEff"), "00000000a82425fb");
  EXPECT_EQ(StatusField(init, "CapBnd"), "00000000a82425fb");
  EXPECT_EQ(StatusField(init, "NoNewPrivs"), "0");

  auto kept = RunBlocking(next.List());
  ASSERT_TRUE(kept.ok()) << kept.error().message;
  bool found = false;
  for (const auto& e : *kept) found = found || e.pid == p->pid;
  EXPECT_TRUE(found) << "the process is still held";
  EXPECT_EQ(Wait(*p), 3) << "its exit arrives through the pipe the old keeper held";
  next.Leave();
  // The sandbox's own connection was replaced by `next`'s: it connects again at its next spawn.
  EXPECT_EQ(RunIn(*sb, Command({"echo", "again"})).output, "again\n");
}

// Every process of a sandbox descends from its PID 1, which is its keeper: nothing of the
// sandbox runs outside its pid namespace, and its processes' pids are the sandbox's own.
TEST_F(SandboxPolicyTest, EveryProcessDescendsFromPid1) {
  SandboxSpec spec;
  spec.id = UniqueId("tree");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(RunIn(*sb, Command({"ps", "-e", "-o", "comm="})).output, "sandstream-init\nps\n");
  EXPECT_EQ(RunIn(*sb, Command({"grep", "PPid", "/proc/self/status"})).output, "PPid:\t1\n");
  const pid_t init = std::stoi(sb->RootPath().substr(6));
  for (const std::string& dir : CgroupDirs(spec.id)) {
    std::ifstream procs(dir + "/cgroup.procs");
    std::vector<pid_t> tasks;
    for (pid_t pid = 0; procs >> pid;) tasks.push_back(pid);
    EXPECT_EQ(tasks, std::vector<pid_t>{init}) << "only PID 1 is left in " << dir;
  }
  auto p = RunBlocking(sb->Spawn(Shell("echo $$; sleep 5")));
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_GT(p->pid, 1);
  EXPECT_LT(p->pid, 100) << "a pid of the sandbox's namespace";
  // A group kill finds the process by the number the sandbox gives its group.
  sb->SignalGroup(p->pid, SIGKILL);
  EXPECT_EQ(Wait(*p), 128 + SIGKILL);
}

// Root of the sandbox holds KILL, DAC_OVERRIDE and SETUID over its own user namespace, but
// PID 1, its keeper (same uid, not dumpable), cannot be killed, traced or read through /proc.
// Each line: an errno, or what the call returned.
TEST_F(SandboxPolicyTest, InitIsOutOfRootsReach) {
  SandboxSpec spec;
  spec.id = UniqueId("reach");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  const std::string probe =
      "import ctypes, os, signal\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "def errno_of(f):\n"
      "    try:\n"
      "        f()\n"
      "        return 0\n"
      "    except OSError as e:\n"
      "        return e.errno\n"
      "print('ptrace init', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
      "print('init mem', errno_of(lambda: open('/proc/1/mem', 'rb')))\n"
      "print('init environ', errno_of(lambda: open('/proc/1/environ', 'rb')))\n"
      "print('init fd', errno_of(lambda: os.readlink('/proc/1/fd/3')))\n"
      "print('init root', errno_of(lambda: os.listdir('/proc/1/root/')))\n"
      "for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
      "    os.kill(1, sig)\n";
  const RunResult r = RunIn(*sb, Command({"python3", "-c", probe}, true));
  EXPECT_EQ(r.exit, 0) << r.output;
  EXPECT_EQ(r.output, "ptrace init -1 1\ninit mem 13\ninit environ 13\ninit fd 13\ninit root 13\n");
  // Where PID 1 listens for a daemon, its own processes reach the name but are let go at once:
  // PID 1 takes only peers outside its pid namespace.
  const std::string knock =
      "import socket\n"
      "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
      "s.connect('\\0" +
      std::string(kKeeperSocketName) +
      "')\n"
      "print(s.recv(64))\n";
  EXPECT_EQ(RunIn(*sb, Command({"python3", "-c", knock}, true)).output, "b''\n");
  // KILL to everything root may signal does not reach PID 1.
  EXPECT_EQ(RunIn(*sb, Shell("kill -KILL -1; true", true)).exit, 0);
  EXPECT_FALSE(sb->Ended());
  EXPECT_EQ(RunIn(*sb, Command({"echo", "alive"})).output, "alive\n");
  const pid_t init = std::stoi(sb->RootPath().substr(6));
  const std::string state = StatusField(init, "State").substr(0, 1);
  EXPECT_TRUE(state == "S" || state == "R") << "PID 1 neither stopped nor ended: " << state;
}

TEST_F(SandboxPolicyTest, DestroyLeavesNothing) {
  SandboxSpec spec;
  spec.id = UniqueId("gone");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  for (const auto& dir : CgroupDirs(spec.id)) EXPECT_TRUE(fs::exists(dir)) << dir;
  const std::string root = sb->RootPath();  // /proc/<init>/root
  const pid_t init = std::stoi(root.substr(6));
  auto bg = RunBlocking(sb->Spawn(Shell("sleep 30 & sleep 30")));
  ASSERT_TRUE(bg.ok());
  ASSERT_EQ(RunIn(*sb, Command({"true"})).exit, 0);

  (void)RunBlocking(sb->KillAll());
  EXPECT_EQ(Wait(*bg), 128 + SIGKILL);
  ASSERT_TRUE(RunBlocking(sb->Destroy()).ok());
  EXPECT_TRUE(RunBlocking(sb->Destroy()).ok());  // idempotent
  (void)RunBlocking(sb->KillAll());              // safe after Destroy
  EXPECT_FALSE(fs::exists(RuntimeEnvironment::state_dir + "/" + spec.id));
  for (const auto& dir : CgroupDirs(spec.id)) EXPECT_FALSE(fs::exists(dir)) << dir;
  EXPECT_NE(::kill(init, 0), 0) << "init still exists";
  EXPECT_FALSE(RunBlocking(sb->Spawn(Command({"true"}))).ok());
}

TEST_F(SandboxPolicyTest, DestroyWithRunningProcessesEndsThem) {
  SandboxSpec spec;
  spec.id = UniqueId("busy");
  auto sb = Make(spec);
  ASSERT_NE(sb, nullptr);
  auto bg = RunBlocking(sb->Spawn(Command({"sleep", "60"})));
  ASSERT_TRUE(bg.ok());
  // The daemon reaps its processes only after Destroy returns: Destroy must not wait for it.
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(RunBlocking(sb->Destroy()).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(Wait(*bg), 128 + SIGKILL);
  for (const auto& dir : CgroupDirs(spec.id)) EXPECT_FALSE(fs::exists(dir)) << dir;
  EXPECT_FALSE(fs::exists(RuntimeEnvironment::state_dir + "/" + spec.id));
}

TEST_F(SandboxPolicyTest, CleanupLeftoversAfterAKilledDaemon) {
  const std::string id = UniqueId("left");
  pid_t daemon = ::fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    NamespaceRuntime runtime(RuntimeEnvironment::options);
    SandboxSpec spec;
    spec.id = id;
    auto sb = RunBlocking(runtime.Create(spec));
    if (!sb.ok()) ::_exit(1);
    auto p = RunBlocking((*sb)->Spawn(Command({"sleep", "60"})));
    ::kill(::getpid(), SIGKILL);
  }
  ASSERT_EQ(Wait(daemon), 128 + SIGKILL);
  EXPECT_TRUE(fs::exists(RuntimeEnvironment::state_dir + "/" + id));
  RuntimeEnvironment::runtime->CleanupLeftovers({});
  EXPECT_FALSE(fs::exists(RuntimeEnvironment::state_dir + "/" + id));
  for (const auto& dir : CgroupDirs(id)) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_F(SandboxPolicyTest, SetupFailureNamesTheStepAndLeaksNothing) {
  SandboxSpec spec;
  spec.id = "sb_" + std::string(70, 'x');  // longer than a hostname may be
  auto sb = RunBlocking(RuntimeEnvironment::runtime->Create(spec));
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.error().code, ErrorCode::kSandboxSetupFailed);
  EXPECT_EQ(sb.error().message.rfind("uts: sethostname: EINVAL", 0), 0u) << sb.error().message;
  EXPECT_FALSE(fs::exists(RuntimeEnvironment::state_dir + "/" + spec.id));
  for (const auto& dir : CgroupDirs(spec.id)) EXPECT_FALSE(fs::exists(dir)) << dir;

  SandboxSpec missing;
  missing.id = UniqueId("tmpl");
  missing.layers = {"/nonexistent-template"};
  auto sb2 = RunBlocking(RuntimeEnvironment::runtime->Create(missing));
  ASSERT_FALSE(sb2.ok());
  EXPECT_EQ(sb2.error().message.rfind("template: open: /nonexistent-template: ENOENT", 0), 0u)
      << sb2.error().message;
  EXPECT_FALSE(fs::exists(RuntimeEnvironment::state_dir + "/" + missing.id));
}

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Children of this process (zombies included): the inits and keepers it cloned.
size_t OwnChildren() {
  size_t n = 0;
  const std::string self = std::to_string(::getpid());
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(line.substr(paren + 2));
    std::string state, ppid;
    if (fields >> state >> ppid && ppid == self) ++n;
  }
  return n;
}

// Every step of a creation fails in turn (the setup children's and the keeper's steps
// included): each failure names its step, and nothing is left behind, no state directory, no
// cgroup, no process, no descriptor.
TEST_F(SandboxPolicyTest, EveryFailedSetupStepNamesItselfAndLeavesNothing) {
  FailNthStep(1 << 30);  // counts, fails none
  {
    auto sb = Make();
    ASSERT_NE(sb, nullptr);
    ASSERT_TRUE(RunBlocking(sb->Destroy()).ok());
  }
  const int steps = StepsReached();
  FailNthStep(0);
  ASSERT_GT(steps, 20) << "the fault points are not reached";
  const size_t fds = OpenFds();
  const size_t children = OwnChildren();
  for (int k = 1; k <= steps; ++k) {
    SandboxSpec spec;
    spec.id = UniqueId("fault");
    FailNthStep(k);
    auto sb = RunBlocking(RuntimeEnvironment::runtime->Create(spec));
    FailNthStep(0);
    ASSERT_FALSE(sb.ok()) << "step " << k << " of " << steps << " failed, yet the creation did not";
    EXPECT_EQ(sb.error().code, ErrorCode::kSandboxSetupFailed) << k << ": " << sb.error().message;
    EXPECT_NE(sb.error().message.find(": EIO"), std::string::npos)
        << k << ": " << sb.error().message;
    EXPECT_FALSE(fs::exists(RuntimeEnvironment::state_dir + "/" + spec.id)) << k;
    for (const auto& dir : CgroupDirs(spec.id)) EXPECT_FALSE(fs::exists(dir)) << k << ": " << dir;
    EXPECT_EQ(OpenFds(), fds) << k << ": " << sb.error().message;
    EXPECT_EQ(OwnChildren(), children) << k << ": " << sb.error().message;
  }
}

// The same for a sandbox with egress, whose setup adds the veth pair and the table (in a
// network namespace of the test's own, so forwarding and tables never touch the host's): each
// failure names its step, and no link, table, directory or process is left.
TEST_F(SandboxPolicyTest, EveryFailedEgressStepNamesItselfAndLeavesNothing) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int failures = 0;
    auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "%s\n", what.c_str());
      ++failures;
    };
    if (::unshare(CLONE_NEWNET) != 0) ::_exit(90);
    char tmpl[] = "/tmp/sandstream-egress-XXXXXX";
    NamespaceRuntimeOptions o = RuntimeEnvironment::options;
    o.state_dir = std::string(::mkdtemp(tmpl)) + "/sandboxes";
    o.host_id_base = 4000000;
    o.max_sandboxes = 16;
    o.cgroup_parent = "sandstream-test-egress-" + std::to_string(::getpid());
    net::EgressOptions egress;
    egress.pool = *net::ParsePrefix("10.200.0.0/24");
    o.egress = std::make_shared<net::Egress>(egress);
    int steps = 0;
    int net_steps = 0;  // the netns, the veth pair, the table
    {
      NamespaceRuntime runtime(o);
      if (!runtime.ready()) ::_exit(91);
      SandboxSpec spec;
      spec.network = sandbox::NetworkMode::kEgress;
      spec.egress = *net::ParseEgressPolicy(std::vector<std::string>{"198.18.0.0/15"}, {});
      spec.id = UniqueId("egress");
      FailNthStep(1 << 30);
      auto sb = RunBlocking(runtime.Create(spec));
      steps = StepsReached();
      FailNthStep(0);
      if (!sb.ok()) fail("egress create: " + sb.error().message);
      if (sb.ok()) (void)RunBlocking((*sb)->Destroy());
      for (int k = 1; k <= steps; ++k) {
        spec.id = UniqueId("egress");
        FailNthStep(k);
        auto failed = RunBlocking(runtime.Create(spec));
        FailNthStep(0);
        const std::string at = "step " + std::to_string(k) + " of " + std::to_string(steps) + ": ";
        if (failed.ok()) {
          fail(at + "did not fail");
          (void)RunBlocking((*failed)->Destroy());
          continue;
        }
        if (failed.error().message.find(": EIO") == std::string::npos) {
          fail(at + "no EIO: " + failed.error().message);
        }
        if (failed.error().message.starts_with("net: ")) ++net_steps;
        // The kernel removes a dead namespace's veth a little later, the daemon its table on a
        // thread of its own.
        auto nft = net::Nftables::Open();
        bool links_gone = false;
        bool tables_gone = false;
        for (int i = 0; i < 200 && !(links_gone && tables_gone); ++i) {
          auto links = net::ListLinks("ss-");
          links_gone = links.ok() && links->empty();
          auto tables = nft ? nft->ListTables("ss_", net::Family::kNetdev)
                            : Result<std::vector<std::string>>(nft.error());
          tables_gone = tables.ok() && tables->empty();
          if (!(links_gone && tables_gone)) ::usleep(10000);
        }
        if (!links_gone) fail(at + "a link is left: " + failed.error().message);
        if (!tables_gone) fail(at + "a table is left: " + failed.error().message);
        if (fs::exists(o.state_dir + "/" + spec.id)) fail(at + "the state directory is left");
      }
      runtime.CleanupLeftovers({});
      for (const auto& parent : runtime.CgroupParents()) ::rmdir(parent.c_str());
    }
    std::error_code ec;
    fs::remove_all(fs::path(o.state_dir).parent_path(), ec);
    // Egress adds fault points of its own to those of a plain creation.
    if (steps < 22) fail("only " + std::to_string(steps) + " fault points reached");
    if (net_steps != 3) fail(std::to_string(net_steps) + " network steps failed, not 3");
    ::_exit(failures == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the lines above";
}

TEST_F(SandboxPolicyTest, ExecFailureIsReported) {
  auto sb = Make();
  ASSERT_NE(sb, nullptr);
  auto p = RunBlocking(sb->Spawn(Command({"no-such-command"})));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(p.error().message.rfind("spawn: execve no-such-command: ENOENT", 0), 0u)
      << p.error().message;
}

// ---- host id ranges: arithmetic only, no root needed ----

std::string IdProblems(uint32_t base, uint32_t count, const HostIdFiles& files = {}) {
  auto r = CheckHostIdRanges(base, 65536, count, files);
  return r.ok() ? "" : r.error().message;
}

TEST(HostIdRanges, FitBelowTheLargestId) {
  EXPECT_EQ(IdProblems(1000000, 1000), "");
  // 1000000 + 65520 * 65536 still ends below 2^32 - 1; one more sandbox wraps.
  EXPECT_EQ(IdProblems(1000000, 65520), "");
  const std::string wrapped = IdProblems(1000000, 65521);
  EXPECT_NE(wrapped.find("end past 4294967294"), std::string::npos) << wrapped;
  EXPECT_NE(wrapped.find("max_sandboxes 65521"), std::string::npos) << wrapped;
  // The last range may end at 4294967294, the largest valid id, not at (uid_t)-1.
  EXPECT_EQ(IdProblems(0xffffffffu - 65536, 1), "");
  EXPECT_NE(IdProblems(0xffffffffu - 65535, 1), "");
  EXPECT_NE(IdProblems(0xffffffffu - 65536, 65536), "");
}

TEST(HostIdRanges, HoldNoHostUserOrGroup) {
  HostIdFiles files;
  files.passwd =
      "root:x:0:0:root:/root:/bin/bash\nbob:x:1000005:100::/home/bob:/bin/sh\n"
      "broken line\nnobody:x:65534:65534::/:/usr/sbin/nologin\n";
  files.group = "root:x:0:\nbuilders:x:2000000:\n";
  EXPECT_EQ(IdProblems(3000000, 64, files), "");
  const std::string user = IdProblems(1000000, 16, files);
  EXPECT_NE(user.find("hold uid 1000005 of 'bob' in /etc/passwd"), std::string::npos) << user;
  const std::string group = IdProblems(1000000, 32, files);
  EXPECT_NE(group.find("uid 1000005"), std::string::npos) << group;
  EXPECT_NE(group.find("gid 2000000 of 'builders' in /etc/group"), std::string::npos) << group;
  EXPECT_NE(IdProblems(0, 1, files).find("uid 0 of 'root'"), std::string::npos);
}

TEST(HostIdRanges, FollowSubordinateIds) {
  HostIdFiles files;
  files.subuid = "alice:100000:65536\n# comment\nroot:1000000:65536000\n";
  files.subgid = "root:1000000:65536000\n";
  EXPECT_EQ(IdProblems(1000000, 1000, files), "");
  const std::string outside = IdProblems(1000000, 1001, files);
  EXPECT_NE(outside.find("outside every range /etc/subuid gives root"), std::string::npos)
      << outside;
  EXPECT_NE(outside.find("outside every range /etc/subgid gives root"), std::string::npos)
      << outside;
  const std::string alice = IdProblems(65536, 2, files);
  EXPECT_NE(alice.find("overlap /etc/subuid's range 100000..165535 of 'alice'"), std::string::npos)
      << alice;
  // Without ranges for root, any range no one else has will do.
  files.subuid = "alice:100000:65536\n";
  files.subgid.clear();
  EXPECT_EQ(IdProblems(3000000, 64, files), "");
}

}  // namespace
}  // namespace sandstream::sandbox
