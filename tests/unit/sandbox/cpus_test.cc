// CPU lists in the kernel's form, and how a sandbox's CPUs are picked.
#include "sandbox/cpus.h"

#include <gtest/gtest.h>

namespace sandstream::sandbox {
namespace {

using Cpus = std::vector<int>;

TEST(CpuList, ParsesTheKernelsForms) {
  EXPECT_EQ(ParseCpuList("0-3\n"), Cpus({0, 1, 2, 3}));
  EXPECT_EQ(ParseCpuList("0"), Cpus({0}));
  EXPECT_EQ(ParseCpuList("0-1,4,6-7"), Cpus({0, 1, 4, 6, 7}));
  EXPECT_EQ(ParseCpuList("5,1-2,2"), Cpus({1, 2, 5}));
  EXPECT_EQ(ParseCpuList(""), Cpus());
  EXPECT_EQ(ParseCpuList("\n"), Cpus());
}

TEST(CpuList, RefusesWhatIsNotAList) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "0,", ",0", "0,,1", "1 2", "99999", "0x1"}) {
    EXPECT_FALSE(ParseCpuList(bad).has_value()) << bad;
  }
}

TEST(CpuList, FormatsRanges) {
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({0}), "0");
  EXPECT_EQ(FormatCpuList({0, 1}), "0-1");
  EXPECT_EQ(FormatCpuList({0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(FormatCpuList(*ParseCpuList("0-1,4,6-7")), "0-1,4,6-7");
}

TEST(PickCpus, RoundsTheLimitUpToWholeCpus) {
  const Cpus four{0, 1, 2, 3};
  EXPECT_EQ(PickCpus(four, 50, 0).size(), 1u);
  EXPECT_EQ(PickCpus(four, 100, 0).size(), 1u);
  EXPECT_EQ(PickCpus(four, 101, 0).size(), 2u);
  EXPECT_EQ(PickCpus(four, 250, 0).size(), 3u);
  EXPECT_EQ(PickCpus(four, 400, 0), four);
  EXPECT_EQ(PickCpus(four, 10000, 3), four);
}

TEST(PickCpus, SpreadsSandboxesOverTheCpus) {
  const Cpus four{0, 1, 2, 3};
  EXPECT_EQ(PickCpus(four, 50, 0), Cpus({0}));
  EXPECT_EQ(PickCpus(four, 50, 1), Cpus({1}));
  EXPECT_EQ(PickCpus(four, 50, 5), Cpus({1}));
  EXPECT_EQ(PickCpus(four, 200, 1), Cpus({2, 3}));
  EXPECT_EQ(PickCpus(four, 300, 1), Cpus({0, 1, 3}));
  // The host's own list, gaps and all.
  EXPECT_EQ(PickCpus({2, 5, 9}, 100, 2), Cpus({9}));
}

}  // namespace
}  // namespace sandstream::sandbox
