// Unit tests of the JSON string escaper: exact escapes, invalid UTF-8 replaced, and every code
// path (scalar, SSE2, AVX2) byte for byte against a plain reference, at every length and
// alignment. No sockets, no processes.
#include "base/json_string.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "base/utf8.h"
#include "utf8_encode.h"

namespace sandstream {
namespace {
namespace json = boost::json;

std::string JsonString(std::string_view text) {
  std::string out;
  AppendJsonString(out, text);
  return out;
}

TEST(JsonStringTest, EscapesExactly) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("plain text"), "\"plain text\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("\n\r\t"), "\"\\n\\r\\t\"");
  EXPECT_EQ(JsonString("\b\f"), "\"\\u0008\\u000c\"");
  EXPECT_EQ(JsonString(std::string_view("\0", 1)), "\"\\u0000\"");
  EXPECT_EQ(JsonString("\x01\x1f"), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonString("\x1b[31mred\x1b[0m"), "\"\\u001b[31mred\\u001b[0m\"");
  EXPECT_EQ(JsonString("\x7f/ <>&'"), "\"\x7f/ <>&'\"");
  EXPECT_EQ(JsonString("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
}

TEST(JsonStringTest, ReplacesInvalidUtf8AndStillEscapes) {
  EXPECT_EQ(JsonString("\xFF"), "\"\xEF\xBF\xBD\"");
  EXPECT_EQ(JsonString("a\xE2\x82"), "\"a\xEF\xBF\xBD\"");
  EXPECT_EQ(JsonString("\"\xC0\xAF\n"), "\"\\\"\xEF\xBF\xBD\xEF\xBF\xBD\\n\"");
  EXPECT_EQ(JsonString("\xED\xA0\x80\\"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\\\\\"");
}

TEST(JsonStringTest, AppendsToExistingOutput) {
  std::string out = "{\"k\":";
  AppendJsonString(out, "v");
  EXPECT_EQ(out, "{\"k\":\"v\"");
}

TEST(JsonStringTest, EveryAsciiCharacterRoundTripsThroughAJsonParser) {
  for (int c = 0; c < 128; ++c) {
    const std::string text = std::string("<") + static_cast<char>(c) + ">";
    const std::string literal = JsonString(text);
    for (char b : literal) ASSERT_GE(static_cast<unsigned char>(b), 0x20) << c;
    boost::system::error_code ec;
    const json::value v = json::parse(literal, ec);
    ASSERT_FALSE(ec) << c << ": " << literal;
    ASSERT_TRUE(v.is_string()) << c;
    ASSERT_EQ(std::string(v.as_string()), text) << c;
  }
}

// Long plain runs (the 8-byte path) broken by escapes, multi-byte characters and the odd
// invalid byte at every alignment: the parsed string is the sanitized text, exactly.
TEST(JsonStringTest, MixedTextDecodesToTheSanitizedText) {
  const std::vector<std::string> pieces = {"abcdefgh",
                                           "0123456789 ",
                                           "\"",
                                           "\\",
                                           "\n",
                                           "\t",
                                           std::string(1, '\0'),
                                           "\x1b[0m",
                                           "\xC3\xA9",
                                           "\xE2\x82\xAC",
                                           "\xF0\x9F\x98\x80",
                                           "\xFF",
                                           "\xE2\x82",
                                           "\xC0\xAF",
                                           "\x7f"};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string text;
    const size_t count = rng() % 24;
    for (size_t k = 0; k < count; ++k) {
      const std::string& p = pieces[rng() % pieces.size()];
      text += rng() % 3 == 0 ? p : p.substr(0, std::min<size_t>(p.size(), 1 + rng() % 8));
      if (rng() % 4 == 0) text += std::string(rng() % 20, 'x');
    }
    std::string expected;
    AppendSanitizedUtf8(expected, text);
    const std::string literal = JsonString(text);
    boost::system::error_code ec;
    const json::value v = json::parse(literal, ec);
    ASSERT_FALSE(ec) << literal;
    ASSERT_EQ(std::string(v.as_string()), expected) << literal;
  }
}

TEST(JsonStringTest, RandomBytesBecomeOneLineOfValidJson) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text(rng() % 80, '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    const std::string literal = JsonString(text);
    for (char b : literal) ASSERT_GE(static_cast<unsigned char>(b), 0x20);
    ASSERT_TRUE(IsValidUtf8(literal));
    boost::system::error_code ec;
    const json::value v = json::parse(literal, ec);
    ASSERT_FALSE(ec) << literal;
    ASSERT_TRUE(v.is_string());
    std::string expected;
    AppendSanitizedUtf8(expected, text);
    ASSERT_EQ(std::string(v.as_string()), expected);
  }
}

// The behaviour AppendJsonString must keep, written byte by byte as plainly as possible: the
// whole text is checked as UTF-8 by decoding; invalid text is sanitized (as AppendJsonString
// does) and then escaped.
bool ReferenceIsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    size_t len;
    uint32_t code_point;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2;
      code_point = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      code_point = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      code_point = b & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (c & 0x3F);
    }
    constexpr uint32_t kShortest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kShortest[len] || code_point > 0x10FFFF) return false;
    if (code_point >= 0xD800 && code_point <= 0xDFFF) return false;
    i += len;
  }
  return true;
}

std::string ReferenceJsonString(std::string_view text) {
  std::string clean;
  if (!ReferenceIsValidUtf8(text)) {
    AppendSanitizedUtf8(clean, text);
    text = clean;
  }
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

TEST(JsonStringTest, ReferenceAgreesWithTheFixedCases) {
  EXPECT_EQ(ReferenceJsonString("a\"b\\c\n\r\t\b\x1f"), "\"a\\\"b\\\\c\\n\\r\\t\\u0008\\u001f\"");
  EXPECT_EQ(ReferenceJsonString("\"\xC0\xAF\n"), "\"\\\"\xEF\xBF\xBD\xEF\xBF\xBD\\n\"");
  EXPECT_EQ(ReferenceJsonString("\xED\xA0\x80\\"), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\\\\\"");
  EXPECT_EQ(ReferenceJsonString("caf\xC3\xA9 \xF0\x9F\x98\x80"),
            "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
  EXPECT_FALSE(ReferenceIsValidUtf8("\xF4\x90\x80\x80"));
  EXPECT_FALSE(ReferenceIsValidUtf8("\xE0\x9F\xBF"));
  EXPECT_TRUE(ReferenceIsValidUtf8("\xF4\x8F\xBF\xBF"));
}

std::string RandomValidUtf8(std::mt19937& rng, size_t n) {
  std::string s;
  while (s.size() < n) {
    uint32_t cp;
    switch (rng() % 4) {
      case 0:
        cp = rng() % 0x80;
        break;
      case 1:
        cp = 0x80 + rng() % (0x800 - 0x80);
        break;
      case 2:
        do cp = 0x800 + rng() % (0x10000 - 0x800);
        while (cp >= 0xD800 && cp <= 0xDFFF);
        break;
      default:
        cp = 0x10000 + rng() % (0x110000 - 0x10000);
        break;
    }
    s += testing::EncodeUtf8(cp);
  }
  return s;
}

// The kinds of text the encoder sees: arbitrary bytes, valid UTF-8, terminal output (printable
// with newlines, tabs, quotes and the odd escape sequence), binary zeros, Cyrillic with ASCII,
// and ASCII with a rare byte >= 0x80 (mostly invalid, between long ASCII stretches).
enum class TextKind { kRandomBytes, kValidUtf8, kPrintable, kNuls, kCyrillic, kRareHighBytes };

std::string RandomText(std::mt19937& rng, TextKind kind, size_t n) {
  std::string s;
  switch (kind) {
    case TextKind::kRandomBytes:
      for (size_t i = 0; i < n; ++i) s += static_cast<char>(rng());
      return s;
    case TextKind::kValidUtf8:
      return RandomValidUtf8(rng, n);
    case TextKind::kPrintable:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t r = rng() % 100;
        s += r < 2   ? '\n'
             : r < 3 ? '"'
             : r < 4 ? '\\'
             : r < 5 ? '\t'
             : r < 6 ? '\x1b'
                     : static_cast<char>(0x20 + rng() % 0x5F);
      }
      return s;
    case TextKind::kNuls:
      for (size_t i = 0; i < n; ++i) s += rng() % 8 == 0 ? static_cast<char>(rng() % 0x20) : '\0';
      return s;
    case TextKind::kCyrillic:
      while (s.size() < n) {
        if (rng() % 6 == 0) {
          s += rng() % 4 == 0 ? '\n' : ' ';
        } else {
          const uint32_t cp = 0x410 + rng() % 0x40;
          s += static_cast<char>(0xC0 | (cp >> 6));
          s += static_cast<char>(0x80 | (cp & 0x3F));
        }
      }
      return s;
    case TextKind::kRareHighBytes:
      for (size_t i = 0; i < n; ++i) {
        s += rng() % 64 == 0 ? static_cast<char>(0x80 + rng() % 0x80)
                             : static_cast<char>(0x20 + rng() % 0x5F);
      }
      return s;
  }
  return s;
}

std::string PathName(const ::testing::TestParamInfo<JsonPath>& info) {
  switch (info.param) {
    case JsonPath::kScalar:
      return "Scalar";
    case JsonPath::kSse2:
      return "Sse2";
    case JsonPath::kAvx2:
      return "Avx2";
  }
  return "Unknown";
}

// Every code path of AppendJsonString against the reference, byte for byte. Each text is
// copied to a heap block of exactly its size (at an offset), so that AddressSanitizer sees any
// read past either end.
class JsonStringPathTest : public ::testing::TestWithParam<JsonPath> {
 protected:
  void SetUp() override {
    std::string probe;
    if (!AppendJsonStringForTesting(GetParam(), probe, "")) {
      GTEST_SKIP() << "this build or CPU lacks the " << PathName({GetParam(), 0}) << " path";
    }
  }

  // Empty when the output matches; otherwise a description of the first difference.
  static std::string Mismatch(std::string_view text, size_t offset = 0) {
    auto block = std::make_unique<char[]>(offset + text.size());
    std::copy(text.begin(), text.end(), block.get() + offset);
    const std::string_view placed(block.get() + offset, text.size());
    std::string out = "prefix";
    AppendJsonStringForTesting(GetParam(), out, placed);
    const std::string expected = "prefix" + ReferenceJsonString(text);
    if (out == expected) return {};
    size_t at = 0;
    while (at < out.size() && at < expected.size() && out[at] == expected[at]) ++at;
    std::string hex;
    for (const char c : text.substr(0, 400)) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%02x ", static_cast<uint8_t>(c));
      hex += buf;
    }
    return "length " + std::to_string(text.size()) + " offset " + std::to_string(offset) +
           ": output differs at byte " + std::to_string(at) + " (sizes " +
           std::to_string(out.size()) + ", expected " + std::to_string(expected.size()) +
           "); input: " + hex;
  }
};

TEST_P(JsonStringPathTest, RandomTextsOfEveryLengthAndAlignmentMatchTheReference) {
  std::mt19937 rng(31);
  for (const TextKind kind : {TextKind::kRandomBytes, TextKind::kValidUtf8, TextKind::kPrintable,
                              TextKind::kNuls, TextKind::kCyrillic, TextKind::kRareHighBytes}) {
    for (size_t n = 0; n <= 300; ++n) {
      for (size_t offset = 0; offset < 32; ++offset) {
        const std::string text = RandomText(rng, kind, n).substr(0, n);
        ASSERT_EQ(Mismatch(text, offset), "") << "kind " << static_cast<int>(kind);
      }
    }
  }
}

TEST_P(JsonStringPathTest, LargeTextsMatchTheReference) {
  std::mt19937 rng(32);
  for (const TextKind kind : {TextKind::kRandomBytes, TextKind::kValidUtf8, TextKind::kPrintable,
                              TextKind::kNuls, TextKind::kCyrillic, TextKind::kRareHighBytes}) {
    for (const size_t n : {100'000, 102'400, 131'071}) {
      ASSERT_EQ(Mismatch(RandomText(rng, kind, n)), "") << "kind " << static_cast<int>(kind);
    }
  }
  std::string lines;
  while (lines.size() < 100'000) {
    lines += "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
  }
  EXPECT_EQ(Mismatch(lines), "");
  EXPECT_EQ(Mismatch(std::string(100'000, '\0')), "");
  EXPECT_EQ(Mismatch(std::string(100'000, 'x')), "");
  // Valid text and then one bad byte near the end: the whole text is sanitized.
  std::string late = RandomValidUtf8(rng, 100'000);
  late += "\xFF tail";
  EXPECT_EQ(Mismatch(late), "");
}

TEST_P(JsonStringPathTest, TextsCutInsideAMultiByteSequenceMatchTheReference) {
  const std::string characters[] = {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                    "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF"};
  for (const std::string& character : characters) {
    for (size_t cut = 1; cut < character.size(); ++cut) {
      for (size_t before = 0; before <= 70; ++before) {
        for (const std::string& after : {std::string(), std::string("a"), std::string("\n"),
                                         std::string(36, 'a'), std::string(100, 'a')}) {
          const std::string text = std::string(before, 'x') + character.substr(0, cut) + after;
          ASSERT_EQ(Mismatch(text), "");
          // And the whole character, for contrast.
          ASSERT_EQ(Mismatch(std::string(before, 'x') + character + after), "");
        }
      }
    }
  }
}

TEST_P(JsonStringPathTest, EveryByteAloneAndInsideLongPlainRunsMatchesTheReference) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    ASSERT_EQ(Mismatch(std::string(1, c)), "") << b;
    for (size_t before = 0; before <= 70; ++before) {
      for (const size_t after : {0, 1, 2, 3, 31, 40, 100}) {
        ASSERT_EQ(Mismatch(std::string(before, 'p') + c + std::string(after, 'q')), "") << b;
      }
    }
    ASSERT_EQ(Mismatch(std::string(200, c)), "") << b;
  }
}

// Every pair of bytes inside plain text, at a position in a block and across a block boundary,
// and every 3- and 4-byte lead with every second byte near the continuation range and a choice
// of third and fourth.
TEST_P(JsonStringPathTest, EveryShortByteSequenceMatchesTheReference) {
  const std::string plain = "0123456789abcdefghijklmnopqrstuvwxyz";
  for (const size_t before : {5, 31}) {
    for (int b1 = 0; b1 < 256; ++b1) {
      for (int b2 = 0; b2 < 256; ++b2) {
        std::string pair(before, 'h');
        pair += static_cast<char>(b1);
        pair += static_cast<char>(b2);
        ASSERT_EQ(Mismatch(pair + plain), "");
        if (before == 31) {
          ASSERT_EQ(Mismatch(pair), "");
        }
      }
    }
  }
  const uint8_t thirds[] = {0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0};
  const uint8_t fourths[] = {0x41, 0x80, 0xC0};
  for (int b1 = 0xE0; b1 < 256; ++b1) {
    for (int b2 = 0x70; b2 < 0xD0; ++b2) {
      for (const uint8_t b3 : thirds) {
        for (const uint8_t b4 : fourths) {
          std::string quad(30, 'h');
          quad += static_cast<char>(b1);
          quad += static_cast<char>(b2);
          quad += static_cast<char>(b3);
          quad += static_cast<char>(b4);
          ASSERT_EQ(Mismatch(quad + plain), "");
        }
      }
    }
  }
}

TEST_P(JsonStringPathTest, GrowsPastEveryFirstSizeAndKeepsWhatIsAlreadyThere) {
  // Escapes late in a long plain text, and runs of escapes of every length: the output outgrows
  // the first size at every point.
  for (size_t plain = 0; plain <= 600; plain += 37) {
    for (size_t escapes = 1; escapes <= 300; escapes += 13) {
      ASSERT_EQ(Mismatch(std::string(plain, 'a') + std::string(escapes, '\0') + "z"), "");
      ASSERT_EQ(Mismatch(std::string(escapes, '"') + std::string(plain, 'a')), "");
    }
  }
  std::string out(1000, 'k');
  ASSERT_TRUE(AppendJsonStringForTesting(GetParam(), out, std::string(500, '\x01')));
  EXPECT_EQ(out, std::string(1000, 'k') + ReferenceJsonString(std::string(500, '\x01')));
}

INSTANTIATE_TEST_SUITE_P(Paths, JsonStringPathTest,
                         ::testing::Values(JsonPath::kScalar, JsonPath::kSse2, JsonPath::kAvx2),
                         PathName);

TEST(JsonStringTest, TheDefaultPathMatchesTheReference) {
  std::mt19937 rng(33);
  for (const TextKind kind : {TextKind::kRandomBytes, TextKind::kValidUtf8, TextKind::kPrintable,
                              TextKind::kNuls, TextKind::kCyrillic, TextKind::kRareHighBytes}) {
    for (size_t n = 0; n <= 300; ++n) {
      const std::string text = RandomText(rng, kind, n);
      ASSERT_EQ(JsonString(text), ReferenceJsonString(text));
    }
  }
}

}  // namespace
}  // namespace sandstream
