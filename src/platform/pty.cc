#include "platform/pty.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>

#include <cerrno>

namespace sandstream {

Result<PtyPair> OpenPty(const std::string& ptmx, uint16_t rows, uint16_t cols) {
  PtyPair pair;
  pair.master.reset(::open(ptmx.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (!pair.master) return SysError(ErrorCode::kSandboxSetupFailed, "pty: open " + ptmx, errno);
  int unlock = 0;
  if (::ioctl(pair.master.get(), TIOCSPTLCK, &unlock) != 0) {
    return SysError(ErrorCode::kSandboxSetupFailed, "pty: unlock", errno);
  }
  // By fd rather than by path: the slave's path only means something inside the sandbox.
  pair.slave.reset(::ioctl(pair.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!pair.slave) return SysError(ErrorCode::kSandboxSetupFailed, "pty: open peer", errno);
  if (auto r = ResizePty(pair.master.get(), rows, cols); !r) return std::move(r).error();
  return pair;
}

Result<void> ResizePty(int master, uint16_t rows, uint16_t cols) {
  winsize size{};
  size.ws_row = rows;
  size.ws_col = cols;
  if (::ioctl(master, TIOCSWINSZ, &size) != 0) {
    return SysError(ErrorCode::kInternal, "pty: resize", errno);
  }
  return Ok{};
}

}  // namespace sandstream
