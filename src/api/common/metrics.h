// A sandbox's CPU, memory and disk samples (service/resource_series.h) as both APIs read them:
// the window a request asks for (`start`, `end`: Unix seconds or RFC 3339).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "api/http.h"
#include "base/result.h"
#include "service/resource_series.h"

namespace sandstream::api {

// ?start= / ?end=: Unix seconds (E2B's) or an RFC 3339 time; nullopt when absent.
// kInvalidRequest for anything else.
Result<std::optional<SystemTime>> TimeQuery(const Context& ctx, std::string_view name);

// The samples of `series` taken in [start, end] (either bound open when absent), oldest first.
std::vector<const ResourceSample*> SamplesIn(const ResourceSeries& series,
                                             std::optional<SystemTime> start,
                                             std::optional<SystemTime> end);

}  // namespace sandstream::api
