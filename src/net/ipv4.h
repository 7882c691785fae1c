// IPv4 addresses (host byte order) and prefixes of them, as the egress policy, the netlink
// code and the resolver pass them around.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace sandstream::net {

// "a.b.c.d", four decimal octets without leading zeros (so "010.0.0.1" is refused, not read as
// octal the way inet_aton would).
std::optional<uint32_t> ParseAddress(std::string_view text);
std::string FormatAddress(uint32_t addr);

struct Ipv4Prefix {
  uint32_t addr = 0;  // host bits zero
  uint8_t len = 32;

  uint32_t mask() const { return len == 0 ? 0 : ~uint32_t{0} << (32 - len); }
  uint32_t first() const { return addr; }
  uint32_t last() const { return addr | ~mask(); }
  bool Contains(uint32_t a) const { return (a & mask()) == addr; }
  bool Contains(const Ipv4Prefix& p) const { return p.len >= len && Contains(p.addr); }
  bool Overlaps(const Ipv4Prefix& p) const { return Contains(p.addr) || p.Contains(addr); }
  bool operator==(const Ipv4Prefix&) const = default;
};

// "a.b.c.d/n" or a bare address (/32). Host bits past the length are an error: "10.0.0.1/8"
// is more likely a mistake than a wish for 10.0.0.0/8.
Result<Ipv4Prefix> ParsePrefix(std::string_view text);
std::string FormatPrefix(const Ipv4Prefix& p);

}  // namespace sandstream::net
