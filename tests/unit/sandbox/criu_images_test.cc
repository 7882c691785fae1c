// The CRIU images a sandbox restored from another's checkpoint gets its own of, rewritten
// byte for byte as CRIU 4.2 wrote them for a sandbox whose ids start at host id 1000000.
#include "sandbox/criu_images.h"

#include <gtest/gtest.h>

#include <string>

namespace sandstream::sandbox {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// userns-14.img of a sandbox: uid_map and gid_map "0 1000000 65536".
const std::string kUserns =
    Bytes({0x19, 0x43, 0x56, 0x54, 0x06, 0x49, 0x47, 0x55, 0x18, 0x00, 0x00, 0x00,
           0x0a, 0x0a, 0x08, 0x00, 0x10, 0xc0, 0x84, 0x3d, 0x18, 0x80, 0x80, 0x04,
           0x12, 0x0a, 0x08, 0x00, 0x10, 0xc0, 0x84, 0x3d, 0x18, 0x80, 0x80, 0x04});

// utsns-12.img: nodename "sb_3591ddc85ff4ee28", domainname "(none)".
const std::string kUtsns =
    Bytes({0x19, 0x43, 0x56, 0x54, 0x03, 0x32, 0x47, 0x54, 0x1d, 0x00, 0x00, 0x00, 0x0a, 0x13}) +
    "sb_3591ddc85ff4ee28" + Bytes({0x12, 0x06}) + "(none)";

TEST(CriuImages, ShiftsTheUserNamespacesHostIds) {
  // 1065536 is 0xc0 0x84 0x41 as a varint: the same length, the same layout.
  auto shifted = ShiftUsernsImage(kUserns, 1000000, 1065536, 65536);
  ASSERT_TRUE(shifted) << shifted.error().message;
  std::string expected = kUserns;
  expected[19] = 0x41;
  expected[31] = 0x41;
  EXPECT_EQ(*shifted, expected);
  // Back again, and to the same range: unchanged.
  auto back = ShiftUsernsImage(*shifted, 1065536, 1000000, 65536);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, kUserns);
  EXPECT_EQ(*ShiftUsernsImage(kUserns, 1000000, 1000000, 65536), kUserns);
}

TEST(CriuImages, ALongerVarintChangesTheEntrysLength) {
  // 300000000 takes five varint bytes where 1000000 took three: the entry grows by 4.
  auto shifted = ShiftUsernsImage(kUserns, 1000000, 300000000, 65536);
  ASSERT_TRUE(shifted);
  EXPECT_EQ(shifted->size(), kUserns.size() + 4);
  EXPECT_EQ(static_cast<uint8_t>((*shifted)[8]), 0x18 + 4);
  auto back = ShiftUsernsImage(*shifted, 300000000, 1000000, 65536);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, kUserns);
}

TEST(CriuImages, RefusesWhatIsNotTheImageOrMapsOutsideTheRange) {
  EXPECT_FALSE(ShiftUsernsImage(kUtsns, 1000000, 1065536, 65536));
  EXPECT_FALSE(ShiftUsernsImage("", 1000000, 1065536, 65536));
  // The map's host ids are not the range it was said to be made in.
  EXPECT_FALSE(ShiftUsernsImage(kUserns, 2000000, 1065536, 65536));
  // Cut short: the entry's length passes the end.
  EXPECT_FALSE(ShiftUsernsImage(kUserns.substr(0, kUserns.size() - 1), 1000000, 1065536, 65536));
  EXPECT_FALSE(RenameUtsImage(kUserns, "x"));
  // A varint that never ends.
  std::string bad = kUtsns.substr(0, 8) + Bytes({0x02, 0x00, 0x00, 0x00, 0x08, 0xff});
  EXPECT_FALSE(RenameUtsImage(bad, "x"));
}

TEST(CriuImages, RenamesTheHostKeepingTheDomain) {
  auto renamed = RenameUtsImage(kUtsns, "sb_0123456789abcdef0");
  ASSERT_TRUE(renamed) << renamed.error().message;
  const std::string expected = kUtsns.substr(0, 8) + Bytes({0x1e, 0x00, 0x00, 0x00, 0x0a, 0x14}) +
                               "sb_0123456789abcdef0" + Bytes({0x12, 0x06}) + "(none)";
  EXPECT_EQ(*renamed, expected);
}

}  // namespace
}  // namespace sandstream::sandbox
