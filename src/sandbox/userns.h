// User namespaces: a dedicated unprivileged host uid/gid range per sandbox, and the id maps,
// written by the parent (a child that has switched uid is no longer dumpable and cannot).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace sandstream::sandbox {

// Hands out disjoint ranges [base + i * size, base + (i + 1) * size) of host ids.
class IdRangePool {
 public:
  IdRangePool(uint32_t base, uint32_t size, uint32_t count);
  // The first host id of a free range, or nullopt when all are taken.
  std::optional<uint32_t> Acquire();
  // Takes the range that starts at host id `first` (a sandbox an earlier daemon created);
  // false if `first` starts no range of this pool or it is taken.
  bool AcquireAt(uint32_t first);
  void Release(uint32_t first);
  uint32_t size() const { return size_; }
  // The indexes of the ranges taken.
  std::vector<uint32_t> UsedIndexes() const;

 private:
  uint32_t base_;
  uint32_t size_;
  std::vector<bool> used_;
  size_t next_ = 0;
};

// The text of the host's id databases; a missing file is empty.
struct HostIdFiles {
  std::string passwd;
  std::string group;
  std::string subuid;
  std::string subgid;
  static HostIdFiles Read();
};

// The host ids sandboxes take, [base, base + size * count), checked at start-up: they must end
// below 2^32 - 1 (the kernel's invalid id), hold no uid or gid of /etc/passwd or /etc/group, lie
// inside one range that /etc/subuid (and /etc/subgid) give root if they give root any, and
// overlap none they give another user. Every problem is reported at once.
Result<void> CheckHostIdRanges(uint32_t base, uint32_t size, uint32_t count,
                               const HostIdFiles& files);

// The calling thread's ids while it creates a sandbox's user namespace: the kernel charges
// per-user counts (inotify instances and watches, user namespaces, queued signals...) to the
// owner of each user namespace up to the host's, so each sandbox's must be its own host uid,
// never the daemon's root, which every sandbox and the host's root would share. The thread's
// effective uid becomes `owner`, its capabilities and uid 0 for file access stay; its children
// inherit these ids. Only this thread changes; the destructor restores it.
class NamespaceOwner {
 public:
  static Result<std::unique_ptr<NamespaceOwner>> Assume(uid_t owner);
  ~NamespaceOwner();
  NamespaceOwner(const NamespaceOwner&) = delete;
  NamespaceOwner& operator=(const NamespaceOwner&) = delete;

 private:
  NamespaceOwner() = default;
  uid_t euid_ = 0;
  int dumpable_ = 1;
  int pdeath_signal_ = 0;
};

// Writes "0 <host_first> <count>" to /proc/<pid>/uid_map and gid_map.
Result<void> WriteIdMapsFromParent(pid_t pid, uint32_t host_first, uint32_t count);

// In the child, once the maps exist: become root of the new namespace. Async-signal-safe.
void BecomeNamespaceRootInChild(int report_fd);

}  // namespace sandstream::sandbox
