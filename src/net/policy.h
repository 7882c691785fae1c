// The egress policy of one sandbox: what the client asked for (rules as written: CIDRs and
// name patterns), and what the kernel gets for it (the address sets of the sandbox's table,
// docs/network/egress-design.md §3.4).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "net/dns.h"
#include "net/ipv4.h"

namespace sandstream::net {

struct EgressPolicy {
  // The rules as the client wrote them, kept to answer with and to persist. No allow list
  // (nullopt) means every public address and every name; an empty one means nothing.
  std::optional<std::vector<std::string>> allow;
  std::vector<std::string> deny;

  // Parsed: each rule is an address, a prefix, or a name pattern ("pypi.org", "*.github.com",
  // "*"); deny beats allow.
  std::vector<Ipv4Prefix> allow_prefixes;
  std::vector<dns::NamePattern> allow_names;
  std::vector<Ipv4Prefix> deny_prefixes;
  std::vector<dns::NamePattern> deny_names;

  bool any_address() const { return !allow.has_value(); }
  // Whether the sandbox's resolver answers `name` (lowercase, no trailing dot): allowed by a
  // pattern, or by no allow list at all; and no deny pattern matches it.
  bool AllowsName(std::string_view name) const;
  // Whether the answers for allowed names must be pinned into the sandbox's table: only when
  // addresses are not open already (any_address()).
  bool PinsAnswers() const { return !any_address(); }
};

// At most this many rules per list: the sets stay small and the table's add fast.
inline constexpr size_t kMaxEgressRules = 256;

// Reads allow and deny lists of rules; errors are kInvalidRequest naming the rule.
Result<EgressPolicy> ParseEgressPolicy(std::optional<std::vector<std::string>> allow,
                                       std::vector<std::string> deny);

// What a sandbox may never reach unless a rule names it: this network, private, shared,
// loopback, link-local, IETF protocol, multicast and reserved ranges.
const std::vector<Ipv4Prefix>& NeverRanges();
// Whether `ip` (IPv4 or IPv6, as text) is a public unicast address: IPv4 outside NeverRanges();
// IPv6 in 2000::/3 but not documentation's 2001:db8::/32, or an IPv4-mapped or NAT64
// (64:ff9b::/96) address whose IPv4 address is public.
bool IsPublicAddress(std::string_view ip);

// The node's own addresses, every interface's (HostOwnAddresses in egress.h reads them).
struct OwnAddresses {
  std::vector<uint32_t> v4;
  std::vector<std::array<uint8_t, 16>> v6;
};
// Whether a registry pull (to a host the operator did not name) may connect to `ip`: a public
// address, outside the benchmarking range 198.18.0.0/15 (which egress leaves to its rules: a
// sandbox may be pointed at it, a pull may not) and none of the node's own (`own`; an
// IPv4-mapped or NAT64 form of one is one too), where the node's services listen.
bool IsRegistryAddress(std::string_view ip, const OwnAddresses& own);

// The address sets of a sandbox's table, by precedence (highest first): deny (the policy's
// deny list and the whole pool, so sandboxes never reach each other), allow_private (allow
// rules lying wholly inside the never ranges or on one of the host's addresses: named
// explicitly, so reachable), never, allow (every other allow rule; "0.0.0.0/0" for no list).
struct EgressSets {
  std::vector<Ipv4Prefix> deny;
  std::vector<Ipv4Prefix> allow_private;
  std::vector<Ipv4Prefix> never;
  std::vector<Ipv4Prefix> allow;
};

EgressSets CompileEgress(const EgressPolicy& policy, const Ipv4Prefix& pool,
                         const std::vector<uint32_t>& host_addresses);

}  // namespace sandstream::net
