// What /proc says of a process's ids.
#pragma once

#include <sys/types.h>

#include <string_view>
#include <vector>

namespace sandstream {

// The numbers of the line `field` ("NSpid", "NSpgid") of /proc/<pid>/status: the id in each pid
// namespace from this process's down to the process's own. Empty when it cannot be read.
std::vector<pid_t> StatusIds(pid_t pid, std::string_view field);

}  // namespace sandstream
