// Opening a pseudo-terminal pair from a given devpts instance's ptmx. Both ends are
// close-on-exec; the master is non-blocking, the slave blocking (it becomes a process's 0/1/2).
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"
#include "platform/unique_fd.h"

namespace sandstream {

struct PtyPair {
  UniqueFd master;
  UniqueFd slave;
};

// `ptmx` is a path to a ptmx node ("/dev/ptmx", "/proc/<pid>/root/dev/pts/ptmx"); the slave
// is opened from the same devpts instance (TIOCGPTPEER), unlocked, sized rows x cols.
Result<PtyPair> OpenPty(const std::string& ptmx, uint16_t rows, uint16_t cols);
// TIOCSWINSZ on a master: the terminal's foreground process group gets SIGWINCH.
Result<void> ResizePty(int master, uint16_t rows, uint16_t cols);

}  // namespace sandstream
