#include "net/ipv4.h"

namespace sandstream::net {

std::optional<uint32_t> ParseAddress(std::string_view text) {
  uint32_t addr = 0;
  for (int octet = 0; octet < 4; ++octet) {
    if (octet > 0) {
      if (text.empty() || text.front() != '.') return std::nullopt;
      text.remove_prefix(1);
    }
    size_t digits = 0;
    uint32_t value = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
      value = value * 10 + static_cast<uint32_t>(text[digits] - '0');
      if (++digits > 3) return std::nullopt;
    }
    if (digits == 0 || value > 255 || (digits > 1 && text.front() == '0')) return std::nullopt;
    text.remove_prefix(digits);
    addr = addr << 8 | value;
  }
  if (!text.empty()) return std::nullopt;
  return addr;
}

std::string FormatAddress(uint32_t addr) {
  return std::to_string(addr >> 24) + "." + std::to_string(addr >> 16 & 0xff) + "." +
         std::to_string(addr >> 8 & 0xff) + "." + std::to_string(addr & 0xff);
}

Result<Ipv4Prefix> ParsePrefix(std::string_view text) {
  const size_t slash = text.find('/');
  auto addr = ParseAddress(text.substr(0, slash));
  if (!addr) {
    return Error{ErrorCode::kInvalidRequest, "not an IPv4 address or prefix: " + std::string(text)};
  }
  Ipv4Prefix p{*addr, 32};
  if (slash != std::string_view::npos) {
    std::string_view len = text.substr(slash + 1);
    if (len.empty() || len.size() > 2 || (len.size() == 2 && len[0] == '0') ||
        len.find_first_not_of("0123456789") != std::string_view::npos || std::stoi(std::string(len)) > 32) {
      return Error{ErrorCode::kInvalidRequest, "prefix length must be 0 to 32: " + std::string(text)};
    }
    p.len = static_cast<uint8_t>(std::stoi(std::string(len)));
  }
  if ((p.addr & ~p.mask()) != 0) {
    return Error{ErrorCode::kInvalidRequest,
                 "address has bits set past its prefix length (meant " +
                     FormatPrefix(Ipv4Prefix{p.addr & p.mask(), p.len}) + "?): " + std::string(text)};
  }
  return p;
}

std::string FormatPrefix(const Ipv4Prefix& p) {
  return FormatAddress(p.addr) + "/" + std::to_string(p.len);
}

}  // namespace sandstream::net
