// Unit tests of what the files routes send and count: download headers that stay well formed
// whatever a file's name holds, active content kept off the API's origin, and the watch quota.
#include "api/common/files.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace sandstream::api {
namespace {

// Every line "Name: value" with only visible ASCII (and spaces) in it.
std::vector<std::string> Lines(const std::string& block) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = block.find("\r\n", start)) != std::string::npos; start = end + 2) {
    lines.push_back(block.substr(start, end - start));
  }
  EXPECT_EQ(start, block.size()) << "the block does not end with CRLF";
  for (const auto& line : lines) {
    EXPECT_NE(line.find(": "), std::string::npos) << line;
    for (const char c : line) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << static_cast<int>(c) << " in " << line;
    }
  }
  return lines;
}

std::optional<std::string> Field(const std::vector<std::string>& lines, const std::string& name) {
  for (const auto& line : lines) {
    if (line.starts_with(name + ": ")) return line.substr(name.size() + 2);
  }
  return std::nullopt;
}

TEST(ContentDispositionTest, NamesAreNeverSentRaw) {
  EXPECT_EQ(ContentDisposition("inline", "report.txt"),
            "inline; filename=\"report.txt\"; filename*=UTF-8''report.txt");
  EXPECT_EQ(ContentDisposition("attachment", "a \"b\"\r\nSet-Cookie: x=1"),
            "attachment; filename=\"a _b___Set-Cookie: x=1\"; "
            "filename*=UTF-8''a%20%22b%22__Set-Cookie%3A%20x%3D1");
  // One `_` per non-ASCII character in the fallback; UTF-8 bytes in filename*.
  EXPECT_EQ(ContentDisposition("inline", "na\xc3\xafve \xe2\x82\xac.txt"),
            "inline; filename=\"na_ve _.txt\"; filename*=UTF-8''na%C3%AFve%20%E2%82%AC.txt");
  // `\` and `%` would be read as escapes by some clients; invalid UTF-8 becomes U+FFFD.
  EXPECT_EQ(ContentDisposition("inline", "50%\\x\xff"),
            "inline; filename=\"50__x_\"; filename*=UTF-8''50%25%5Cx%EF%BF%BD");
}

TEST(DownloadHeadersTest, ActiveContentIsAnAttachmentUnderGuards) {
  for (const char* path : {"/w/page.html", "/w/PAGE.HTM", "/w/pic.svg", "/w/a.xml", "/w/app.js",
                           "/w/doc.pdf", "/w/noext", "/w/x.unknown"}) {
    const auto lines = Lines(DownloadHeaders(path));
    ASSERT_TRUE(Field(lines, "Content-Disposition")) << path;
    EXPECT_TRUE(Field(lines, "Content-Disposition")->starts_with("attachment; ")) << path;
    EXPECT_EQ(Field(lines, "X-Content-Type-Options"), "nosniff") << path;
    EXPECT_EQ(Field(lines, "Content-Security-Policy"), "default-src 'none'; sandbox") << path;
  }
  EXPECT_EQ(Field(Lines(DownloadHeaders("/w/pic.svg")), "Content-Type"), "image/svg+xml");
  EXPECT_EQ(Field(Lines(DownloadHeaders("/w/noext")), "Content-Type"), "application/octet-stream");
  for (const char* path : {"/w/notes.txt", "/w/pic.png", "/w/data.json"}) {
    const auto lines = Lines(DownloadHeaders(path));
    EXPECT_TRUE(Field(lines, "Content-Disposition")->starts_with("inline; ")) << path;
    EXPECT_EQ(Field(lines, "X-Content-Type-Options"), "nosniff") << path;
  }
}

TEST(DownloadHeadersTest, APathWithLineBreaksStaysOneHeader) {
  const auto lines = Lines(DownloadHeaders("/work space/a\r\nX-Injected: 1\r\n.txt"));
  EXPECT_EQ(lines.size(), 5u);
  EXPECT_FALSE(Field(lines, "X-Injected"));
  EXPECT_EQ(Field(lines, "X-File-Path"), "/work%20space/a%0D%0AX-Injected%3A%201%0D%0A.txt");
}

TEST(WatchQuotaTest, CapsPerSandboxAndInAllAndGivesBack) {
  WatchQuota quota(2, 3, 3);
  {
    auto a1 = quota.Take("sb_a");
    auto a2 = quota.Take("sb_a");
    ASSERT_TRUE(a1 && a2);
    auto a3 = quota.Take("sb_a");
    ASSERT_FALSE(a3);
    EXPECT_EQ(a3.error().code, ErrorCode::kQuotaExceeded);
    EXPECT_NE(a3.error().message.find("sb_a has 2 file watches"), std::string::npos);
    auto b1 = quota.Take("sb_b");
    ASSERT_TRUE(b1);
    auto b2 = quota.Take("sb_b");
    ASSERT_FALSE(b2);
    EXPECT_NE(b2.error().message.find("3 file watches"), std::string::npos);
    EXPECT_NE(b2.error().message.find("max_user_instances"), std::string::npos);
    EXPECT_EQ(quota.open(), 3u);
    auto moved = std::move(*a1);
    EXPECT_EQ(quota.open(), 3u);
  }
  EXPECT_EQ(quota.open(), 0u);
  EXPECT_TRUE(quota.Take("sb_a"));
}

TEST(WatchQuotaTest, ATenantHoldsItsShareAndNoMore) {
  WatchQuota quota(2, 6, 3);
  auto m1 = quota.Take("sb_m1", "mallory");
  auto m2 = quota.Take("sb_m1", "mallory");
  auto m3 = quota.Take("sb_m2", "mallory");
  ASSERT_TRUE(m1 && m2 && m3);
  auto m4 = quota.Take("sb_m2", "mallory");
  ASSERT_FALSE(m4);
  EXPECT_EQ(m4.error().code, ErrorCode::kQuotaExceeded);
  EXPECT_NE(m4.error().message.find("tenant 'mallory' has 3 file watches"), std::string::npos);
  // Another tenant still has its own; a larger share is the tenant's quota.
  auto a1 = quota.Take("sb_a", "alice", 1);
  ASSERT_TRUE(a1);
  EXPECT_FALSE(quota.Take("sb_a", "alice", 1));
  auto b1 = quota.Take("sb_b", "bob", 5);
  auto b2 = quota.Take("sb_b", "bob", 5);
  ASSERT_TRUE(b1 && b2);
  // The daemon's own limit still holds over every share.
  auto b3 = quota.Take("sb_b2", "bob", 5);
  ASSERT_FALSE(b3);
  EXPECT_NE(b3.error().message.find("the daemon has 6"), std::string::npos);
}

}  // namespace
}  // namespace sandstream::api
