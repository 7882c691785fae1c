#include "net/policy.h"

#include <arpa/inet.h>

#include <algorithm>

#include "net/dns.h"

namespace sandstream::net {

namespace {

// A rule that looks like an address (digits, dots, a slash) is one, or an error: "10.0.0.1/8"
// must not fall through to be read as a name.
bool LooksNumeric(std::string_view rule) {
  return !rule.empty() && rule.find_first_not_of("0123456789./") == std::string_view::npos;
}

Result<void> ParseRule(const std::string& rule, std::vector<Ipv4Prefix>& prefixes,
                       std::vector<dns::NamePattern>& names, const char* list) {
  if (LooksNumeric(rule)) {
    auto prefix = ParsePrefix(rule);
    if (!prefix) {
      return Error{ErrorCode::kInvalidRequest,
                   std::string("network.egress.") + list + ": " + prefix.error().message};
    }
    prefixes.push_back(*prefix);
    return Ok{};
  }
  auto pattern = dns::NamePattern::Parse(rule);
  if (!pattern) {
    return Error{ErrorCode::kInvalidRequest,
                 std::string("network.egress.") + list + ": " + pattern.error().message};
  }
  names.push_back(std::move(*pattern));
  return Ok{};
}

}  // namespace

Result<EgressPolicy> ParseEgressPolicy(std::optional<std::vector<std::string>> allow,
                                       std::vector<std::string> deny) {
  EgressPolicy p;
  if (allow && allow->size() > kMaxEgressRules) {
    return Error{ErrorCode::kInvalidRequest, "network.egress.allow: at most " +
                                                 std::to_string(kMaxEgressRules) + " rules"};
  }
  if (deny.size() > kMaxEgressRules) {
    return Error{ErrorCode::kInvalidRequest, "network.egress.deny: at most " +
                                                 std::to_string(kMaxEgressRules) + " rules"};
  }
  if (allow) {
    for (const auto& rule : *allow) {
      if (auto r = ParseRule(rule, p.allow_prefixes, p.allow_names, "allow"); !r) {
        return std::move(r).error();
      }
    }
  }
  for (const auto& rule : deny) {
    if (auto r = ParseRule(rule, p.deny_prefixes, p.deny_names, "deny"); !r) {
      return std::move(r).error();
    }
  }
  p.allow = std::move(allow);
  p.deny = std::move(deny);
  return p;
}

bool EgressPolicy::AllowsName(std::string_view name) const {
  if (any_address()) {
    return std::none_of(deny_names.begin(), deny_names.end(),
                        [&](const dns::NamePattern& p) { return p.Matches(name); });
  }
  return dns::NameAllowed(name, allow_names, deny_names);
}

const std::vector<Ipv4Prefix>& NeverRanges() {
  static const std::vector<Ipv4Prefix> kNever = [] {
    std::vector<Ipv4Prefix> v;
    for (const char* text : {"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8",
                             "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16",
                             "224.0.0.0/3"}) {
      v.push_back(*ParsePrefix(text));
    }
    return v;
  }();
  return kNever;
}

bool IsPublicAddress(std::string_view ip) {
  const auto public_v4 = [](uint32_t a) {
    const auto& never = NeverRanges();
    return std::none_of(never.begin(), never.end(), [&](const Ipv4Prefix& p) {
      return p.Contains(a);
    });
  };
  if (auto v4 = ParseAddress(ip)) return public_v4(*v4);
  in6_addr a{};
  if (ip.size() >= INET6_ADDRSTRLEN || ::inet_pton(AF_INET6, std::string(ip).c_str(), &a) != 1) {
    return false;
  }
  const uint8_t* b = a.s6_addr;
  const auto embedded = [&] {
    return uint32_t{b[12]} << 24 | uint32_t{b[13]} << 16 | uint32_t{b[14]} << 8 | b[15];
  };
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(b, b + 12, kMapped) || std::equal(b, b + 12, kNat64)) {
    return public_v4(embedded());
  }
  const bool global = (b[0] & 0xe0) == 0x20;
  const bool documentation = b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8;
  return global && !documentation;
}

bool IsRegistryAddress(std::string_view ip, const OwnAddresses& own) {
  if (!IsPublicAddress(ip)) return false;
  static const Ipv4Prefix kBenchmarking = *ParsePrefix("198.18.0.0/15");
  const auto allowed_v4 = [&](uint32_t a) {
    return !kBenchmarking.Contains(a) && std::find(own.v4.begin(), own.v4.end(), a) == own.v4.end();
  };
  if (auto v4 = ParseAddress(ip)) return allowed_v4(*v4);
  in6_addr a{};
  if (::inet_pton(AF_INET6, std::string(ip).c_str(), &a) != 1) return false;
  std::array<uint8_t, 16> bytes{};
  std::copy(a.s6_addr, a.s6_addr + 16, bytes.begin());
  if (std::find(own.v6.begin(), own.v6.end(), bytes) != own.v6.end()) return false;
  // IsPublicAddress let an embedded IPv4 address through only in the mapped and NAT64 forms.
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr uint8_t kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(bytes.begin(), bytes.begin() + 12, kMapped) ||
      std::equal(bytes.begin(), bytes.begin() + 12, kNat64)) {
    return allowed_v4(uint32_t{bytes[12]} << 24 | uint32_t{bytes[13]} << 16 |
                      uint32_t{bytes[14]} << 8 | bytes[15]);
  }
  return true;
}

EgressSets CompileEgress(const EgressPolicy& policy, const Ipv4Prefix& pool,
                         const std::vector<uint32_t>& host_addresses) {
  EgressSets sets;
  sets.deny = policy.deny_prefixes;
  sets.deny.push_back(pool);
  sets.never = NeverRanges();
  sets.never.push_back(pool);
  auto named_private = [&](const Ipv4Prefix& p) {
    if (p.len == 32 && std::find(host_addresses.begin(), host_addresses.end(), p.addr) !=
                           host_addresses.end()) {
      return true;
    }
    return std::any_of(sets.never.begin(), sets.never.end(),
                       [&](const Ipv4Prefix& n) { return n.Contains(p); });
  };
  if (policy.any_address()) sets.allow.push_back(Ipv4Prefix{0, 0});
  for (const auto& p : policy.allow_prefixes) {
    (named_private(p) ? sets.allow_private : sets.allow).push_back(p);
  }
  return sets;
}

}  // namespace sandstream::net
