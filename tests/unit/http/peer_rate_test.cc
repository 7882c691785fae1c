// Unit tests of the rate per client address (http/peer_rate.h), on a clock the tests move.
#include "http/peer_rate.h"

#include <gtest/gtest.h>

#include <string>

namespace sandstream::http {
namespace {

TEST(PeerRateTest, ABurstThenTheRate) {
  PeerRate rate(10, 20);
  const SteadyTime t0 = SteadyTime{} + std::chrono::hours(1);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(rate.Take("10.0.0.1", t0)) << i;
  EXPECT_FALSE(rate.Take("10.0.0.1", t0));
  // Another address has its own bucket.
  EXPECT_TRUE(rate.Take("10.0.0.2", t0));
  // A tenth of a second later, one more; a second later, ten.
  EXPECT_TRUE(rate.Take("10.0.0.1", t0 + std::chrono::milliseconds(100)));
  EXPECT_FALSE(rate.Take("10.0.0.1", t0 + std::chrono::milliseconds(100)));
  int taken = 0;
  while (rate.Take("10.0.0.1", t0 + std::chrono::milliseconds(1100))) ++taken;
  EXPECT_EQ(taken, 10);
  // Never more than the burst, however long it waited.
  taken = 0;
  while (rate.Take("10.0.0.1", t0 + std::chrono::hours(5))) ++taken;
  EXPECT_EQ(taken, 20);
}

TEST(PeerRateTest, ManyAddressesAreForgottenOnceTheirBucketsAreFull) {
  PeerRate rate(10, 2);
  const SteadyTime t0 = SteadyTime{} + std::chrono::hours(1);
  for (int i = 0; i < 5000; ++i) {
    EXPECT_TRUE(rate.Take("peer-" + std::to_string(i), t0 + std::chrono::seconds(i)));
  }
  // Forgetting a full bucket changes nothing: a forgotten address starts full again.
  EXPECT_TRUE(rate.Take("peer-0", t0 + std::chrono::seconds(5000)));
  EXPECT_TRUE(rate.Take("peer-0", t0 + std::chrono::seconds(5000)));
  EXPECT_FALSE(rate.Take("peer-0", t0 + std::chrono::seconds(5000)));
}

}  // namespace
}  // namespace sandstream::http
