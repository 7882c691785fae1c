#include "base/ids.h"

#include <sys/random.h>

#include <cstdint>
#include <cstdio>

namespace sandstream {
namespace {

std::string RandomHex(size_t bytes) {
  uint8_t buf[32];
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(buf + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) {
    out += kHex[buf[i] >> 4];
    out += kHex[buf[i] & 15];
  }
  return out;
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == '-';
}

}  // namespace

std::string NewId(std::string_view prefix) { return std::string(prefix) + RandomHex(8); }

std::string NewApiKey() { return "ss_" + RandomHex(20); }

bool IsValidClientId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  if (!IsIdChar(id[0]) || id[0] == '_' || id[0] == '.' || id[0] == '-') return false;
  for (char c : id) {
    if (!IsIdChar(c)) return false;
  }
  return true;
}

bool SecretEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace sandstream
