// The host side of egress for every sandbox of a daemon: the shared `table inet` (verdicts,
// NAT, the connection cap), and per sandbox its routed /31 veth pair and its `table netdev`
// holding the policy and the resolver's pins (docs/network/egress-design.md §3). A sandbox is
// known by its slot, the index of its id range: names and addresses derive from it, so a
// restarted daemon finds the same ones.
//
// Every call but the accessors talks to the kernel over netlink and may wait (rtnl_lock is
// held for tens of milliseconds by another namespace's teardown), so the daemon makes them
// from threads of its own, never from the I/O thread. Calls are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "net/ipv4.h"
#include "net/policy.h"

namespace sandstream::net {

class Nftables;

struct EgressOptions {
  Ipv4Prefix pool;                  // slot i has pool + 2i (gateway) and pool + 2i + 1
  uint32_t mark_mask = 0x0f000000;  // three bits of it mark the verdict classes
  uint32_t max_connections = 1024;  // per sandbox
  std::vector<uint32_t> resolvers;  // upstream DNS, for the resolver (not used here)
};

class Egress {
 public:
  explicit Egress(EgressOptions options);
  ~Egress();
  Egress(const Egress&) = delete;
  Egress& operator=(const Egress&) = delete;

  const EgressOptions& options() const { return options_; }
  uint32_t Gateway(uint32_t slot) const { return options_.pool.addr + 2 * slot; }
  uint32_t Address(uint32_t slot) const { return Gateway(slot) + 1; }
  static std::string Device(uint32_t slot) { return "ss-" + std::to_string(slot); }
  static std::string Table(uint32_t slot) { return "ss_" + std::to_string(slot); }

  // The daemon's API port, refused to every sandbox even on addresses a rule names. Takes
  // effect at the next Prepare (Attach prepares when needed).
  void SetApiPort(uint16_t port);
  // Turns forwarding on (net.ipv4.ip_forward, the one sysctl egress needs), checks the pool
  // against the host's routes and (re)loads the shared table. Attach does it the first time.
  Result<void> Prepare();

  // Gives slot's sandbox (network namespace `netns_fd`) its veth pair and its table for
  // `policy`. A link of an earlier sandbox of the slot still being torn down by the kernel is
  // waited for (up to 2 s). On failure nothing of it is left.
  Result<void> Attach(uint32_t slot, int netns_fd, const EgressPolicy& policy);
  // Gives slot's attached sandbox `policy` in place of the one it had: its address sets are
  // replaced and its pins dropped in one transaction, then the connections its address had are
  // removed from conntrack, so none opened under the old rules goes on.
  Result<void> Update(uint32_t slot, const EgressPolicy& policy);
  // Removes slot's table (its pins go with it) and the connections its address had in
  // conntrack, so the slot's next sandbox rides none of them. The veth pair goes with the
  // sandbox's network namespace. Idempotent.
  Result<void> Detach(uint32_t slot);
  // Lets slot's sandbox reach `addr` for `ttl` (clamped, plus a grace) from now: an answer of
  // its resolver. A pin is never shortened.
  Result<void> Pin(uint32_t slot, uint32_t addr, std::chrono::seconds ttl);
  // At start: removes tables and links of slots not in `live` (sandboxes that are gone), and
  // the connections their addresses had.
  void CleanupLeftovers(const std::vector<uint32_t>& live);
  // Slot's sandbox was taken back from an earlier daemon: its table may hold pins this one
  // does not know, which its first pin of each address replaces rather than adds to.
  void Adopted(uint32_t slot);

  // Fault injection for tests (sandbox/fault.h): Attach's steps fail, with errno EIO, where
  // `fault` says so.
  using FaultPoint = bool (*)();
  void SetFaultPoint(FaultPoint fault) { fault_ = fault; }

  // Pins last at least this long and at most this (answers' TTLs are clamped to it), plus the
  // grace, so a client that connects just as its cached answer expires still gets through.
  static constexpr std::chrono::seconds kMinPin{30};
  static constexpr std::chrono::seconds kMaxTtl{3600};
  static constexpr std::chrono::seconds kPinGrace{30};
  // Addresses open at once per sandbox through its resolver: the kernel's set, and this
  // daemon's memory of it, stay bounded whatever names a sandbox resolves.
  static constexpr size_t kMaxPins = 4096;

 private:
  Result<void> PrepareLocked();
  Result<Nftables*> NftLocked();

  bool Faulted() const { return fault_ != nullptr && fault_(); }

  const EgressOptions options_;
  FaultPoint fault_ = nullptr;
  std::mutex mu_;  // guards everything below
  std::unique_ptr<Nftables> nft_;
  uint16_t api_port_ = 0;
  bool prepared_ = false;
  std::vector<uint32_t> host_addresses_;
  // Per slot, address -> when its pin expires: the kernel of Debian 12 (6.1) does not extend
  // an element's timeout on a re-add, so a longer pin replaces the element.
  std::map<uint32_t, std::map<uint32_t, std::chrono::steady_clock::time_point>> pins_;
  std::set<uint32_t> adopted_;  // slots whose table an earlier daemon filled
};

// The host's own IPv4 addresses (getifaddrs), for CompileEgress.
std::vector<uint32_t> HostAddresses();
// The host's own IPv4 and IPv6 addresses (getifaddrs), for IsRegistryAddress.
OwnAddresses HostOwnAddresses();

}  // namespace sandstream::net
