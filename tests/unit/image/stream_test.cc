// Digests, the decompressors (concatenated gzip members, zstd frames, truncation, trailing
// garbage) and the budget a stream is counted against.
#include "image/stream.h"

#include <gtest/gtest.h>

#include <cstring>

#include "builders.h"
#include "image/digest.h"

namespace sandstream::image {
namespace {


Result<std::string> Inflate(const std::string& blob, Compression c) {
  test::StringSource in(blob, 7);  // dribbles: every filter sees short reads
  auto plain = Decompress(in, c, "layer x");
  return ReadAll(*plain, 1 << 24, "layer x");
}

std::string Text(size_t n) {
  std::string s;
  for (size_t i = 0; s.size() < n; ++i) s += std::to_string(i * 7919) + " ";
  s.resize(n);
  return s;
}

TEST(DigestTest, Sha256AndItsSpelling) {
  EXPECT_EQ(Sha256Of("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(ValidDigest(Sha256Of("")));
  EXPECT_FALSE(
      ValidDigest("sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
  EXPECT_FALSE(ValidDigest("sha512:" + std::string(64, 'a')));
  EXPECT_FALSE(ValidDigest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(ValidDigest("sha256:../../../../etc/passwd" + std::string(37, 'a')));
}

TEST(DecompressTest, GzipMembersReadAsOneStream) {
  const std::string a = Text(100000), b = Text(3000);
  auto out = Inflate(test::Gzip(a) + test::Gzip(b), Compression::kGzip);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, a + b);
}

TEST(DecompressTest, GzipCutShortOrFollowedByGarbageIsAnError) {
  const std::string z = test::Gzip(Text(50000));
  for (size_t cut : {size_t{0}, size_t{5}, z.size() / 2, z.size() - 4, z.size() - 1}) {
    auto out = Inflate(z.substr(0, cut), Compression::kGzip);
    ASSERT_FALSE(out) << cut;
    EXPECT_EQ(out.error().code, ErrorCode::kInvalidRequest);
    EXPECT_NE(out.error().message.find("layer x"), std::string::npos);
  }
  const auto half = Inflate(z.substr(0, z.size() / 2), Compression::kGzip);
  EXPECT_NE(half.error().message.find("truncated"), std::string::npos);
  EXPECT_FALSE(Inflate(z + "garbage", Compression::kGzip));
  std::string corrupt = z;
  corrupt[corrupt.size() - 6] ^= 1;  // the CRC
  EXPECT_FALSE(Inflate(corrupt, Compression::kGzip));
}

TEST(DecompressTest, ZstdFramesAndTruncation) {
  const std::string a = Text(200000), b = Text(10);
  const std::string z = test::Zstd(a) + test::Zstd(b);
  auto out = Inflate(z, Compression::kZstd);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(*out, a + b);
  for (size_t cut : {size_t{0}, size_t{3}, z.size() / 2, z.size() - 1}) {
    auto cut_out = Inflate(z.substr(0, cut), Compression::kZstd);
    ASSERT_FALSE(cut_out) << cut;
    EXPECT_EQ(cut_out.error().code, ErrorCode::kInvalidRequest);
  }
  EXPECT_FALSE(Inflate(z + "garbage!", Compression::kZstd));
}

TEST(DecompressTest, SniffsTheMagic) {
  EXPECT_EQ(SniffCompression(test::Gzip("x")), Compression::kGzip);
  EXPECT_EQ(SniffCompression(test::Zstd("x")), Compression::kZstd);
  EXPECT_EQ(SniffCompression("ustar"), Compression::kNone);
  EXPECT_EQ(SniffCompression(""), Compression::kNone);
}

TEST(BudgetTest, NotOneByteMore) {
  Budget budget{10, 10};
  test::StringSource in(Text(11), 7);
  BudgetSource limited(in, budget, "layer x");
  auto all = ReadAll(limited, 100, "x");
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::kPayloadTooLarge);
  EXPECT_NE(all.error().message.find("max_unpacked_bytes"), std::string::npos);
  Budget exact{10, 10};
  test::StringSource in2(Text(10), 7);
  BudgetSource fits(in2, exact, "layer x");
  EXPECT_TRUE(ReadAll(fits, 100, "x"));
  EXPECT_EQ(exact.left, 0u);
}

}  // namespace
}  // namespace sandstream::image
