// How a process ended: the one truthful exit record every stream finishes with.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/clock.h"

namespace sandstream {

enum class ExitReason { kExited, kSignaled, kTimeout, kIdleTimeout, kKilled, kOom };

std::string_view ExitReasonName(ExitReason reason);
std::optional<ExitReason> ParseExitReason(std::string_view name);

struct ExitRecord {
  int exit_code = 0;          // 128 + signal when killed by one
  std::optional<int> signal;  // the terminating signal, if any
  ExitReason reason = ExitReason::kExited;
  int64_t duration_ms = 0;
  SystemTime ended_at;
};

}  // namespace sandstream
