// Unit tests of the UTF-8 chunking helpers against a reference decoder built from the
// definition (the encodings of every Unicode scalar value): maximal-subpart replacement,
// validity, and chunk boundaries that never split a code point.
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "utf8_encode.h"

namespace sandstream {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

std::string Encode(uint32_t cp) {
  return testing::EncodeUtf8(cp);
}

uint64_t Key(std::string_view bytes) {
  uint64_t key = bytes.size();
  for (char c : bytes) key = (key << 8) | static_cast<uint8_t>(c);
  return key;
}

// Every proper prefix of every well-formed encoding, and every encoding of up to 3 bytes,
// mapped to the length of the whole encoding. A 4-byte encoding is its 3-byte prefix plus any
// continuation byte (the code point's low 6 bits), which keeps the table small.
class Reference {
 public:
  Reference() {
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += cp < 0x10000 ? 1 : 64) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const std::string e = Encode(cp);
      for (size_t k = 1; k <= std::min<size_t>(e.size(), 3); ++k) {
        lengths_[Key(std::string_view(e).substr(0, k))] = e.size();
      }
    }
  }

  // Length of the longest prefix of `rest` (up to 4 bytes) that is a prefix of some
  // well-formed sequence, and whether that prefix is a complete sequence.
  size_t LongestPrefix(std::string_view rest, bool* complete) const {
    size_t best = 0, full = 0;
    for (size_t k = 1; k <= std::min<size_t>(3, rest.size()); ++k) {
      auto it = lengths_.find(Key(rest.substr(0, k)));
      if (it == lengths_.end()) break;
      best = k;
      full = it->second;
    }
    if (best == 3 && full == 4 && rest.size() > 3 &&
        (static_cast<uint8_t>(rest[3]) & 0xC0) == 0x80) {
      best = 4;
    }
    *complete = best > 0 && best == full;
    return best;
  }

  // Unicode's "U+FFFD substitution of maximal subparts".
  std::string Sanitize(std::string_view bytes) const {
    std::string out;
    size_t i = 0;
    while (i < bytes.size()) {
      bool complete;
      const size_t k = LongestPrefix(bytes.substr(i), &complete);
      if (complete) {
        out.append(bytes.substr(i, k));
      } else {
        out += kReplacement;
      }
      i += std::max<size_t>(k, 1);
    }
    return out;
  }

  bool IsValid(std::string_view bytes) const {
    size_t i = 0;
    while (i < bytes.size()) {
      bool complete;
      const size_t k = LongestPrefix(bytes.substr(i), &complete);
      if (!complete) return false;
      i += k;
    }
    return true;
  }

  // Positions where a code point or a maximal invalid subpart starts, plus the end.
  std::vector<bool> Boundaries(std::string_view bytes) const {
    std::vector<bool> at(bytes.size() + 1, false);
    size_t i = 0;
    while (i < bytes.size()) {
      at[i] = true;
      bool complete;
      i += std::max<size_t>(LongestPrefix(bytes.substr(i), &complete), 1);
    }
    at[bytes.size()] = true;
    return at;
  }

  // Where the trailing valid-but-unfinished sequence starts, or the size if there is none.
  size_t CompletePrefix(std::string_view bytes) const {
    size_t i = 0;
    while (i < bytes.size()) {
      bool complete;
      const size_t k = LongestPrefix(bytes.substr(i), &complete);
      if (!complete && k > 0 && i + k == bytes.size()) return i;
      i += std::max<size_t>(k, 1);
    }
    return bytes.size();
  }

 private:
  std::unordered_map<uint64_t, size_t> lengths_;
};

const Reference& Ref() {
  static const Reference* const ref = new Reference();
  return *ref;
}

std::string Sanitized(std::string_view bytes) {
  std::string out;
  AppendSanitizedUtf8(out, bytes);
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (!out.empty()) out += ' ';
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// Bytes at the edges of every range in Unicode's table of well-formed sequences.
const std::vector<uint8_t>& InterestingBytes() {
  static const std::vector<uint8_t> bytes = {
      0x00, 0x0A, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
      0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFE, 0xFF};
  return bytes;
}

// Random text mixing valid code points of every length with stray interesting bytes.
std::string RandomText(std::mt19937& rng, size_t pieces) {
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<size_t> pick(0, InterestingBytes().size() - 1);
  std::uniform_int_distribution<uint32_t> ascii(0, 0x7F), two(0x80, 0x7FF), three(0x800, 0xFFFF),
      four(0x10000, 0x10FFFF);
  std::string s;
  for (size_t p = 0; p < pieces; ++p) {
    switch (kind(rng)) {
      case 0:
      case 1:
        s += Encode(ascii(rng));
        break;
      case 2:
        s += Encode(two(rng));
        break;
      case 3: {
        uint32_t cp = three(rng);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp -= 0x800;
        s += Encode(cp);
        break;
      }
      case 4:
        s += Encode(four(rng));
        break;
      case 5: {  // a truncated valid sequence
        const std::string e = Encode(four(rng));
        s += e.substr(0, 1 + rng() % 3);
        break;
      }
      default:
        s += static_cast<char>(InterestingBytes()[pick(rng)]);
    }
  }
  return s;
}

TEST(Utf8Test, ReferenceAgreesWithTheStandardsExample) {
  // Unicode 15, section 3.9, table 3-8.
  const std::string input = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string expected =
      "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
      "b\xEF\xBF\xBD"
      "c\xEF\xBF\xBD\xEF\xBF\xBD"
      "d";
  EXPECT_EQ(Ref().Sanitize(input), expected);
  EXPECT_EQ(Sanitized(input), expected);
}

TEST(Utf8Test, SanitizeKeepsValidTextUnchanged) {
  for (const std::string_view text : std::initializer_list<std::string_view>{
           "", "plain ascii\n", "caf\xC3\xA9", "\xE2\x82\xAC 5", "\xF0\x9F\x98\x80!",
           "\xEF\xBF\xBD", "\xED\x9F\xBF", "\xEE\x80\x80", "\xF4\x8F\xBF\xBF", "\xF0\x90\x80\x80",
           "\xE0\xA0\x80", "\xC2\x80", "\xDF\xBF", std::string_view("nul\0inside", 10)}) {
    EXPECT_TRUE(IsValidUtf8(text)) << Hex(text);
    EXPECT_EQ(Sanitized(text), text) << Hex(text);
  }
}

TEST(Utf8Test, SanitizeReplacesEachMaximalSubpart) {
  struct Case {
    std::string_view input;
    size_t replacements;  // input is otherwise empty
  };
  const Case cases[] = {
      {"\x80", 1},              // lone continuation
      {"\x80\x80\x80", 3},      // each continuation on its own
      {"\xC0\xAF", 2},          // overlong '/': C0 is never valid
      {"\xC1\xBF", 2},          //
      {"\xE0\x80\x80", 3},      // overlong 3-byte: E0 needs A0..BF next
      {"\xE0\x9F\xBF", 3},      //
      {"\xED\xA0\x80", 3},      // surrogate D800
      {"\xED\xBF\xBF", 3},      // surrogate DFFF
      {"\xF0\x80\x80\x80", 4},  // overlong 4-byte
      {"\xF0\x8F\xBF\xBF", 4},  //
      {"\xF4\x90\x80\x80", 4},  // beyond U+10FFFF
      {"\xF5\x80\x80\x80", 4},  // F5 is never valid
      {"\xFF", 1},              //
      {"\xFE\xFF", 2},          //
      {"\xC3", 1},              // truncated by the end
      {"\xE2\x82", 1},          // one subpart, not two
      {"\xF0\x9F\x98", 1},      //
      {"\xF0\x9F\x98\xF0\x9F\x98", 2},
      {"\xE2\x82\xE2\x82", 2},
      {"\xC3\xC3", 2},
  };
  for (const Case& c : cases) {
    std::string expected;
    for (size_t i = 0; i < c.replacements; ++i) expected += kReplacement;
    EXPECT_EQ(Sanitized(c.input), expected) << Hex(c.input);
    EXPECT_EQ(Ref().Sanitize(c.input), expected) << Hex(c.input);
    EXPECT_FALSE(IsValidUtf8(c.input)) << Hex(c.input);
  }
}

TEST(Utf8Test, SanitizeKeepsValidNeighboursOfInvalidBytes) {
  EXPECT_EQ(Sanitized("a\xE2\x82"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(Sanitized("\xE2\x82\xE2\x82\xAC"), "\xEF\xBF\xBD\xE2\x82\xAC");
  EXPECT_EQ(Sanitized("\xF0\x9F\x98\x80\x80"), "\xF0\x9F\x98\x80\xEF\xBF\xBD");
  EXPECT_EQ(Sanitized("\xC3\xA9\xFF\xC3\xA9"), "\xC3\xA9\xEF\xBF\xBD\xC3\xA9");
}

TEST(Utf8Test, SanitizeAppendsToExistingOutput) {
  std::string out = "prefix:";
  AppendSanitizedUtf8(out, "ok");
  EXPECT_EQ(out, "prefix:ok");
  AppendSanitizedUtf8(out, "\xFF");
  EXPECT_EQ(out, "prefix:ok\xEF\xBF\xBD");
}

// Every string of up to 3 interesting bytes (the edges of every range, in every combination),
// and every string of 4 from a smaller set that still reaches each kind of 4-byte sequence.
TEST(Utf8Test, AgreesWithReferenceOnAllShortStringsOfInterestingBytes) {
  const std::vector<uint8_t> fourth = {0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                       0xBF, 0xC2, 0xE0, 0xED, 0xF0, 0xF4};
  std::string s;
  size_t checked = 0;
  std::function<void(size_t)> walk = [&](size_t depth) {
    ASSERT_EQ(Sanitized(s), Ref().Sanitize(s)) << Hex(s);
    ASSERT_EQ(IsValidUtf8(s), Ref().IsValid(s)) << Hex(s);
    ASSERT_EQ(Utf8CompletePrefix(s), Ref().CompletePrefix(s)) << Hex(s);
    ++checked;
    if (depth == 4) return;
    const bool in_fourth = std::all_of(s.begin(), s.end(), [&](char c) {
      return std::find(fourth.begin(), fourth.end(), static_cast<uint8_t>(c)) != fourth.end();
    });
    if (depth == 3 && !in_fourth) return;
    for (uint8_t b : depth < 3 ? InterestingBytes() : fourth) {
      s.push_back(static_cast<char>(b));
      walk(depth + 1);
      s.pop_back();
      if (HasFatalFailure()) return;
    }
  };
  walk(0);
  EXPECT_GT(checked, fourth.size() * fourth.size() * fourth.size() * fourth.size());
}

TEST(Utf8Test, AgreesWithReferenceOnAllTwoByteStrings) {
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string s{static_cast<char>(a), static_cast<char>(b)};
      ASSERT_EQ(Sanitized(s), Ref().Sanitize(s)) << Hex(s);
      ASSERT_EQ(IsValidUtf8(s), Ref().IsValid(s)) << Hex(s);
      ASSERT_EQ(Utf8CompletePrefix(s), Ref().CompletePrefix(s)) << Hex(s);
    }
  }
}

TEST(Utf8Test, EveryScalarValueIsValidAndEverySurrogateIsNot) {
  // Every code point below U+10000, then a stride through the supplementary planes.
  std::vector<uint32_t> code_points;
  for (uint32_t cp = 0; cp < 0x10000; ++cp) code_points.push_back(cp);
  for (uint32_t cp = 0x10000; cp <= 0x10FFFF; cp += 61) code_points.push_back(cp);
  code_points.push_back(0x10FFFF);
  for (uint32_t cp : code_points) {
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    // Surrogates get the bit pattern CESU-8 and WTF-8 would give them.
    const std::string e = Encode(cp);
    if (surrogate) {
      ASSERT_FALSE(IsValidUtf8(e)) << std::hex << cp;
      ASSERT_EQ(Sanitized(e),
                std::string(kReplacement) + std::string(kReplacement) + std::string(kReplacement))
          << std::hex << cp;
    } else {
      ASSERT_TRUE(IsValidUtf8(e)) << std::hex << cp;
      ASSERT_EQ(Utf8CompletePrefix(e), e.size()) << std::hex << cp;
      for (size_t k = 1; k < e.size(); ++k) {
        // A cut code point is held back entirely, however many of its bytes arrived.
        ASSERT_EQ(Utf8CompletePrefix(std::string_view(e).substr(0, k)), 0u) << std::hex << cp;
        ASSERT_EQ(Utf8CompletePrefix("x" + e.substr(0, k)), 1u) << std::hex << cp;
      }
    }
  }
}

TEST(Utf8Test, CompletePrefixExamples) {
  EXPECT_EQ(Utf8CompletePrefix(""), 0u);
  EXPECT_EQ(Utf8CompletePrefix("abc"), 3u);
  EXPECT_EQ(Utf8CompletePrefix("a\xE2"), 1u);
  EXPECT_EQ(Utf8CompletePrefix("a\xE2\x82"), 1u);
  EXPECT_EQ(Utf8CompletePrefix("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(Utf8CompletePrefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(Utf8CompletePrefix("\xF0\x9F\x98\x80\xF0"), 4u);
  EXPECT_EQ(Utf8CompletePrefix("\xC3\xC3"), 1u);
  // Bytes that can never become valid are not held back.
  EXPECT_EQ(Utf8CompletePrefix("a\xE0\x80"), 3u);  // overlong
  EXPECT_EQ(Utf8CompletePrefix("a\xED\xA0"), 3u);  // surrogate
  EXPECT_EQ(Utf8CompletePrefix("a\xF4\x90"), 3u);  // beyond U+10FFFF
  EXPECT_EQ(Utf8CompletePrefix("a\xF0\x8F"), 3u);  // overlong 4-byte
  EXPECT_EQ(Utf8CompletePrefix("a\xF5"), 2u);
  EXPECT_EQ(Utf8CompletePrefix("a\xC0"), 2u);
  EXPECT_EQ(Utf8CompletePrefix("a\xC1"), 2u);
  EXPECT_EQ(Utf8CompletePrefix("a\xFF"), 2u);
  EXPECT_EQ(Utf8CompletePrefix("a\x80"), 2u);
  EXPECT_EQ(Utf8CompletePrefix("a\x80\x80\x80"), 4u);
  EXPECT_EQ(Utf8CompletePrefix("\xE2\x82\xAC\x80\x80"), 5u);
  EXPECT_EQ(Utf8CompletePrefix("a\xC3\xA9\x80"), 4u);
}

TEST(Utf8Test, IsValidChecksBytesAfterTheAsciiFastPath) {
  // The validator skips 8 ASCII bytes at a time: put one bad byte at every offset.
  for (size_t len = 1; len <= 40; ++len) {
    for (size_t at = 0; at < len; ++at) {
      std::string s(len, 'a');
      ASSERT_TRUE(IsValidUtf8(s));
      s[at] = '\x80';
      ASSERT_FALSE(IsValidUtf8(s)) << "len " << len << " at " << at;
      s[at] = '\xC3';  // truncated at the end, or followed by 'a'
      ASSERT_FALSE(IsValidUtf8(s)) << "len " << len << " at " << at;
      if (at + 1 < len) {
        s[at + 1] = '\xA9';
        ASSERT_TRUE(IsValidUtf8(s)) << "len " << len << " at " << at;
      }
    }
  }
}

TEST(Utf8Test, AgreesWithReferenceOnRandomText) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string s = RandomText(rng, 1 + rng() % 40);
    const std::string clean = Sanitized(s);
    ASSERT_EQ(clean, Ref().Sanitize(s)) << Hex(s);
    ASSERT_TRUE(IsValidUtf8(clean)) << Hex(s);
    ASSERT_TRUE(Ref().IsValid(clean)) << Hex(s);
    ASSERT_EQ(IsValidUtf8(s), Ref().IsValid(s)) << Hex(s);
    ASSERT_EQ(IsValidUtf8(s), clean == s) << Hex(s);
    ASSERT_EQ(Utf8CompletePrefix(s), Ref().CompletePrefix(s)) << Hex(s);
  }
}

TEST(Utf8Test, SanitizeOfUniformlyRandomBytesIsValid) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    const std::string clean = Sanitized(s);
    ASSERT_TRUE(IsValidUtf8(clean)) << Hex(s);
    ASSERT_EQ(clean, Ref().Sanitize(s)) << Hex(s);
  }
}

// The same chunking the process reader does: each read is cut at Utf8CompletePrefix and the
// held-back tail is prepended to the next read; at the end the tail is flushed as it is.
std::vector<std::string> Chunk(std::string_view input, const std::vector<size_t>& cuts) {
  std::vector<std::string> chunks;
  std::string carry;
  size_t from = 0;
  auto feed = [&](std::string_view read) {
    carry.append(read);
    const size_t k = Utf8CompletePrefix(carry);
    EXPECT_LE(carry.size() - k, 3u) << Hex(carry);
    if (k > 0) chunks.push_back(carry.substr(0, k));
    carry.erase(0, k);
  };
  for (size_t cut : cuts) {
    feed(input.substr(from, cut - from));
    from = cut;
  }
  feed(input.substr(from));
  if (!carry.empty()) chunks.push_back(carry);
  return chunks;
}

void ExpectChunksAreFaithful(std::string_view input, const std::vector<std::string>& chunks) {
  const std::vector<bool> boundaries = Ref().Boundaries(input);
  std::string joined, sanitized_each;
  for (const std::string& chunk : chunks) {
    ASSERT_FALSE(chunk.empty());
    joined += chunk;
    AppendSanitizedUtf8(sanitized_each, chunk);
    // No chunk ends inside a code point, nor inside an invalid sequence that may yet complete.
    ASSERT_LE(joined.size(), input.size());
    ASSERT_TRUE(boundaries[joined.size()]) << Hex(input) << " cut after " << joined.size();
  }
  ASSERT_EQ(joined, input) << Hex(input);
  // Cutting never changes what the reader sees: no extra or lost replacement characters.
  ASSERT_EQ(sanitized_each, Sanitized(input)) << Hex(input);
}

TEST(Utf8Test, ChunksCutAtEveryPositionReproduceTheInput) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = RandomText(rng, 1 + rng() % 24);
    for (size_t cut = 0; cut <= s.size(); ++cut) {
      ExpectChunksAreFaithful(s, Chunk(s, {cut}));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Utf8Test, ChunksCutIntoSingleBytesReproduceTheInput) {
  std::mt19937 rng(43);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = RandomText(rng, 1 + rng() % 24);
    std::vector<size_t> cuts;
    for (size_t i = 1; i < s.size(); ++i) cuts.push_back(i);
    const auto chunks = Chunk(s, cuts);
    ExpectChunksAreFaithful(s, chunks);
    if (HasFatalFailure()) return;
    if (IsValidUtf8(s)) {
      // Fed byte by byte, valid text comes out exactly one code point per chunk.
      for (const std::string& c : chunks) {
        bool complete;
        ASSERT_EQ(Ref().LongestPrefix(c, &complete), c.size()) << Hex(c);
        ASSERT_TRUE(complete) << Hex(c);
      }
    }
  }
}

TEST(Utf8Test, ChunksCutAtRandomPositionsReproduceTheInput) {
  std::mt19937 rng(44);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string s = RandomText(rng, 1 + rng() % 60);
    std::vector<size_t> cuts;
    for (size_t i = 1; i < s.size(); ++i) {
      if (rng() % 4 == 0) cuts.push_back(i);
    }
    ExpectChunksAreFaithful(s, Chunk(s, cuts));
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace sandstream
