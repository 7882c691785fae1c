#include "process/exit.h"

namespace sandstream {

std::string_view ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kExited: return "exited";
    case ExitReason::kSignaled: return "signaled";
    case ExitReason::kTimeout: return "timeout";
    case ExitReason::kIdleTimeout: return "idle_timeout";
    case ExitReason::kKilled: return "killed";
    case ExitReason::kOom: return "oom";
  }
  return "exited";
}

std::optional<ExitReason> ParseExitReason(std::string_view name) {
  for (ExitReason r : {ExitReason::kExited, ExitReason::kSignaled, ExitReason::kTimeout,
                       ExitReason::kIdleTimeout, ExitReason::kKilled, ExitReason::kOom}) {
    if (ExitReasonName(r) == name) return r;
  }
  return std::nullopt;
}

}  // namespace sandstream
