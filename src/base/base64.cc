#include "base/base64.h"

#include <cstdint>

namespace sandstream {
namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Two output characters per 12 input bits: half the lookups of the one-character table. This
// runs over every byte of a base64 stream.
struct PairTable {
  uint16_t pairs[4096];
  PairTable() {
    for (int v = 0; v < 4096; ++v) {
      const char two[2] = {kAlphabet[v >> 6], kAlphabet[v & 63]};
      __builtin_memcpy(&pairs[v], two, 2);
    }
  }
};
const PairTable kPairs;

}  // namespace

void AppendBase64(std::string& out, std::string_view bytes) {
  const size_t start = out.size();
  out.resize(start + (bytes.size() + 2) / 3 * 4);
  char* p = out.data() + start;
  const auto* in = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8) | in[i + 2];
    __builtin_memcpy(p, &kPairs.pairs[v >> 12], 2);
    __builtin_memcpy(p + 2, &kPairs.pairs[v & 4095], 2);
    p += 4;
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t{in[i]} << 16;
    if (i + 1 < bytes.size()) v |= uint32_t{in[i + 1]} << 8;
    *p++ = kAlphabet[v >> 18];
    *p++ = kAlphabet[(v >> 12) & 63];
    *p++ = i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    *p++ = '=';
  }
}

std::string Base64(std::string_view bytes) {
  std::string out;
  AppendBase64(out, bytes);
  return out;
}

std::optional<std::string> DecodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;
      v[k] = Value(c);
      if (v[k] < 0) return std::nullopt;
    }
    const uint32_t w = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) |
                       uint32_t(v[3]);
    out += static_cast<char>(w >> 16);
    if (pad < 2) out += static_cast<char>((w >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(w & 0xFF);
  }
  return out;
}

}  // namespace sandstream
