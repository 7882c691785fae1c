// The sandbox's own executable, its PID 1 and keeper (init_main.cc), travels inside the
// library as a static executable and is exec'd from a sealed memfd, so there is no helper
// binary to find or to keep in step.
#pragma once

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream::sandbox {

// A close-on-exec, sealed memfd holding the executable.
Result<UniqueFd> LoadInitExecutable();

// In the child: moves `control_fd` to fd 3 (where the executable expects its control socket) and
// `keep_fd`, if any, to fd 4 (held for the daemon), marks every other fd above 2 close-on-exec and
// execs `exe_fd` with `argv`. Async-signal-safe; on failure reports and exits.
[[noreturn]] void ExecEmbeddedInChild(int exe_fd, char* const argv[], int control_fd, int report_fd,
                                      int keep_fd = -1);

}  // namespace sandstream::sandbox
