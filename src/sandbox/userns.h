// User namespaces: a dedicated unprivileged host uid/gid range per sandbox, and the id maps,
// written by the parent (a child that has switched uid is no longer dumpable and cannot).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "base/result.h"

namespace sandstream::sandbox {

// Hands out disjoint ranges [base + i * size, base + (i + 1) * size) of host ids.
class IdRangePool {
 public:
  IdRangePool(uint32_t base, uint32_t size, uint32_t count);
  // The first host id of a free range, or nullopt when all are taken.
  std::optional<uint32_t> Acquire();
  void Release(uint32_t first);
  uint32_t size() const { return size_; }

 private:
  uint32_t base_;
  uint32_t size_;
  std::vector<bool> used_;
  size_t next_ = 0;
};

// Writes "0 <host_first> <count>" to /proc/<pid>/uid_map and gid_map.
Result<void> WriteIdMapsFromParent(pid_t pid, uint32_t host_first, uint32_t count);

// In the child, once the maps exist: become root of the new namespace. Async-signal-safe.
void BecomeNamespaceRootInChild(int report_fd);

}  // namespace sandstream::sandbox
