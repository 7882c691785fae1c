// The ledger of what tenants hold on a node: sandboxes live and being made, streams, and the
// refusals past a quota.
#include "service/quota_ledger.h"

#include <gtest/gtest.h>

#include "../process/test_loop.h"

namespace sandstream {
namespace {

using unit::RunTask;

sandbox::Limits Sized(int64_t memory_mb) {
  sandbox::Limits limits;
  limits.memory_mb = memory_mb;
  return limits;
}

TEST(QuotaLedgerTest, HoldsAndReleasesWhatEachSandboxTakes) {
  QuotaLedger ledger(nullptr);
  ledger.Hold("acme", Sized(256));
  ledger.Hold("acme", Sized(512));
  ledger.Hold("", Sized(1024));  // the admin's: held, never a tenant's
  EXPECT_EQ(ledger.Usage("acme").sandboxes, 2);
  EXPECT_EQ(ledger.Usage("acme").memory_mb, 768);
  EXPECT_FALSE(ledger.Committed().contains(""));
  ledger.Release("acme", Sized(256));
  EXPECT_EQ(ledger.Usage("acme").memory_mb, 512);
  ledger.Release("acme", Sized(512));
  EXPECT_EQ(ledger.Usage("acme").sandboxes, 0);
  EXPECT_FALSE(ledger.Committed().contains("acme")) << "a tenant with nothing left is forgotten";
}

TEST(QuotaLedgerTest, ASandboxBeingMadeIsCommittedUntilUnreserved) {
  QuotaLedger ledger(nullptr);
  auto reservation = ledger.Reserve("acme", Sized(256));
  ASSERT_TRUE(reservation) << reservation.error().message;
  EXPECT_EQ(ledger.creating(), 1u);
  EXPECT_EQ(ledger.Committed().at("acme").memory_mb, 256);
  EXPECT_EQ(ledger.Usage("acme").sandboxes, 0) << "usage counts live sandboxes only";
  ledger.Unreserve(*reservation);
  EXPECT_EQ(ledger.creating(), 0u);
  EXPECT_TRUE(ledger.Committed().empty());
}

TEST(QuotaLedgerTest, StreamsAreCountedByTenantAndNeverBelowZero) {
  QuotaLedger ledger(nullptr);
  ledger.StreamOpened("acme");
  ledger.StreamOpened("acme");
  ledger.StreamOpened("");  // the admin's are not counted
  EXPECT_EQ(ledger.StreamsOf("acme"), 2);
  EXPECT_EQ(ledger.Usage("acme").streams, 2);
  EXPECT_EQ(ledger.StreamsOf(""), 0);
  ledger.StreamClosed("acme");
  ledger.StreamClosed("acme");
  ledger.StreamClosed("acme");
  EXPECT_EQ(ledger.StreamsOf("acme"), 0);
}

TEST(QuotaLedgerTest, ReserveRefusesPastAQuotaCountingWhatIsBeingMade) {
  boost::asio::io_context io;
  Access access("admin-key", nullptr);
  Quotas quotas;
  quotas.sandboxes = 3;
  quotas.memory_mb = 1024;
  ASSERT_TRUE(RunTask(io, access.CreateTenant("acme", quotas)));
  QuotaLedger ledger(&access);
  ASSERT_NE(ledger.TenantOf("acme"), nullptr);
  EXPECT_EQ(ledger.TenantOf(""), nullptr) << "the admin has no quotas";
  ledger.Hold("acme", Sized(512));
  auto making = ledger.Reserve("acme", Sized(256));
  ASSERT_TRUE(making) << making.error().message;
  auto memory = ledger.Reserve("acme", Sized(512));
  ASSERT_FALSE(memory) << "512 + 256 + 512 MiB passes memory_mb 1024";
  EXPECT_EQ(memory.error().code, ErrorCode::kQuotaExceeded);
  EXPECT_NE(memory.error().message.find("memory_mb"), std::string::npos) << memory.error().message;
  EXPECT_EQ(ledger.creating(), 1u) << "a refused reservation counts nothing";
  auto third = ledger.Reserve("acme", Sized(64));
  ASSERT_TRUE(third) << third.error().message;
  auto fourth = ledger.Reserve("acme", Sized(64));
  ASSERT_FALSE(fourth) << "one live and two being made are three sandboxes already";
  EXPECT_NE(fourth.error().message.find("sandboxes 3"), std::string::npos)
      << fourth.error().message;
  ledger.Unreserve(*making);
  EXPECT_TRUE(ledger.Reserve("acme", Sized(64)));
}

}  // namespace
}  // namespace sandstream
