// Picks the sandbox runtime the config names.
#pragma once

#include <memory>

#include "base/result.h"
#include "daemon/config.h"
#include "net/egress.h"
#include "sandbox/runtime.h"

namespace sandstream {

// Egress, when the config turns it on (egress_pool) and the runtime isolates networks.
std::shared_ptr<net::Egress> MakeEgress(const Config& config);
Result<std::unique_ptr<sandbox::Runtime>> MakeRuntime(const Config& config,
                                                      std::shared_ptr<net::Egress> egress);

}  // namespace sandstream
