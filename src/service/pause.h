// How a sandbox is paused and what pauses it: the types the service, its records (codec.h)
// and the API share. The steps themselves are in service_lifecycle.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/clock.h"

namespace sandstream {

// How a sandbox is paused. kFreeze: every process stopped where it is, its memory kept
// (the cgroup freezer). kCheckpoint: its processes written to disk and their memory freed.
enum class PauseMode { kFreeze, kCheckpoint };
std::string_view PauseModeName(PauseMode mode);
std::optional<PauseMode> ParsePauseMode(std::string_view name);

// A sandbox that pauses itself once nothing has asked anything of it for `idle_seconds`.
struct AutoPause {
  int64_t idle_seconds = 0;
  PauseMode mode = PauseMode::kFreeze;
};

// A paused sandbox: how, since when, and when it is deleted if nobody resumes it
// (paused_ttl_seconds; its own TTL does not run while it is paused).
struct PauseState {
  PauseMode mode = PauseMode::kFreeze;
  SystemTime at;
  SteadyTime since;
  SystemTime until;
};

}  // namespace sandstream
