#include "base/utf8.h"

#include <cstdint>

namespace sandstream {
namespace {

// Length of a valid sequence starting at s[i], or 0 if the bytes there are invalid or
// incomplete; `*incomplete` tells the two apart (a valid prefix cut by the end of input).
size_t ValidSequenceAt(std::string_view s, size_t i, bool* incomplete) {
  *incomplete = false;
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) {
      *incomplete = true;
      return 0;
    }
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t min = k == 1 ? lo : 0x80;
    const uint8_t max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return 0;
  }
  return len;
}

}  // namespace

size_t Utf8CompletePrefix(std::string_view bytes) {
  const size_t n = bytes.size();
  // A code point is at most 4 bytes: only a lead byte among the last 3 can be incomplete.
  const size_t start = n > 3 ? n - 3 : 0;
  for (size_t i = n; i-- > start;) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    bool incomplete = false;
    ValidSequenceAt(bytes, i, &incomplete);
    return incomplete ? i : n;
  }
  return n;
}

size_t Utf8SequenceAt(std::string_view bytes, size_t i) {
  bool incomplete;
  return ValidSequenceAt(bytes, i, &incomplete);
}

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= bytes.size()) {
      uint64_t w;
      __builtin_memcpy(&w, bytes.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= bytes.size()) break;
    bool incomplete;
    const size_t len = ValidSequenceAt(bytes, i, &incomplete);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

void AppendSanitizedUtf8(std::string& out, std::string_view bytes) {
  if (IsValidUtf8(bytes)) {
    out.append(bytes);
    return;
  }
  size_t i = 0;
  while (i < bytes.size()) {
    bool incomplete;
    const size_t len = ValidSequenceAt(bytes, i, &incomplete);
    if (len > 0) {
      out.append(bytes.substr(i, len));
      i += len;
      continue;
    }
    out += "\xEF\xBF\xBD";
    // Skip the maximal subpart: the lead byte plus the continuation bytes that were valid.
    size_t skip = 1;
    const auto b0 = static_cast<uint8_t>(bytes[i]);
    if (b0 >= 0xC2 && b0 <= 0xF4) {
      while (i + skip < bytes.size() && skip < 4) {
        const auto b = static_cast<uint8_t>(bytes[i + skip]);
        if ((b & 0xC0) != 0x80) break;
        bool inc;
        // Stop before a continuation byte that would make the prefix invalid.
        std::string_view probe = bytes.substr(i, skip + 1);
        if (ValidSequenceAt(probe, 0, &inc) == 0 && !inc) break;
        ++skip;
      }
    }
    i += skip;
  }
}

}  // namespace sandstream
