// The parent side of child_report.h: reading a child's failure record up to EOF.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>

#include "sandbox/child_report.h"

namespace sandstream::sandbox {

Result<std::optional<ChildFailure>> ReadChildReport(int fd) {
  ChildFailure f{};
  size_t got = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kChildReportDeadlineMs);
  while (got < sizeof f) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      return Error{ErrorCode::kSandboxSetupFailed,
                   "the process neither started nor failed within " +
                       std::to_string(kChildReportDeadlineMs / 1000) +
                       " s (is its sandbox out of CPU?)"};
    }
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
