// Unit tests of a terminal's control messages (GET exec/pty): resizes are checked whatever
// number they carry, input is decoded, anything else is an error to send back.
#include "api/common/terminal_control.h"

#include <gtest/gtest.h>

#include <string>

namespace sandstream::api {
namespace {

TEST(TerminalControlTest, ResizeWithinRange) {
  auto r = ApplyControl(nullptr, R"({"type":"resize","rows":24,"cols":80})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, "");
  EXPECT_TRUE(ApplyControl(nullptr, R"({"type":"resize","rows":1000,"cols":1.0})").ok());
}

// Found by fuzz_websocket: a number past int's range was cast to int before its range check.
TEST(TerminalControlTest, ResizeOutOfRangeIsRefused) {
  constexpr const char* kMessages[] = {
      R"({"type":"resize","rows":1e300,"cols":80})",
      R"({"type":"resize","rows":24,"cols":-1e300})",
      R"({"type":"resize","rows":18446744073709551615,"cols":80})",
      R"({"type":"resize","rows":0,"cols":80})",
      R"({"type":"resize","rows":1001,"cols":80})",
      R"({"type":"resize","rows":24.5,"cols":80})",
      R"({"type":"resize","rows":"24","cols":80})",
  };
  for (const char* message : kMessages) {
    auto r = ApplyControl(nullptr, message);
    ASSERT_FALSE(r.ok()) << message;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest) << message;
  }
}

TEST(TerminalControlTest, InputIsDecoded) {
  auto r = ApplyControl(nullptr, R"({"type":"input","data":"ls -l\n\u0003"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "ls -l\n\x03");
  EXPECT_FALSE(ApplyControl(nullptr, R"({"type":"input"})").ok());
  EXPECT_FALSE(ApplyControl(nullptr, R"({"type":"dance"})").ok());
  EXPECT_EQ(ApplyControl(nullptr, "[1]").error().code, ErrorCode::kInvalidJson);
}

TEST(TerminalControlTest, BinaryControlNeedsAJsonObject) {
  EXPECT_TRUE(IsBinaryControl("\x01{\"type\":\"input\",\"data\":\"x\"}"));
  EXPECT_FALSE(IsBinaryControl("\x01"));
  EXPECT_FALSE(IsBinaryControl("\x01[]"));
  EXPECT_FALSE(IsBinaryControl("{}"));
}

}  // namespace
}  // namespace sandstream::api
