// The sandbox's own executables, PID 1 (init_main.cc) and the spawner (spawner_main.cc),
// travel inside the library as static executables and are exec'd from sealed memfds, so there
// is no helper binary to find or to keep in step.
#pragma once

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream::sandbox {

enum class Embedded { kInit, kSpawner };

// A close-on-exec, sealed memfd holding the executable.
Result<UniqueFd> LoadEmbeddedExecutable(Embedded which);

// In the child: moves `control_fd` to fd 3 (where both executables expect their control
// socket) and `keep_fd`, if any, to fd 4 (held for the daemon), marks every other fd above 2
// close-on-exec and execs `exe_fd` with `argv`. Async-signal-safe; on failure reports and exits.
[[noreturn]] void ExecEmbeddedInChild(int exe_fd, char* const argv[], int control_fd,
                                      int report_fd, int keep_fd = -1);

}  // namespace sandstream::sandbox
