#include "sandbox/child_report.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

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

Result<std::optional<ChildFailure>> ReadChildReport(int fd) {
  ChildFailure f{};
  size_t got = 0;
  while (got < sizeof f) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&f) + got, sizeof f - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SysError(ErrorCode::kInternal, "read child report", errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return std::optional<ChildFailure>();
  if (got < sizeof f) return Error{ErrorCode::kInternal, "truncated child report"};
  f.step[sizeof f.step - 1] = '\0';
  return std::optional<ChildFailure>(f);
}

Result<void> AwaitExec(int fd, ErrorCode code, std::string_view context) {
  const std::string prefix = context.empty() ? std::string() : std::string(context) + ": ";
  auto report = ReadChildReport(fd);
  if (!report) return Error{code, prefix + report.error().message};
  if (!report->has_value()) return Ok{};
  return SysError(code, prefix + (*report)->step, (*report)->err);
}

}  // namespace sandstream::sandbox
