#include "base/base64.h"

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

// Encodes in[i, n) at `p`, padding the last group: the portable path, and the tail of the others.
void EncodeScalar(const uint8_t* in, size_t i, size_t n, char* p) {
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{in[i]} << 16) | (uint32_t{in[i + 1]} << 8) | in[i + 2];
    __builtin_memcpy(p, &kPairs.pairs[v >> 12], 2);
    __builtin_memcpy(p + 2, &kPairs.pairs[v & 4095], 2);
    p += 4;
  }
  if (i < n) {
    uint32_t v = uint32_t{in[i]} << 16;
    if (i + 1 < n) v |= uint32_t{in[i + 1]} << 8;
    *p++ = kAlphabet[v >> 18];
    *p++ = kAlphabet[(v >> 12) & 63];
    *p++ = i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    *p++ = '=';
  }
}

#if defined(__x86_64__)
// The vector paths follow Muła and Lemire ("Faster Base64 Encoding and Decoding Using AVX2
// Instructions", 2018): 12 input bytes per 128-bit lane become 16 six-bit indices, then
// characters by a 16-entry offset table.

// The 12 bytes at the start of each lane as indices: every 3 bytes abc become the 32-bit word
// with bytes b a c b, from which two multiplies move the four 6-bit fields into place.
__attribute__((target("ssse3"))) inline __m128i Indices128(__m128i bytes) {
  const __m128i in =
      _mm_shuffle_epi8(bytes, _mm_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10));
  const __m128i hi =
      _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0FC0FC00)), _mm_set1_epi32(0x04000040));
  const __m128i lo =
      _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003F03F0)), _mm_set1_epi32(0x01000010));
  return _mm_or_si128(hi, lo);
}

// What to add to an index to get its character, by range: A-Z, a-z, 0-9 (ten entries), '+',
// '/'. Indices 0-25 map to entry 0, 26-51 to 1, 52-61 to 2-11, 62 to 12 and 63 to 13.
alignas(16) constexpr int8_t kOffsets[16] = {65, 71, -4, -4, -4,  -4,  -4, -4,
                                             -4, -4, -4, -4, -19, -16, 0,  0};

__attribute__((target("ssse3"))) inline __m128i Characters128(__m128i indices) {
  const __m128i offsets = _mm_load_si128(reinterpret_cast<const __m128i*>(kOffsets));
  __m128i entry = _mm_subs_epu8(indices, _mm_set1_epi8(51));
  entry = _mm_sub_epi8(entry, _mm_cmpgt_epi8(indices, _mm_set1_epi8(25)));
  return _mm_add_epi8(indices, _mm_shuffle_epi8(offsets, entry));
}

__attribute__((target("ssse3"))) void EncodeSsse3(const uint8_t* in, size_t n, char* p) {
  size_t i = 0;
  // Each step reads 16 bytes and uses 12.
  for (; i + 16 <= n; i += 12, p += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Characters128(Indices128(bytes)));
  }
  EncodeScalar(in, i, n, p);
}

__attribute__((target("avx2"))) inline __m256i Indices256(__m256i bytes) {
  const __m256i in = _mm256_shuffle_epi8(
      bytes, _mm256_setr_epi8(1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10, 1, 0, 2, 1, 4, 3,
                              5, 4, 7, 6, 8, 7, 10, 9, 11, 10));
  const __m256i hi = _mm256_mulhi_epu16(_mm256_and_si256(in, _mm256_set1_epi32(0x0FC0FC00)),
                                        _mm256_set1_epi32(0x04000040));
  const __m256i lo = _mm256_mullo_epi16(_mm256_and_si256(in, _mm256_set1_epi32(0x003F03F0)),
                                        _mm256_set1_epi32(0x01000010));
  return _mm256_or_si256(hi, lo);
}

__attribute__((target("avx2"))) inline __m256i Characters256(__m256i indices) {
  const __m256i offsets =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kOffsets)));
  __m256i entry = _mm256_subs_epu8(indices, _mm256_set1_epi8(51));
  entry = _mm256_sub_epi8(entry, _mm256_cmpgt_epi8(indices, _mm256_set1_epi8(25)));
  return _mm256_add_epi8(indices, _mm256_shuffle_epi8(offsets, entry));
}

__attribute__((target("avx2"))) inline __m256i Step256(const uint8_t* in) {
  // Two 16-byte loads 12 apart put 12 input bytes at the start of each lane.
  const __m256i bytes = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 12)), 1);
  return Characters256(Indices256(bytes));
}

__attribute__((target("avx2"))) void EncodeAvx2(const uint8_t* in, size_t n, char* p) {
  size_t i = 0;
  // Each step reads 28 bytes and uses 24.
  for (; i + 52 <= n; i += 48, p += 64) {
    const __m256i a = Step256(in + i);
    const __m256i b = Step256(in + i + 24);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 32), b);
  }
  for (; i + 28 <= n; i += 24, p += 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Step256(in + i));
  }
  EncodeScalar(in, i, n, p);
}

struct Cpu {
  bool ssse3;
  bool avx2;
};

const Cpu& GetCpu() {
  static const Cpu cpu = [] {
    __builtin_cpu_init();
    return Cpu{__builtin_cpu_supports("ssse3") != 0, __builtin_cpu_supports("avx2") != 0};
  }();
  return cpu;
}
#endif

bool Supported(Base64Path path) {
#if defined(__x86_64__)
  switch (path) {
    case Base64Path::kScalar:
      return true;
    case Base64Path::kSsse3:
      return GetCpu().ssse3;
    case Base64Path::kAvx2:
      return GetCpu().avx2;
  }
  return false;
#else
  return path == Base64Path::kScalar;
#endif
}

void AppendBase64On(Base64Path path, std::string& out, std::string_view bytes) {
  const size_t start = out.size();
  out.resize(start + (bytes.size() + 2) / 3 * 4);
  char* p = out.data() + start;
  const auto* in = reinterpret_cast<const uint8_t*>(bytes.data());
#if defined(__x86_64__)
  if (path == Base64Path::kAvx2) {
    EncodeAvx2(in, bytes.size(), p);
    return;
  }
  if (path == Base64Path::kSsse3) {
    EncodeSsse3(in, bytes.size(), p);
    return;
  }
#endif
  EncodeScalar(in, 0, bytes.size(), p);
}

}  // namespace

void AppendBase64(std::string& out, std::string_view bytes) {
  static const Base64Path best = Supported(Base64Path::kAvx2)    ? Base64Path::kAvx2
                                 : Supported(Base64Path::kSsse3) ? Base64Path::kSsse3
                                                                 : Base64Path::kScalar;
  AppendBase64On(best, out, bytes);
}

bool AppendBase64ForTesting(Base64Path path, std::string& out, std::string_view bytes) {
  if (!Supported(path)) return false;
  AppendBase64On(path, out, bytes);
  return true;
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
