// A sandbox's routed veth pair over raw rtnetlink (no library): blocking calls for a worker
// thread, never the I/O thread. They switch the calling thread's netns for a moment, so they
// must not run on a thread that anything else expects to stay put.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace sandstream::net {

struct VethSpec {
  std::string host_name;  // the host end, e.g. "ss-7"
  int netns_fd = -1;      // the sandbox's netns (fresh: only lo, so eth0 becomes ifindex 2)
  uint32_t gateway = 0;   // the host end's address, /31
  uint32_t address = 0;   // the sandbox end's address, gateway + 1
};

// In the calling thread's netns: the pair host_name <-> "eth0" with eth0 born in netns_fd,
// gateway/31 on the host end (up); inside: address/31 on eth0, eth0 and lo up, default route
// via gateway. IPv6 address generation is off on both ends (no link-local, no RS/MLD chatter).
// On failure nothing is left behind.
Result<void> CreateVeth(const VethSpec& spec);

bool LinkExists(std::string_view name);
// The names of this netns's links that start with prefix.
Result<std::vector<std::string>> ListLinks(std::string_view prefix);
// A missing link is success. Costs 12-42 ms of kernel time (RCU under rtnl): orphan cleanup and
// failure paths only; a sandbox's pair goes away with its netns.
Result<void> DeleteLink(std::string_view name);

}  // namespace sandstream::net
