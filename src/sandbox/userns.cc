// User namespace ids: the range pool and its start-up check against the host's id databases,
// the namespace's owner, the maps written from the parent, the child's switch.
#include "sandbox/userns.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <string>

#include "platform/fd.h"
#include "platform/unique_fd.h"
#include "sandbox/child_report.h"
#include "sandbox/fault.h"

namespace sandstream::sandbox {
namespace {

constexpr uint64_t kIdLimit = 0xffffffffu;  // (uid_t)-1: no id may be it

struct IdRange {
  std::string owner;
  uint64_t first;
  uint64_t count;
};

// "name:first:count" lines of /etc/subuid or /etc/subgid; anything else is skipped.
std::vector<IdRange> ParseSubIds(const std::string& text) {
  std::vector<IdRange> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    try {
      const uint64_t first = std::stoull(line.substr(a + 1, b - a - 1));
      const uint64_t count = std::stoull(line.substr(b + 1));
      out.push_back({line.substr(0, a), first, count});
    } catch (const std::exception&) {
    }
  }
  return out;
}

// The first "name:x:id..." line of /etc/passwd or /etc/group whose id (field `field`) is in
// [first, end), as "uid 1000005 of 'bob'".
std::optional<std::string> FirstIdIn(const std::string& text, size_t field, const char* what,
                                     uint64_t first, uint64_t end) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::istringstream parts(line);
    for (std::string f; std::getline(parts, f, ':');) fields.push_back(f);
    if (fields.size() <= field || fields[field].empty()) continue;
    try {
      const uint64_t id = std::stoull(fields[field]);
      if (id >= first && id < end) {
        return std::string(what) + " " + std::to_string(id) + " of '" + fields[0] + "'";
      }
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

void CheckSubIds(const std::string& text, const char* file, uint64_t first, uint64_t end,
                 std::vector<std::string>& problems) {
  bool root_has_any = false;
  bool inside_root = false;
  for (const IdRange& r : ParseSubIds(text)) {
    const bool root = r.owner == "root" || r.owner == "0";
    if (root) {
      root_has_any = true;
      inside_root = inside_root || (r.first <= first && end <= r.first + r.count);
    } else if (r.first < end && first < r.first + r.count) {
      problems.push_back(std::string("overlap ") + file + "'s range " + std::to_string(r.first) +
                         ".." + std::to_string(r.first + r.count - 1) + " of '" + r.owner + "'");
    }
  }
  if (root_has_any && !inside_root) {
    problems.push_back(std::string("are outside every range ") + file + " gives root");
  }
}

}  // namespace

HostIdFiles HostIdFiles::Read() {
  HostIdFiles files;
  const std::pair<const char*, std::string*> sources[] = {{"/etc/passwd", &files.passwd},
                                                          {"/etc/group", &files.group},
                                                          {"/etc/subuid", &files.subuid},
                                                          {"/etc/subgid", &files.subgid}};
  for (const auto& [path, text] : sources) {
    if (auto content = ReadFile(path)) *text = std::move(*content);
  }
  return files;
}

Result<void> CheckHostIdRanges(uint32_t base, uint32_t size, uint32_t count,
                               const HostIdFiles& files) {
  const uint64_t end = uint64_t{base} + uint64_t{size} * count;
  std::vector<std::string> problems;
  if (end > kIdLimit) {
    problems.push_back("end past " + std::to_string(kIdLimit - 1) + ", the largest host id");
  }
  const std::pair<std::optional<std::string>, const char*> owners[] = {
      {FirstIdIn(files.passwd, 2, "uid", base, end), "/etc/passwd"},
      {FirstIdIn(files.passwd, 3, "gid", base, end), "/etc/passwd"},
      {FirstIdIn(files.group, 2, "gid", base, end), "/etc/group"},
  };
  for (const auto& [found, file] : owners) {
    if (found) problems.push_back("hold " + *found + " in " + file);
  }
  CheckSubIds(files.subuid, "/etc/subuid", base, end, problems);
  CheckSubIds(files.subgid, "/etc/subgid", base, end, problems);
  if (problems.empty()) return Ok{};
  std::string message = "userns: the sandboxes' host ids " + std::to_string(base) + ".." +
                        std::to_string(end - 1) + " (host_id_base " + std::to_string(base) +
                        " + max_sandboxes " + std::to_string(count) + " x " +
                        std::to_string(size) + ")";
  for (size_t i = 0; i < problems.size(); ++i) message += (i == 0 ? " " : "; ") + problems[i];
  return Error{ErrorCode::kInternal, message};
}

Result<std::unique_ptr<NamespaceOwner>> NamespaceOwner::Assume(uid_t owner) {
  std::unique_ptr<NamespaceOwner> saved(new NamespaceOwner);
  saved->euid_ = ::geteuid();
  saved->dumpable_ = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  ::prctl(PR_GET_PDEATHSIG, &saved->pdeath_signal_, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  if (::syscall(SYS_capget, &header, caps) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "userns: capget", errno);
  }
  // Raw syscalls: glibc's wrappers would change every thread of the daemon.
  if (::syscall(SYS_setresuid, -1, owner, -1) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed,
                    "userns: become owner " + std::to_string(owner), errno);
  }
  // Leaving euid 0 cleared the effective set: restore it, so that creating the namespaces
  // is not an unprivileged one (which some hosts restrict); files are still opened as uid 0.
  if (::syscall(SYS_capset, &header, caps) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "userns: capset", errno);
  }
  ::syscall(SYS_setfsuid, 0);
  return saved;
}

NamespaceOwner::~NamespaceOwner() {
  ::syscall(SYS_setresuid, -1, euid_, -1);
  // An euid change made the process undumpable and cleared its parent-death signal.
  ::prctl(PR_SET_DUMPABLE, dumpable_, 0, 0, 0);
  ::prctl(PR_SET_PDEATHSIG, pdeath_signal_, 0, 0, 0);
}

IdRangePool::IdRangePool(uint32_t base, uint32_t size, uint32_t count)
    : base_(base), size_(size), used_(count, false) {}

std::optional<uint32_t> IdRangePool::Acquire() {
  // Round-robin, so a just-freed range (whose last processes may still be exiting) is the
  // last to be handed out again.
  for (size_t n = 0; n < used_.size(); ++n) {
    size_t i = (next_ + n) % used_.size();
    if (!used_[i]) {
      used_[i] = true;
      next_ = i + 1;
      return base_ + static_cast<uint32_t>(i) * size_;
    }
  }
  return std::nullopt;
}

bool IdRangePool::AcquireAt(uint32_t first) {
  if (first < base_ || (first - base_) % size_ != 0) return false;
  const size_t i = (first - base_) / size_;
  if (i >= used_.size() || used_[i]) return false;
  used_[i] = true;
  return true;
}

std::vector<uint32_t> IdRangePool::UsedIndexes() const {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < used_.size(); ++i) {
    if (used_[i]) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

void IdRangePool::Release(uint32_t first) {
  size_t i = (first - base_) / size_;
  if (i < used_.size()) used_[i] = false;
}

Result<void> WriteIdMapsFromParent(pid_t pid, uint32_t host_first, uint32_t count) {
  const std::string line = "0 " + std::to_string(host_first) + " " + std::to_string(count) + "\n";
  for (const char* map : {"uid_map", "gid_map"}) {
    const std::string path = "/proc/" + std::to_string(pid) + "/" + map;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd || InjectedFault() || ::write(fd.get(), line.data(), line.size()) < 0) {
      return SysError(ErrorCode::kSandboxSetupFailed, std::string("userns: write ") + path, errno);
    }
  }
  return Ok{};
}

void BecomeNamespaceRootInChild(int report_fd) {
  if (InjectedFault() || ::syscall(SYS_setgroups, 0, nullptr) != 0)
    ReportAndExit(report_fd, "userns: setgroups", errno);
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0)
    ReportAndExit(report_fd, "userns: setresgid 0", errno);
  if (::syscall(SYS_setresuid, 0, 0, 0) != 0)
    ReportAndExit(report_fd, "userns: setresuid 0", errno);
}

}  // namespace sandstream::sandbox
