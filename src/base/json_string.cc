#include "base/json_string.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "base/utf8.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sandstream {
namespace {

// Room kept beyond the worst case of what is left to write: a whole vector store, an 8-byte
// escape store and the closing quote may land in it.
constexpr size_t kSlack = 64;

// The JSON escape of every byte that needs one (`len` 0 for the others), padded to 8 bytes so
// that one store writes any of them.
struct EscapeTable {
  char text[256][8] = {};
  uint8_t len[256] = {};

  constexpr EscapeTable() {
    constexpr char kHex[] = "0123456789abcdef";
    for (int c = 0; c < 0x20; ++c) {
      const char six[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      for (int k = 0; k < 6; ++k) text[c][k] = six[k];
      len[c] = 6;
    }
    const char short_forms[][2] = {{'"', '"'}, {'\\', '\\'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
    for (const auto& [c, form] : short_forms) {
      const auto i = static_cast<unsigned char>(c);
      text[i][0] = '\\';
      text[i][1] = form;
      len[i] = 2;
    }
  }
};
constexpr EscapeTable kEscapes;

bool IsPlainAscii(unsigned char c) {
  return c < 0x80 && kEscapes.len[c] == 0;
}

// Makes at least `room` bytes of room at `p`, doubling the string but never past the worst
// case of the `remaining` input bytes (six output bytes each): a few escapes early in a long
// plain text must not allocate six times its size. Returns `p` moved into the new buffer.
[[gnu::noinline]] char* Grow(std::string& out, char* p, size_t remaining, size_t room) {
  const size_t used = static_cast<size_t>(p - out.data());
  const size_t worst = 6 * remaining + kSlack;
  out.resize(used + std::max(room, std::min(worst, 2 * out.size() - used)));
  return out.data() + used;
}

// Writes the escapes of the run of bytes from in[i] that need one, up to `limit` (the end of
// the text); returns the index after what it wrote. Every path keeps room for the rest of the
// text at one byte each plus kSlack; an escape that would break that stops the run short, for
// the caller to Grow outside its loop (a call inside would cost every iteration its registers).
[[gnu::always_inline]] inline size_t WriteEscapes(char*& p, const char* end, const char* in,
                                                  size_t i, size_t limit) {
  auto c = static_cast<unsigned char>(in[i]);
  do {
    if (static_cast<size_t>(end - p) < limit - i + kSlack + 5) break;
    std::memcpy(p, kEscapes.text[c], 8);
    p += kEscapes.len[c];
    if (++i == limit) break;
    c = static_cast<unsigned char>(in[i]);
  } while (kEscapes.len[c] != 0);
  return i;
}

// Whether WriteEscapes stopped short of the end of its run for want of room.
bool StoppedShort(const char* in, size_t i, size_t limit) {
  return i < limit && kEscapes.len[static_cast<unsigned char>(in[i])] != 0;
}

// Length of the valid UTF-8 sequence at s[i] (a byte >= 0x80) within s[0, n), or 0: the same
// answer as Utf8SequenceAt, inline.
[[gnu::always_inline]] inline size_t SequenceLength(const unsigned char* s, size_t i, size_t n) {
  const unsigned b0 = s[i];
  unsigned lo = 0x80;  // allowed range of the second byte
  unsigned hi = 0xBF;
  size_t len;
  if (b0 < 0xC2) {
    return 0;
  } else if (b0 < 0xE0) {
    len = 2;
  } else if (b0 < 0xF0) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 < 0xF5) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
  }
  return len;
}

// 8 bytes at a time in a 64-bit word: the portable path.
struct SwarBlock {
  static constexpr size_t kWidth = 8;

  // Copies kWidth bytes from `in` to `p`; returns how many of them come before the first that
  // needs attention (a control, '"', '\\' or non-ASCII byte), kWidth when none does.
  static size_t CopyPlain(const char* in, char* p) {
    constexpr uint64_t kOnes = 0x0101010101010101ULL;
    constexpr uint64_t kHigh = 0x8080808080808080ULL;
    uint64_t w;
    std::memcpy(&w, in, 8);
    std::memcpy(p, &w, 8);
    auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
    const uint64_t control = (w - kOnes * 0x20) & ~w & kHigh;
    const uint64_t bits =
        (w & kHigh) | control | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\'));
    if (bits == 0) return kWidth;
    // Borrows run towards the high bytes, flagging plain bytes above a flagged one: exact for
    // the first byte on little-endian machines; on big-endian ones it may stop early at a plain
    // byte, which the caller then copies alone.
    if constexpr (std::endian::native == std::endian::little) {
      return static_cast<size_t>(std::countr_zero(bits)) / 8;
    } else {
      return static_cast<size_t>(std::countl_zero(bits)) / 8;
    }
  }
};

#if defined(__x86_64__)
// 16 bytes at a time with SSE2, part of every x86-64.
struct Sse2Block {
  static constexpr size_t kWidth = 16;

  static size_t CopyPlain(const char* in, char* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
    // A signed compare: bytes >= 0x80 are negative, so it finds them along with the controls.
    const __m128i attention = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                                           _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                        _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
    const auto bits = static_cast<uint32_t>(_mm_movemask_epi8(attention));
    return bits == 0 ? kWidth : static_cast<size_t>(std::countr_zero(bits));
  }
};
#endif

// The string body of `text` at `p` (room as WriteEscapes says), plain runs found a Block at a
// time and multi-byte sequences checked one by one. Returns the end of what it wrote, or
// nullptr for invalid UTF-8.
template <class Block>
char* AppendBodyByBlocks(std::string& out, char* p, std::string_view text) {
  const char* in = text.data();
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  const size_t n = text.size();
  size_t i = 0;
  for (;;) {
    const char* end = out.data() + out.size();
    for (;;) {
      for (;;) {
        if (i + Block::kWidth > n) {
          while (i < n && IsPlainAscii(bytes[i])) *p++ = in[i++];
          break;
        }
        const size_t k = Block::CopyPlain(in + i, p);
        i += k;
        p += k;
        if (k < Block::kWidth) break;
      }
      if (i >= n) return p;
      if (IsPlainAscii(bytes[i])) {
        *p++ = in[i++];
      } else if (bytes[i] < 0x80) {
        i = WriteEscapes(p, end, in, i, n);
        if (StoppedShort(in, i, n)) break;
      } else {
        // Non-Latin text is mostly multi-byte: stay here until the next ASCII byte.
        do {
          const size_t len = SequenceLength(bytes, i, n);
          if (len == 0) return nullptr;
          for (size_t k = 0; k < len; ++k) p[k] = in[i + k];
          p += len;
          i += len;
        } while (i < n && bytes[i] >= 0x80);
      }
    }
    p = Grow(out, p, n - i, n - i + kSlack + 5);
  }
}

#if defined(__x86_64__)
// The AVX2 path: 32 bytes at a time, and UTF-8 checked 32 bytes at a time too, with the lookup
// tables of Keiser and Lemire ("Validating UTF-8 in less than one instruction per byte", 2021).
// Each byte is checked from itself and the three before it, so a block needs nothing from the
// one before but those three bytes, read again from memory.

constexpr uint8_t kTooShort = 1 << 0;
constexpr uint8_t kTooLong = 1 << 1;
constexpr uint8_t kOverlong3 = 1 << 2;
constexpr uint8_t kTooLarge = 1 << 3;
constexpr uint8_t kSurrogate = 1 << 4;
constexpr uint8_t kOverlong2 = 1 << 5;
constexpr uint8_t kTooLarge1000 = 1 << 6;
constexpr uint8_t kOverlong4 = 1 << 6;
constexpr uint8_t kTwoConts = 1 << 7;
constexpr uint8_t kCarry = kTooShort | kTooLong | kTwoConts;

// Indexed by the high nibble of the byte before, its low nibble, and the high nibble of the
// byte itself; a bit set in all three is an error (kTwoConts is settled by the 3-back check).
// clang-format off
alignas(16) constexpr uint8_t kByte1High[16] = {
    kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong, kTooLong,
    kTwoConts, kTwoConts, kTwoConts, kTwoConts,
    kTooShort | kOverlong2,
    kTooShort,
    kTooShort | kOverlong3 | kSurrogate,
    kTooShort | kTooLarge | kTooLarge1000 | kOverlong4};
alignas(16) constexpr uint8_t kByte1Low[16] = {
    kCarry | kOverlong3 | kOverlong2 | kOverlong4,
    kCarry | kOverlong2,
    kCarry,
    kCarry,
    kCarry | kTooLarge,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000 | kSurrogate,
    kCarry | kTooLarge | kTooLarge1000,
    kCarry | kTooLarge | kTooLarge1000};
alignas(16) constexpr uint8_t kByte2High[16] = {
    kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort, kTooShort,
    kTooLong | kOverlong2 | kTwoConts | kOverlong3 | kTooLarge1000 | kOverlong4,
    kTooLong | kOverlong2 | kTwoConts | kOverlong3 | kTooLarge,
    kTooLong | kOverlong2 | kTwoConts | kSurrogate | kTooLarge,
    kTooLong | kOverlong2 | kTwoConts | kSurrogate | kTooLarge,
    kTooShort, kTooShort, kTooShort, kTooShort};
// clang-format on

__attribute__((target("avx2"))) inline __m256i Load256(const char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

__attribute__((target("avx2"))) inline __m256i Lookup16(const uint8_t (&table)[16],
                                                        __m256i nibbles) {
  const __m256i t =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  return _mm256_shuffle_epi8(t, nibbles);
}

// Nonzero bytes where the UTF-8 of `v` is invalid given the three bytes before each of its
// bytes (`prev1` holds the byte one before each, and so on).
__attribute__((target("avx2"))) inline __m256i Utf8ErrorsAvx2(__m256i v, __m256i prev1,
                                                              __m256i prev2, __m256i prev3) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i special = _mm256_and_si256(
      _mm256_and_si256(Lookup16(kByte1High, _mm256_and_si256(_mm256_srli_epi16(prev1, 4), nibble)),
                       Lookup16(kByte1Low, _mm256_and_si256(prev1, nibble))),
      Lookup16(kByte2High, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble)));
  // A byte two after a 3- or 4-byte lead, or three after a 4-byte lead, must continue it.
  const __m256i third = _mm256_subs_epu8(prev2, _mm256_set1_epi8(static_cast<char>(0xE0 - 0x80)));
  const __m256i fourth = _mm256_subs_epu8(prev3, _mm256_set1_epi8(static_cast<char>(0xF0 - 0x80)));
  const __m256i must_continue =
      _mm256_and_si256(_mm256_or_si256(third, fourth), _mm256_set1_epi8(static_cast<char>(0x80)));
  return _mm256_xor_si256(must_continue, special);
}

// The same for the 32 bytes at `in`, whose three bytes before are readable.
__attribute__((target("avx2"))) inline __m256i Utf8ErrorsAvx2At(__m256i v, const char* in) {
  return Utf8ErrorsAvx2(v, Load256(in - 1), Load256(in - 2), Load256(in - 3));
}

// The same for the first 32 bytes of the text: zeros before them.
__attribute__((target("avx2"))) inline __m256i Utf8ErrorsAvx2AtStart(__m256i v) {
  // Both lanes of `v` moved up by k bytes: the low lane gets zeros, the high one the low's end.
  const __m256i low_up = _mm256_permute2x128_si256(v, v, 0x08);
  return Utf8ErrorsAvx2(v, _mm256_alignr_epi8(v, low_up, 15), _mm256_alignr_epi8(v, low_up, 14),
                        _mm256_alignr_epi8(v, low_up, 13));
}

// Bytes below 0x20, '"' and '\\'.
__attribute__((target("avx2"))) inline uint32_t EscapeBitsAvx2(__m256i v) {
  const __m256i control = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x1F)), v);
  const __m256i quote = _mm256_cmpeq_epi8(v, _mm256_set1_epi8('"'));
  const __m256i backslash = _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\\'));
  return static_cast<uint32_t>(
      _mm256_movemask_epi8(_mm256_or_si256(control, _mm256_or_si256(quote, backslash))));
}

// Room for a block of 32 bytes that all need escapes, past the invariant's one byte each.
constexpr size_t kBlockEscapeRoom = 5 * 32;

// Writes the first `width` bytes of the block at `in`, already stored whole at `p`, escaping
// the bytes at `escapes` (within `width`): each stretch after an escape is stored again whole
// from the input, 32 bytes, so `in` must be readable 32 bytes past `width`. Returns the end.
__attribute__((target("avx2"))) inline char* WriteBlockAvx2(char* p, const char* in,
                                                            uint32_t escapes, size_t width) {
  size_t done = 0;  // bytes of the block whose output is in place
  while (escapes != 0) {
    const auto e = static_cast<size_t>(std::countr_zero(escapes));
    p += e - done;
    done = e;
    do {
      const auto c = static_cast<unsigned char>(in[done]);
      std::memcpy(p, kEscapes.text[c], 8);
      p += kEscapes.len[c];
      ++done;
    } while (done < width && ((escapes >> done) & 1) != 0);
    escapes = done < 32 ? escapes & (~0U << done) : 0;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Load256(in + done));
  }
  return p + (width - done);
}

// `\u0000` sixteen times: 96 bytes, three vectors.
struct NulEscapes {
  alignas(32) char text[96] = {};
  constexpr NulEscapes() {
    for (int k = 0; k < 96; ++k) text[k] = "\\u0000"[k % 6];
  }
};
constexpr NulEscapes kNulEscapes;

// 32 NULs, the commonest run in binary output, as six vector stores.
__attribute__((target("avx2"))) inline char* WriteNulBlockAvx2(char* p) {
  for (int half = 0; half < 2; ++half) {
    for (int k = 0; k < 3; ++k) {
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(p + 32 * k),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(kNulEscapes.text) + k));
    }
    p += 96;
  }
  return p;
}

// Where the AVX2 main loop is: output position, input index, and the UTF-8 state.
struct Avx2Scan {
  char* p;
  size_t i;
  // A block that starts before this may hold the rest of a multi-byte sequence: it is checked
  // even when it is all ASCII (the ASCII then being an error).
  size_t check_before;
  __m256i errors;
};

// The main loop of AppendBodyAvx2: 32 bytes at a time, always, whatever they hold, so that no
// iteration waits on what the one before found. It stops with under 64 bytes left (the rest
// of a block after an escape is read from the input) or when a block with escapes might not
// fit. Out of line and free of calls, so that its state stays in registers.
__attribute__((target("avx2"), noinline)) void ScanAvx2(Avx2Scan& scan, const char* in, size_t n,
                                                        const char* end) {
  char* p = scan.p;
  size_t i = scan.i;
  size_t check_before = scan.check_before;
  __m256i errors = scan.errors;
  while (i + 64 <= n) {
    const __m256i v = Load256(in + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    const auto high = static_cast<uint32_t>(_mm256_movemask_epi8(v));
    if (high != 0 || i < check_before) {
      errors =
          _mm256_or_si256(errors, i == 0 ? Utf8ErrorsAvx2AtStart(v) : Utf8ErrorsAvx2At(v, in + i));
      if (high != 0) check_before = i + 35 - static_cast<size_t>(std::countl_zero(high));
    }
    const uint32_t escapes = EscapeBitsAvx2(v);
    if (escapes == 0) {
      p += 32;
    } else {
      if (static_cast<size_t>(end - p) < n - i + kSlack + kBlockEscapeRoom) break;
      p = _mm256_testz_si256(v, v) ? WriteNulBlockAvx2(p) : WriteBlockAvx2(p, in + i, escapes, 32);
    }
    i += 32;
  }
  scan = {p, i, check_before, errors};
}

// The body as AppendBodyByBlocks writes it, 32 bytes at a time: multi-byte sequences are
// plain bytes here, checked in bulk with the escapes.
__attribute__((target("avx2"))) char* AppendBodyAvx2(std::string& out, char* p,
                                                     std::string_view text) {
  const char* in = text.data();
  const size_t n = text.size();
  Avx2Scan scan{p, 0, 0, _mm256_setzero_si256()};
  for (;;) {
    ScanAvx2(scan, in, n, out.data() + out.size());
    if (scan.i + 64 > n) break;
    const size_t remaining = n - scan.i;
    scan.p = Grow(out, scan.p, remaining, remaining + kSlack + kBlockEscapeRoom);
  }
  p = scan.p;
  const size_t i = scan.i;
  // The last (under 64) bytes from a zero-padded copy, with the three before them. Its checks
  // cover the position just past the end, where a cut sequence shows as an error.
  alignas(32) char tail[32 + 64 + 32] = {};
  const size_t back = std::min<size_t>(i, 3);
  const size_t len = n - i;
  std::memcpy(tail + 32 - back, in + i - back, len + back);
  const char* t = tail + 32;
  __m256i errors = scan.errors;
  for (size_t j = 0; j < 64; j += 32) {
    const __m256i v = Load256(t + j);
    const auto high = static_cast<uint32_t>(_mm256_movemask_epi8(v));
    if (high != 0 || i + j < scan.check_before) {
      errors = _mm256_or_si256(errors, Utf8ErrorsAvx2At(v, t + j));
      if (high != 0) scan.check_before = i + j + 35 - static_cast<size_t>(std::countl_zero(high));
    }
  }
  if (!_mm256_testz_si256(errors, errors)) return nullptr;
  for (size_t j = 0; j < len; j += 32) {
    const size_t width = std::min<size_t>(32, len - j);
    const __m256i v = Load256(t + j);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    // The zero padding past the end would count as escapes.
    const uint32_t escapes = EscapeBitsAvx2(v) & (width == 32 ? ~0U : (1U << width) - 1);
    const size_t remaining = len - j;
    if (escapes != 0 &&
        static_cast<size_t>(out.data() + out.size() - p) < remaining + kSlack + kBlockEscapeRoom) {
      p = Grow(out, p, remaining, remaining + kSlack + kBlockEscapeRoom);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    }
    p = WriteBlockAvx2(p, t + j, escapes, width);
  }
  return p;
}
#endif

bool CpuHasAvx2() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

bool Supported(JsonPath path) {
  switch (path) {
    case JsonPath::kScalar:
      return true;
    case JsonPath::kSse2:
#if defined(__x86_64__)
      return true;
#else
      return false;
#endif
    case JsonPath::kAvx2:
      return CpuHasAvx2();
  }
  return false;
}

char* AppendBody(JsonPath path, std::string& out, char* p, std::string_view text) {
#if defined(__x86_64__)
  if (path == JsonPath::kAvx2) return AppendBodyAvx2(out, p, text);
  if (path == JsonPath::kSse2) return AppendBodyByBlocks<Sse2Block>(out, p, text);
#endif
  return AppendBodyByBlocks<SwarBlock>(out, p, text);
}

// One pass over the text (the SSE hot path) into output sized once for the common case: plain
// runs are copied a vector at a time, escapes written in place. Invalid UTF-8 (rare) starts
// again from a sanitized copy.
void AppendJsonStringOn(JsonPath path, std::string& out, std::string_view text) {
  const size_t start = out.size();
  const size_t n = text.size();
  // One output byte per input byte, plus room for an escape in every eighth without growing.
  out.resize(start + 1 + n + n / 8 + kSlack);
  char* p = out.data() + start;
  *p++ = '"';
  p = AppendBody(path, out, p, text);
  if (p == nullptr) {
    out.resize(start);
    std::string clean;
    AppendSanitizedUtf8(clean, text);
    AppendJsonStringOn(path, out, clean);
    return;
  }
  *p++ = '"';
  out.resize(static_cast<size_t>(p - out.data()));
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  static const JsonPath best = CpuHasAvx2()                 ? JsonPath::kAvx2
                               : Supported(JsonPath::kSse2) ? JsonPath::kSse2
                                                            : JsonPath::kScalar;
  AppendJsonStringOn(best, out, text);
}

bool AppendJsonStringForTesting(JsonPath path, std::string& out, std::string_view text) {
  if (!Supported(path)) return false;
  AppendJsonStringOn(path, out, text);
  return true;
}

}  // namespace sandstream
