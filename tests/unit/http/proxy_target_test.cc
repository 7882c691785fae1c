// Unit tests of which requests are for an exposed port (by host or by path), and which stay the
// API's (http/proxy_target.h).
#include "http/proxy_target.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace sandstream::http {
namespace {

const std::string kDomain = "localhost";

TEST(MatchProxyTest, ThePreviewHostNamesPortAndSandbox) {
  auto t = MatchProxy("8000-sb_0123456789abcdef.localhost:8080", "/any/path", kDomain);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->sandbox_id, "sb_0123456789abcdef");
  EXPECT_EQ(t->port, 8000);
  EXPECT_TRUE(t->preview);
  // Host names are case-insensitive; the id is matched in lower case.
  t = MatchProxy("8000-SB_0123456789ABCDEF.LocalHost", "/", kDomain);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->sandbox_id, "sb_0123456789abcdef");
}

TEST(MatchProxyTest, OtherHostsAreTheApis) {
  for (const char* host : {"localhost:8080", "127.0.0.1:8080", "8000-sb_x.example.com",
                           "0-sb_x.localhost", "65536-sb_x.localhost", "08000-sb_x.localhost",
                           "x-sb_x.localhost", "8000-other.localhost", "[::1]:8080", ""}) {
    EXPECT_FALSE(MatchProxy(host, "/v1/sandboxes", kDomain).has_value()) << host;
  }
}

TEST(MatchProxyTest, ThePathFormKeepsItsPrefix) {
  auto t = MatchProxy("127.0.0.1:8080", "/v1/sandboxes/sb_1/ports/3000/a/b", kDomain);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->sandbox_id, "sb_1");
  EXPECT_EQ(t->port, 3000);
  EXPECT_FALSE(t->preview);
  EXPECT_EQ(t->prefix, std::string("/v1/sandboxes/sb_1/ports/3000").size());
  EXPECT_TRUE(MatchProxy("h", "/v1/sandboxes/sb_1/ports/3000/", kDomain).has_value());
}

TEST(MatchProxyTest, ThePortResourceAndItsWaitAreTheApis) {
  for (const char* path : {"/v1/sandboxes/sb_1/ports", "/v1/sandboxes/sb_1/ports/3000",
                           "/v1/sandboxes/sb_1/ports/3000/wait", "/v1/sandboxes/sb_1/ports/0/x",
                           "/v1/sandboxes/sb_1/ports/99999/x", "/v1/sandboxes//ports/1/x",
                           "/v1/sandboxes/sb_1/files/3000/x"}) {
    EXPECT_FALSE(MatchProxy("h", path, kDomain).has_value()) << path;
  }
}

}  // namespace
}  // namespace sandstream::http
