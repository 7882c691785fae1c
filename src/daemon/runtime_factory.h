// Picks the sandbox runtime the config names.
#pragma once

#include <memory>

#include "base/result.h"
#include "daemon/config.h"
#include "sandbox/runtime.h"

namespace sandstream {

Result<std::unique_ptr<sandbox::Runtime>> MakeRuntime(const Config& config);

}  // namespace sandstream
