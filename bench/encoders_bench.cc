// sandstream-encoders-bench: MB/s of input through the two encoders of the SSE byte path (JSON
// string, base64), on every code path, beside the scalar encoders they replaced (copied here as
// they were). Checks that every path writes the same bytes as the old one. No daemon, no I/O.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base64.h"
#include "base/json_string.h"
#include "base/utf8.h"

namespace sandstream::bench {
namespace {

// The JSON string encoder as it was before the vector paths: 8 bytes at a time with SWAR.
namespace old {

bool NeedsAttention(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  const uint64_t control = (w - kOnes * 0x20) & ~w & kHigh;
  return ((w & kHigh) | control | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\'))) != 0;
}

bool NeedsEscape(unsigned char c) {
  return c < 0x20 || c == '"' || c == '\\';
}

char* WriteEscape(char* p, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  char short_form = 0;
  switch (c) {
    case '"':
      short_form = '"';
      break;
    case '\\':
      short_form = '\\';
      break;
    case '\n':
      short_form = 'n';
      break;
    case '\r':
      short_form = 'r';
      break;
    case '\t':
      short_form = 't';
      break;
    default:
      break;
  }
  *p++ = '\\';
  if (short_form != 0) {
    *p++ = short_form;
    return p;
  }
  *p++ = 'u';
  *p++ = '0';
  *p++ = '0';
  *p++ = kHex[c >> 4];
  *p++ = kHex[c & 15];
  return p;
}

void AppendJsonString(std::string& out, std::string_view text) {
  const size_t start = out.size();
  const size_t n = text.size();
  out.reserve(start + n + 2);
  out += '"';
  size_t run = 0;
  size_t i = 0;
  while (i < n) {
    uint64_t w;
    while (i + 8 <= n && (__builtin_memcpy(&w, text.data() + i, 8), !NeedsAttention(w))) i += 8;
    if (i >= n) break;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t len = Utf8SequenceAt(text, i);
      if (len == 0) {
        out.resize(start);
        std::string clean;
        AppendSanitizedUtf8(clean, text);
        AppendJsonString(out, clean);
        return;
      }
      i += len;
    } else if (!NeedsEscape(c)) {
      ++i;
    } else {
      out.append(text.data() + run, i - run);
      size_t end = i + 1;
      while (end < n && NeedsEscape(static_cast<unsigned char>(text[end]))) ++end;
      while (i < end) {
        char buf[6 * 64];
        char* p = buf;
        for (const size_t stop = std::min(end, i + 64); i < stop; ++i) {
          p = WriteEscape(p, static_cast<unsigned char>(text[i]));
        }
        out.append(buf, static_cast<size_t>(p - buf));
      }
      run = i;
    }
  }
  out.append(text.data() + run, n - run);
  out += '"';
}

// The base64 encoder as it was: two characters per 12-bit table lookup.
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

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

}  // namespace old

using Encoder = std::function<bool(std::string&, std::string_view)>;

struct Variant {
  const char* name;
  Encoder encode;
};

// Best of several timed rounds, each long enough for the clock: MB/s of input. The output
// buffer is reused, as the SSE writer reuses its own. 0 when the path is missing.
double MegabytesPerSecond(const Encoder& encode, std::string_view input) {
  using Clock = std::chrono::steady_clock;
  std::string out;
  if (!encode(out, input)) return 0;
  double best = 0;
  for (int round = 0; round < 7; ++round) {
    int iterations = 0;
    const auto start = Clock::now();
    std::chrono::duration<double> elapsed{};
    do {
      out.clear();
      encode(out, input);
      ++iterations;
      elapsed = Clock::now() - start;
    } while (elapsed.count() < 0.05);
    best = std::max(best, static_cast<double>(input.size()) * iterations / elapsed.count() / 1e6);
  }
  return best;
}

std::string Printable(size_t n) {
  // 67 printable bytes and a newline: `yes` with a long argument.
  const std::string line = "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ \n";
  std::string s;
  while (s.size() < n) s += line;
  s.resize(n);
  return s;
}

std::string MixedUtf8(size_t n) {
  const std::string line =
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80! "
      "build step 3/7: \xD1\x81\xD0\xB1\xD0\xBE\xD1\x80\xD0\xBA\xD0\xB0 ok\n";
  std::string s;
  while (s.size() + line.size() <= n) s += line;
  return s;
}

int Run() {
  struct Case {
    const char* name;
    std::string input;
    bool base64;
  };
  const std::vector<Case> cases = {
      {"base64, 1 MiB of zeros", std::string(1 << 20, '\0'), true},
      {"json, 1 MiB printable, newline every 68", Printable(1 << 20), false},
      {"json, 256 KiB of NULs", std::string(256 << 10, '\0'), false},
      {"json, 1 MiB Cyrillic + ASCII", MixedUtf8(1 << 20), false},
  };
  auto json = [](JsonPath path) -> Encoder {
    return [path](std::string& out, std::string_view in) {
      return AppendJsonStringForTesting(path, out, in);
    };
  };
  auto base64 = [](Base64Path path) -> Encoder {
    return [path](std::string& out, std::string_view in) {
      return AppendBase64ForTesting(path, out, in);
    };
  };
  const std::vector<Variant> json_variants = {
      {"old",
       [](std::string& out, std::string_view in) {
         old::AppendJsonString(out, in);
         return true;
       }},
      {"scalar", json(JsonPath::kScalar)},
      {"sse2", json(JsonPath::kSse2)},
      {"avx2", json(JsonPath::kAvx2)},
      {"default", [](std::string& out, std::string_view in) {
         AppendJsonString(out, in);
         return true;
       }}};
  const std::vector<Variant> base64_variants = {
      {"old",
       [](std::string& out, std::string_view in) {
         old::AppendBase64(out, in);
         return true;
       }},
      {"scalar", base64(Base64Path::kScalar)},
      {"ssse3", base64(Base64Path::kSsse3)},
      {"avx2", base64(Base64Path::kAvx2)},
      {"default", [](std::string& out, std::string_view in) {
         AppendBase64(out, in);
         return true;
       }}};

  int failures = 0;
  const std::vector<Variant>* header = nullptr;
  for (const Case& c : cases) {
    const auto& variants = c.base64 ? base64_variants : json_variants;
    if (header != &variants) {
      std::printf("%-42s", "MB/s of input");
      for (const Variant& v : variants) std::printf(" %9s", v.name);
      std::printf("\n");
      header = &variants;
    }
    std::string expected;
    variants[0].encode(expected, c.input);
    std::printf("%-42s", c.name);
    for (const Variant& v : variants) {
      std::string out;
      if (v.encode(out, c.input) && out != expected) {
        std::fprintf(stderr, "%s: %s writes other bytes than the old encoder\n", c.name, v.name);
        ++failures;
      }
      const double mbs = MegabytesPerSecond(v.encode, c.input);
      if (mbs == 0) {
        std::printf(" %9s", "-");
      } else {
        std::printf(" %9.0f", mbs);
      }
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace
}  // namespace sandstream::bench

int main() {
  return sandstream::bench::Run();
}
