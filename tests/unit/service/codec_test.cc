// The stored form of a sandbox, read back at a restart: every field SandboxJson writes, and a
// clear error (never an exception) for a record that is not one.
#include "service/codec.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "service/sandbox_entry.h"

namespace sandstream {
namespace {

namespace json = boost::json;

TEST(StoredSandboxTest, ReadsBackWhatSandboxJsonWrites) {
  boost::asio::io_context io;
  SandboxEntry sb(io.get_executor());
  sb.id = "sb_1";
  sb.tenant = "acme";
  sb.template_name = "base";
  sb.env = {{"A", "1"}};
  sb.cwd = "/workspace/app";
  sb.limits.memory_mb = 300;
  sb.limits.open_files = 77;
  sb.network = sandbox::NetworkMode::kNone;
  sb.allow_nested_userns = true;
  sb.metadata = {{"owner", "ci"}};
  sb.created_at = SystemNow();
  sb.ttl_seconds = 60;
  json::object record = SandboxJson(sb);
  record["ports"] =
      json::array{json::object{{"port", 8080}, {"created_at", "2026-01-02T03:04:05.000Z"}},
                  json::object{{"port", 70000}}};
  record["sessions"] = json::array{json::object{{"id", "s"}}};
  auto stored = StoredSandboxFromJson(json::serialize(record));
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_FALSE(stored->deleting);
  EXPECT_EQ(stored->tenant, "acme");
  EXPECT_EQ(stored->template_name, "base");
  EXPECT_EQ(stored->env, sb.env);
  EXPECT_EQ(stored->cwd, "/workspace/app");
  EXPECT_EQ(stored->limits.memory_mb, 300);
  EXPECT_EQ(stored->limits.open_files, 77);
  EXPECT_EQ(stored->network, sandbox::NetworkMode::kNone);
  EXPECT_TRUE(stored->allow_nested_userns);
  EXPECT_EQ(stored->metadata.at("owner"), "ci");
  EXPECT_EQ(stored->ttl_seconds, 60);
  ASSERT_TRUE(stored->created_at);
  EXPECT_EQ(FormatRfc3339(*stored->created_at), FormatRfc3339(sb.created_at));
  ASSERT_EQ(stored->ports.size(), 1u) << "a port out of range is left out";
  EXPECT_EQ(FormatRfc3339(stored->ports.at(8080)), "2026-01-02T03:04:05.000Z");
  EXPECT_EQ(stored->sessions.size(), 1u);
  EXPECT_TRUE(stored->contexts.empty());
}

TEST(StoredSandboxTest, AnEgressRecordWithoutItsPolicySaysSo) {
  boost::asio::io_context io;
  SandboxEntry sb(io.get_executor());
  sb.template_name = "base";
  sb.network = sandbox::NetworkMode::kEgress;
  json::object record = SandboxJson(sb);
  record["egress"] = "not a policy";
  auto stored = StoredSandboxFromJson(json::serialize(record));
  ASSERT_TRUE(stored) << stored.error().message;
  EXPECT_EQ(stored->network, sandbox::NetworkMode::kEgress);
  EXPECT_FALSE(stored->egress);
}

TEST(StoredSandboxTest, WhatIsNotASandboxRecordIsAnErrorNotAnException) {
  for (const char* text : {"", "[]", "{\"status\":\"running\"}",
                           "{\"status\":\"running\",\"template\":\"base\",\"env\":[],"
                           "\"cwd\":\"/\",\"limits\":{},\"network\":\"loopback\"}",
                           "{\"status\":\"running\",\"template\":\"base\",\"env\":{},\"cwd\":\"/\","
                           "\"limits\":{\"memory_mb\":1,\"pids\":1,\"cpu_percent\":1,"
                           "\"disk_mb\":1,\"open_files\":1},\"network\":\"wifi\","
                           "\"ttl_seconds\":0}"}) {
    auto stored = StoredSandboxFromJson(text);
    ASSERT_FALSE(stored) << text;
    EXPECT_EQ(stored.error().code, ErrorCode::kInvalidRequest) << text;
  }
}

TEST(StoredProcessTest, ARunningProcessNotTakenBackEndsKilledWithAnExitEvent) {
  json::object o{{"status", "running"},
                 {"next_seq", 5},
                 {"stdout_bytes", 10},
                 {"stderr_bytes", 2},
                 {"tail", json::array{}}};
  EndStoredAsKilled(o, SystemNow());
  EXPECT_EQ(o.at("status"), "exited");
  EXPECT_EQ(o.at("exit_code"), 137);
  EXPECT_EQ(o.at("reason"), "killed");
  EXPECT_EQ(o.at("next_seq"), 6);
  const auto& exit = o.at("tail").as_array().back().as_object();
  EXPECT_EQ(exit.at("kind"), "exit");
  EXPECT_EQ(exit.at("seq"), 5);
  EXPECT_EQ(exit.at("offset"), 12);
}

}  // namespace
}  // namespace sandstream
