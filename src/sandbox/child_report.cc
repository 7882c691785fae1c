// The child side of child_report.h: async-signal-safe, also compiled into the spawner.
#include "sandbox/child_report.h"

#include <unistd.h>

#include <cerrno>

namespace sandstream::sandbox {

void ReportAndExit(int fd, const char* step, int err) {
  ChildFailure f{};
  size_t i = 0;
  for (; step[i] != '\0' && i + 1 < sizeof f.step; ++i) f.step[i] = step[i];
  f.step[i] = '\0';
  f.err = err;
  ssize_t n;
  do {
    n = ::write(fd, &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  ::_exit(127);
}

}  // namespace sandstream::sandbox
