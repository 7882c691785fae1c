// The sandbox's PID 1 (init_main.cc) travels inside the library as a static executable and is
// exec'd from a sealed memfd, so there is no helper binary to find or to keep in step.
#pragma once

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream::sandbox {

// A close-on-exec, sealed memfd holding the init executable.
Result<UniqueFd> LoadInitExecutable();

// In the child, as root of the sandbox's namespaces, after pivot_root: moves `control_fd` to
// fd 3 and execs init. Async-signal-safe; on failure reports and exits.
[[noreturn]] void ExecInitInChild(int init_fd, int control_fd, int report_fd);

}  // namespace sandstream::sandbox
