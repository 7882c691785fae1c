// Conntrack cleanup for a reused sandbox address, over ctnetlink with libmnl: a blocking call
// for a worker thread. Without it a new sandbox could ride an old flow that `ct state
// established` still admits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/result.h"

namespace sandstream::net {

// Deletes every IPv4 conntrack entry of the calling thread's netns whose original source is
// addr, and says how many went. No conntrack in the kernel: 0.
Result<size_t> FlushConntrackFrom(uint32_t addr);

}  // namespace sandstream::net
