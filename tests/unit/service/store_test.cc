// The store: what a restart loads is bounded whatever the database holds.
#include "service/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace sandstream {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sandstream-store-test.XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    auto store = Store::Open(dir_ + "/state.db");
    ASSERT_TRUE(store.ok()) << store.error().message;
    store_ = std::move(*store);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  static std::string Record(const std::string& status) {
    return R"({"status":")" + status + R"("})";
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, ARestartLoadsTheRunningAndTheNewestFinished) {
  ASSERT_TRUE(store_->PutSandbox("sb_a", "{}").ok());
  ASSERT_TRUE(store_->PutSandbox("sb_b", "{}").ok());
  ASSERT_TRUE(store_->PutProcess("sb_a", "run_early", Record("running")).ok());
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(store_->PutProcess("sb_a", "done_" + std::to_string(i), Record("exited")).ok());
  }
  ASSERT_TRUE(store_->PutProcess("sb_b", "done_b", Record("exited")).ok());
  ASSERT_TRUE(store_->PutProcess("sb_a", "run_late", Record("running")).ok());

  auto rows = store_->Processes(256);
  ASSERT_TRUE(rows.ok()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u + 256u + 1u);
  // In start order: the early running one first, the oldest 44 finished ones left out.
  EXPECT_EQ((*rows)[0].id, "run_early");
  EXPECT_EQ((*rows)[1].id, "done_44");
  EXPECT_EQ(rows->back().id, "run_late");
  size_t of_b = 0;
  for (const auto& r : *rows) of_b += r.sandbox_id == "sb_b";
  EXPECT_EQ(of_b, 1u) << "each sandbox has its own bound";

  ASSERT_TRUE(store_->DeleteProcess("sb_a", "run_late").ok());
  rows = store_->Processes(256);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->back().id, "done_b");
}

}  // namespace
}  // namespace sandstream
