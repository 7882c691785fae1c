// CPU lists as the kernel writes them ("0-3,8,10-11", cpuset.cpus, /sys/devices/system/cpu/online)
// and the CPUs a sandbox is given: pure functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandstream::sandbox {

// The CPUs of a list, ascending and without repeats; nullopt when it is not a list (an empty
// or blank text is the empty list).
std::optional<std::vector<int>> ParseCpuList(std::string_view text);

// The kernel's form of `cpus` (ascending): "0-2,5".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs of a sandbox limited to `cpu_percent` (100 = one CPU): as many of `available` as
// its limit rounds up to, taken in turn from `slot * count` so that sandboxes spread over the
// host's CPUs instead of all sharing the first; all of `available` when the limit covers them.
std::vector<int> PickCpus(const std::vector<int>& available, int64_t cpu_percent, uint32_t slot);

}  // namespace sandstream::sandbox
