// The sandbox's own executable, its PID 1 and keeper (init_main.cc), travels inside the
// library as a static executable, so there is no helper binary to find or to keep in step. Each
// daemon writes it out as a file, bound read-only into every sandbox at kInitPathInside and
// exec'd from there: a checkpoint (CRIU) records PID 1's executable by its path, which a memfd
// does not have. The sealed memfd is what upgrades a running keeper in place.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream::sandbox {

// A close-on-exec, sealed memfd holding the executable.
Result<UniqueFd> LoadInitExecutable();

// Where every sandbox sees the executable (a read-only bind of the daemon's file), and execs it.
inline constexpr const char* kInitPathInside = "/dev/.sandstream-init";

// "sandstream-init-<digest of `bytes`>": one name per build of the executable.
std::string InitExecutableName(std::string_view bytes);

// The executable as a file in `dir` (0555), named by its digest and written only if missing: a
// daemon started again leaves the file its sandboxes bind in place (a sandbox whose executable
// was replaced could not be checkpointed), another build adds its own. Returns its path.
Result<std::string> WriteInitExecutable(const std::string& dir);

// In the child: moves `control_fd` to fd 3 (where the executable expects its control socket) and
// `keep_fd`, if any, to fd 4 (held for the daemon), marks every other fd above 2 close-on-exec and
// execs `exe_fd` with `argv`. Async-signal-safe; on failure reports and exits.
[[noreturn]] void ExecEmbeddedInChild(int exe_fd, char* const argv[], int control_fd, int report_fd,
                                      int keep_fd = -1);

}  // namespace sandstream::sandbox
