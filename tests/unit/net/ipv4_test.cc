#include "net/ipv4.h"

#include <gtest/gtest.h>

namespace sandstream::net {
namespace {

TEST(Ipv4Test, ParsesAndFormatsAddresses) {
  EXPECT_EQ(ParseAddress("10.200.0.1"), 0x0ac80001u);
  EXPECT_EQ(ParseAddress("0.0.0.0"), 0u);
  EXPECT_EQ(ParseAddress("255.255.255.255"), 0xffffffffu);
  EXPECT_EQ(FormatAddress(0xc6120035u), "198.18.0.53");
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.0.0.1", "01.2.3.4", "1.2.3.4 ",
                          "1..2.3", "a.b.c.d", "1.2.3.-4", "1234.1.1.1"}) {
    EXPECT_FALSE(ParseAddress(bad)) << bad;
  }
}

TEST(Ipv4Test, ParsesPrefixesAndRefusesHostBits) {
  auto p = ParsePrefix("198.18.0.0/15");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->first(), 0xc6120000u);
  EXPECT_EQ(p->last(), 0xc613ffffu);
  EXPECT_TRUE(p->Contains(*ParseAddress("198.19.1.2")));
  EXPECT_FALSE(p->Contains(*ParseAddress("198.20.0.0")));
  EXPECT_EQ(FormatPrefix(*p), "198.18.0.0/15");
  EXPECT_EQ(ParsePrefix("1.2.3.4")->len, 32);
  EXPECT_EQ(ParsePrefix("0.0.0.0/0")->last(), 0xffffffffu);
  auto sloppy = ParsePrefix("10.0.0.1/8");
  ASSERT_FALSE(sloppy);
  EXPECT_NE(sloppy.error().message.find("10.0.0.0/8"), std::string::npos);
  for (const char* bad : {"1.2.3.0/33", "1.2.3.0/", "1.2.3.0/a", "1.2.3.0/08", "/8", "x/8"}) {
    EXPECT_FALSE(ParsePrefix(bad)) << bad;
  }
}

TEST(Ipv4Test, ContainmentAndOverlap) {
  const Ipv4Prefix ten = *ParsePrefix("10.0.0.0/8");
  const Ipv4Prefix pool = *ParsePrefix("10.200.0.0/16");
  EXPECT_TRUE(ten.Contains(pool));
  EXPECT_FALSE(pool.Contains(ten));
  EXPECT_TRUE(pool.Overlaps(ten));
  EXPECT_FALSE(pool.Overlaps(*ParsePrefix("192.168.0.0/16")));
}

}  // namespace
}  // namespace sandstream::net
