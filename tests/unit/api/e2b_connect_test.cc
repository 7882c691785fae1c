// Unit tests of envd's wire as the E2B adapter writes and reads it: Connect envelopes, the
// error codes and their statuses, proto3 JSON's bytes and integers, and the derived access
// tokens of sandboxes.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "api/e2b/connect.h"
#include "api/e2b/routes.h"
#include "service/access.h"

namespace sandstream::api::e2b {
namespace {

namespace json = boost::json;

TEST(ConnectEnvelopeTest, FlagsThenBigEndianLengthThenTheMessage) {
  std::string out;
  AppendEnvelope(out, R"({"event":{"start":{"pid":4242}}})");
  ASSERT_EQ(out.size(), 5u + 32u);
  EXPECT_EQ(out.substr(0, 5), std::string("\x00\x00\x00\x00\x20", 5));
  EXPECT_EQ(out.substr(5), R"({"event":{"start":{"pid":4242}}})");
  out.clear();
  AppendEnvelope(out, "{}", true);
  EXPECT_EQ(out, std::string("\x02\x00\x00\x00\x02{}", 7));
  // Lengths past one byte keep their order.
  out.clear();
  AppendEnvelope(out, std::string(0x010203, 'x'));
  EXPECT_EQ(out.substr(0, 5), std::string("\x00\x00\x01\x02\x03", 5));
}

TEST(ConnectErrorTest, CodesAndTheirStatuses) {
  EXPECT_EQ(ConnectCode(ErrorCode::kNotFound), "not_found");
  EXPECT_EQ(ConnectCode(ErrorCode::kInvalidRequest), "invalid_argument");
  EXPECT_EQ(ConnectCode(ErrorCode::kInvalidJson), "invalid_argument");
  EXPECT_EQ(ConnectCode(ErrorCode::kUnauthorized), "unauthenticated");
  EXPECT_EQ(ConnectCode(ErrorCode::kConflict), "failed_precondition");
  EXPECT_EQ(ConnectCode(ErrorCode::kQuotaExceeded), "resource_exhausted");
  EXPECT_EQ(ConnectCode(ErrorCode::kTimeout), "deadline_exceeded");
  EXPECT_EQ(ConnectCode(ErrorCode::kShuttingDown), "unavailable");
  EXPECT_EQ(ConnectCode(ErrorCode::kInternal), "internal");
  EXPECT_EQ(ConnectStatus("not_found"), http::status::not_found);
  EXPECT_EQ(ConnectStatus("invalid_argument"), http::status::bad_request);
  EXPECT_EQ(ConnectStatus("failed_precondition"), http::status::bad_request);
  EXPECT_EQ(ConnectStatus("already_exists"), http::status::conflict);
  EXPECT_EQ(ConnectStatus("unauthenticated"), http::status::unauthorized);
  EXPECT_EQ(ConnectStatus("resource_exhausted"), http::status::too_many_requests);
  EXPECT_EQ(ConnectStatus("deadline_exceeded"), http::status::gateway_timeout);
  EXPECT_EQ(ConnectStatus("unimplemented"), http::status::not_implemented);
  EXPECT_EQ(ConnectStatus("unavailable"), http::status::service_unavailable);
  EXPECT_EQ(ConnectStatus("data_loss"), http::status::internal_server_error);
  // Every code the adapter writes has a status other than 200.
  for (ErrorCode code : {ErrorCode::kInvalidJson, ErrorCode::kForbidden, ErrorCode::kBadGateway,
                         ErrorCode::kPayloadTooLarge, ErrorCode::kUnsupportedMediaType}) {
    EXPECT_NE(ConnectStatus(ConnectCode(code)), http::status::ok);
  }
}

TEST(ProtoJsonTest, BytesInEveryBase64Alphabet) {
  // "\xfb\xff" is "+/8=" in the standard alphabet, "-_8" URL-safe and unpadded.
  for (const char* text : {"+/8=", "+/8", "-_8=", "-_8"}) {
    auto bytes = DecodeBytes(text, "stdin");
    ASSERT_TRUE(bytes) << text;
    EXPECT_EQ(*bytes, "\xfb\xff") << text;
  }
  EXPECT_EQ(*DecodeBytes("", "stdin"), "");
  auto bad = DecodeBytes("a$b=", "input.stdin");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("input.stdin"), std::string::npos);
}

TEST(ProtoJsonTest, IntegersAsNumbersOrStringsWithinTheirRange) {
  const json::object o = json::parse(
                             R"({"pid": 42, "size": "12", "neg": -1, "big": "99999999999",
                                 "text": "x", "frac": 1.5, "nothing": null, "exit_code": 3})")
                             .as_object();
  EXPECT_EQ(**OptInt(o, "pid", {}, 1, INT32_MAX), 42);
  EXPECT_EQ(**OptInt(o, "size", {}, 0, INT64_MAX), 12);
  EXPECT_FALSE(OptInt(o, "neg", {}, 0, 10));
  EXPECT_FALSE(OptInt(o, "big", {}, 0, INT32_MAX));
  EXPECT_FALSE(OptInt(o, "text", {}, 0, 10));
  EXPECT_FALSE(OptInt(o, "frac", {}, 0, 10));
  EXPECT_FALSE(OptInt(o, "nothing", {}, 0, 10)->has_value());
  EXPECT_FALSE(OptInt(o, "absent", {}, 0, 10)->has_value());
  // The proto name is read when the JSON name is absent.
  EXPECT_EQ(**OptInt(o, "exitCode", "exit_code", 0, 255), 3);
}

TEST(DialectTest, PathsOfE2bHearItsErrorShapes) {
  EXPECT_EQ(DialectOf("/process.Process/Nope"), Dialect::kConnect);
  EXPECT_EQ(DialectOf("/filesystem.Filesystem/Stat"), Dialect::kConnect);
  EXPECT_EQ(DialectOf("/v2/sandboxes/sb_1/nope"), Dialect::kE2b);
  EXPECT_EQ(DialectOf("/sandboxes"), Dialect::kE2b);
  EXPECT_EQ(DialectOf("/sandboxesx"), std::nullopt);
  EXPECT_EQ(DialectOf("/v1/sandboxes/sb_1"), std::nullopt);
  EXPECT_EQ(DialectOf("/"), std::nullopt);
}

TEST(SandboxAccessTokenTest, OnePerSandboxHolderAndSecret) {
  const std::string a = SandboxAccessToken("key", "sb_0123456789abcdef", kAdminHolder);
  EXPECT_TRUE(a.starts_with("sbt_admin_"));
  EXPECT_EQ(a.size(), 10u + 64u);
  EXPECT_EQ(a, SandboxAccessToken("key", "sb_0123456789abcdef", kAdminHolder));
  EXPECT_NE(a, SandboxAccessToken("key", "sb_0123456789abcdee", kAdminHolder));
  EXPECT_NE(a, SandboxAccessToken("other", "sb_0123456789abcdef", kAdminHolder));
  const std::string k = SandboxAccessToken("key", "sb_0123456789abcdef", "key_00112233aabbccdd");
  EXPECT_TRUE(k.starts_with("sbt_00112233aabbccdd_"));
  EXPECT_NE(k.substr(21), a.substr(10));
}

TEST(SandboxAccessTokenTest, NamesItsHolderOnlyWhenItIsTheSandboxs) {
  const std::string sb = "sb_0123456789abcdef";
  const std::string key = "key_00112233aabbccdd";
  const std::string a = SandboxAccessToken("secret", sb, kAdminHolder);
  const std::string k = SandboxAccessToken("secret", sb, key);
  EXPECT_EQ(AccessTokenHolder("secret", sb, a), std::string(kAdminHolder));
  EXPECT_EQ(AccessTokenHolder("secret", sb, k), key);
  EXPECT_EQ(AccessTokenHolder("secret", "sb_0123456789abcdee", k), std::nullopt);
  EXPECT_EQ(AccessTokenHolder("other", sb, k), std::nullopt);
  // Another holder's name on this MAC, a changed MAC, other shapes.
  std::string moved = k;
  moved.replace(4, 16, "00112233aabbccde");
  EXPECT_EQ(AccessTokenHolder("secret", sb, moved), std::nullopt);
  std::string flipped = k;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  EXPECT_EQ(AccessTokenHolder("secret", sb, flipped), std::nullopt);
  for (const std::string& bad : {std::string(), std::string("sbt_"), "sbt_" + std::string(64, '0'),
                                 "sbt_ADMIN_" + a.substr(10), "sbt_admin" + a.substr(9, 64)}) {
    EXPECT_EQ(AccessTokenHolder("secret", sb, bad), std::nullopt) << bad;
  }
}

// The values E2B's own SDK (e2b.sandbox.signature.get_signature) gives for the same inputs.
TEST(FileUrlSignatureTest, IsTheSdks) {
  EXPECT_EQ(FileUrlSignature("/home/user/a.txt", "read", "", "sbt_abc", ""),
            "v1_+HqYlgbq6KLra7CYwwohRJ18+tVIepmXOiwzMVX2/JI");
  EXPECT_EQ(FileUrlSignature("dir/b c.bin", "write", "root", "sbt_abc", "1700000060"),
            "v1_8s8f2ieLCsovWro8TkehHhOi93TZL/pWg7RXrcLVG14");
  EXPECT_NE(FileUrlSignature("/home/user/a.txt", "write", "", "sbt_abc", ""),
            FileUrlSignature("/home/user/a.txt", "read", "", "sbt_abc", ""));
}

}  // namespace
}  // namespace sandstream::api::e2b
