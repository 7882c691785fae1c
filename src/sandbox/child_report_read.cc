// The parent side of child_report.h: reading a child's failure record up to EOF.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>

#include "platform/fd.h"
#include "sandbox/child_report.h"

namespace sandstream::sandbox {

Op<Result<std::optional<ChildFailure>>> ReadChildReport(int fd) {
  ChildFailure f{};
  size_t got = 0;
  const Deadline deadline = In(std::chrono::milliseconds(kChildReportDeadlineMs));
  (void)SetNonBlocking(fd, true);
  while (got < sizeof f) {
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(&f) + got, sizeof f - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) co_return SysError(ErrorCode::kInternal, "read child report", errno);
    const bool ready = co_await Readable{fd, deadline};
    if (!ready && std::chrono::steady_clock::now() >= deadline) {
      co_return Error{ErrorCode::kSandboxSetupFailed,
                      "the process neither started nor failed within " +
                          std::to_string(kChildReportDeadlineMs / 1000) +
                          " s (is its sandbox out of CPU?)"};
    }
  }
  if (got == 0) co_return std::optional<ChildFailure>();
  if (got < sizeof f) co_return Error{ErrorCode::kInternal, "truncated child report"};
  f.step[sizeof f.step - 1] = '\0';
  co_return std::optional<ChildFailure>(f);
}

Op<Result<void>> AwaitExec(int fd, ErrorCode code, std::string context) {
  const std::string prefix = context.empty() ? std::string() : context + ": ";
  Result<std::optional<ChildFailure>> report = co_await ReadChildReport(fd);
  if (!report) co_return Error{code, prefix + report.error().message};
  if (!report->has_value()) co_return Ok{};
  co_return SysError(code, prefix + (*report)->step, (*report)->err);
}

}  // namespace sandstream::sandbox
