// Unit tests of base64: RFC 4648 vectors, round trips of random bytes of every length, and
// rejection of everything that is not padded standard base64.
#include "base/base64.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace sandstream {
namespace {

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

TEST(Base64Test, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64(""), "");
  EXPECT_EQ(Base64("f"), "Zg==");
  EXPECT_EQ(Base64("fo"), "Zm8=");
  EXPECT_EQ(Base64("foo"), "Zm9v");
  EXPECT_EQ(Base64("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64("foobar"), "Zm9vYmFy");
}

TEST(Base64Test, DecodesRfc4648Vectors) {
  EXPECT_EQ(DecodeBase64(""), std::optional<std::string>(""));
  EXPECT_EQ(DecodeBase64("Zg=="), std::optional<std::string>("f"));
  EXPECT_EQ(DecodeBase64("Zm8="), std::optional<std::string>("fo"));
  EXPECT_EQ(DecodeBase64("Zm9v"), std::optional<std::string>("foo"));
  EXPECT_EQ(DecodeBase64("Zm9vYg=="), std::optional<std::string>("foob"));
  EXPECT_EQ(DecodeBase64("Zm9vYmE="), std::optional<std::string>("fooba"));
  EXPECT_EQ(DecodeBase64("Zm9vYmFy"), std::optional<std::string>("foobar"));
}

TEST(Base64Test, UsesTheStandardAlphabetForHighBits) {
  EXPECT_EQ(Base64(std::string("\xff\xff\xff", 3)), "////");
  EXPECT_EQ(Base64(std::string("\xfb\xef\xbe", 3)), "++++");
  EXPECT_EQ(Base64(std::string("\x00\x00\x00", 3)), "AAAA");
  EXPECT_EQ(Base64(std::string("\xff", 1)), "/w==");
  EXPECT_EQ(Base64(std::string("\x00", 1)), "AA==");
  EXPECT_EQ(DecodeBase64("////"), std::optional<std::string>(std::string("\xff\xff\xff", 3)));
  EXPECT_EQ(DecodeBase64("++++"), std::optional<std::string>(std::string("\xfb\xef\xbe", 3)));
}

TEST(Base64Test, EveryByteValueRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string encoded = Base64(all);
  EXPECT_EQ(encoded.size(), (all.size() + 2) / 3 * 4);
  EXPECT_EQ(DecodeBase64(encoded), std::optional<std::string>(all));
}

TEST(Base64Test, RandomBytesOfEveryLengthRoundTrip) {
  std::mt19937 rng(20240611);
  for (size_t n = 0; n <= 100; ++n) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::string bytes = RandomBytes(rng, n);
      const std::string encoded = Base64(bytes);
      ASSERT_EQ(encoded.size(), (n + 2) / 3 * 4) << "length " << n;
      const size_t padding = (3 - n % 3) % 3;
      ASSERT_EQ(encoded.find('='), padding == 0 ? std::string::npos : encoded.size() - padding)
          << "length " << n;
      for (size_t i = 0; i < encoded.size() - padding; ++i) {
        const char c = encoded[i];
        ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/')
            << "length " << n << " char " << c;
      }
      const auto decoded = DecodeBase64(encoded);
      ASSERT_TRUE(decoded.has_value()) << "length " << n << ": " << encoded;
      ASSERT_EQ(*decoded, bytes) << "length " << n;
    }
  }
}

TEST(Base64Test, AppendBase64KeepsWhatIsAlreadyThere) {
  std::string out = "chunk:";
  AppendBase64(out, "foob");
  EXPECT_EQ(out, "chunk:Zm9vYg==");
  AppendBase64(out, "");
  EXPECT_EQ(out, "chunk:Zm9vYg==");
  AppendBase64(out, "fo");
  EXPECT_EQ(out, "chunk:Zm9vYg==Zm8=");
}

TEST(Base64Test, RejectsLengthsThatAreNotAMultipleOfFour) {
  for (const std::string_view text : std::initializer_list<std::string_view>{
           "Z", "Zg", "Zg=", "Zm9", "Zm9vY", "Zm9vYg", "Zm9vYg="}) {
    EXPECT_EQ(DecodeBase64(text), std::nullopt) << text;
  }
}

TEST(Base64Test, RejectsCharactersOutsideTheAlphabet) {
  for (const std::string_view text : std::initializer_list<std::string_view>{
           "Zm9v!A==", "Zm 9", "Zm9v\nYmF", "Zm9-", "Zm9_", "Zm9.", std::string_view("Zm\0v", 4),
           "Zm9v\xc3\xa9Z=", "\x80Zm9"}) {
    EXPECT_EQ(DecodeBase64(text), std::nullopt) << text;
  }
}

TEST(Base64Test, RejectsMisplacedPadding) {
  for (const std::string_view text : std::initializer_list<std::string_view>{
           "====", "Z===", "=Zm9", "Z=m9", "Zm=9", "Zg=a", "Zg==Zm9v", "Zm8=Zm9v",
           "Zm9v====", "Zm9vZ===", "Zm9vYg=A"}) {
    EXPECT_EQ(DecodeBase64(text), std::nullopt) << text;
  }
}

TEST(Base64Test, RejectsEveryCorruptedCharacterOfAValidEncoding) {
  std::mt19937 rng(7);
  const std::string encoded = Base64(RandomBytes(rng, 30));  // 40 characters, no padding
  for (size_t i = 0; i < encoded.size(); ++i) {
    for (char bad : {'*', '-', '_', ' ', '\0', '=', '\xff'}) {
      // A '=' as the very last character is valid padding, not corruption.
      if (bad == '=' && i + 1 == encoded.size()) continue;
      std::string corrupted = encoded;
      corrupted[i] = bad;
      EXPECT_EQ(DecodeBase64(corrupted), std::nullopt) << "position " << i << " char " << int(bad);
    }
  }
}

// Three bytes to four characters, bit by bit: the behaviour every path must keep.
std::string ReferenceBase64(std::string_view bytes) {
  constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t have = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t k = 0; k < 3; ++k) {
      group = (group << 8) | (k < have ? static_cast<uint8_t>(bytes[i + k]) : 0);
    }
    for (size_t k = 0; k < 4; ++k) out += k <= have ? kAlphabet[(group >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::string PathName(const ::testing::TestParamInfo<Base64Path>& info) {
  switch (info.param) {
    case Base64Path::kScalar:
      return "Scalar";
    case Base64Path::kSsse3:
      return "Ssse3";
    case Base64Path::kAvx2:
      return "Avx2";
  }
  return "Unknown";
}

// Every code path of AppendBase64 against the reference. Each input is copied to a heap block
// of exactly its size (at an offset), so that AddressSanitizer sees any read past either end.
class Base64PathTest : public ::testing::TestWithParam<Base64Path> {
 protected:
  void SetUp() override {
    std::string probe;
    if (!AppendBase64ForTesting(GetParam(), probe, "")) {
      GTEST_SKIP() << "this build or CPU lacks the " << PathName({GetParam(), 0}) << " path";
    }
  }

  static std::string Encode(std::string_view bytes, size_t offset = 0) {
    auto block = std::make_unique<char[]>(offset + bytes.size());
    std::copy(bytes.begin(), bytes.end(), block.get() + offset);
    std::string out = "prefix";
    AppendBase64ForTesting(GetParam(), out, std::string_view(block.get() + offset, bytes.size()));
    return out;
  }
};

TEST_P(Base64PathTest, RandomBytesOfEveryLengthAndAlignmentMatchTheReference) {
  std::mt19937 rng(41);
  for (size_t n = 0; n <= 300; ++n) {
    for (size_t offset = 0; offset < 32; ++offset) {
      const std::string bytes = RandomBytes(rng, n);
      ASSERT_EQ(Encode(bytes, offset), "prefix" + ReferenceBase64(bytes))
          << "length " << n << " offset " << offset;
    }
  }
}

TEST_P(Base64PathTest, LargeInputsMatchTheReference) {
  std::mt19937 rng(42);
  for (const size_t n : {100'000, 102'400, 102'401, 131'071}) {
    const std::string random = RandomBytes(rng, n);
    ASSERT_EQ(Encode(random), "prefix" + ReferenceBase64(random)) << n;
    ASSERT_EQ(Encode(std::string(n, '\0')), "prefix" + ReferenceBase64(std::string(n, '\0')));
    ASSERT_EQ(Encode(std::string(n, '\xff')), "prefix" + ReferenceBase64(std::string(n, '\xff')));
  }
}

// Every byte value at every place of the groups of two vector steps, so that every index of
// every lane comes out of every input position.
TEST_P(Base64PathTest, EveryByteValueAtEveryPositionMatchesTheReference) {
  for (int b = 0; b < 256; ++b) {
    for (size_t at = 0; at < 100; ++at) {
      std::string bytes(100, '\x5a');
      bytes[at] = static_cast<char>(b);
      ASSERT_EQ(Encode(bytes), "prefix" + ReferenceBase64(bytes)) << b << " at " << at;
    }
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (size_t shift = 0; shift < 3; ++shift) {
    const std::string bytes = all.substr(shift) + all;
    EXPECT_EQ(Encode(bytes), "prefix" + ReferenceBase64(bytes));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Base64PathTest,
                         ::testing::Values(Base64Path::kScalar, Base64Path::kSsse3,
                                           Base64Path::kAvx2),
                         PathName);

}  // namespace
}  // namespace sandstream
