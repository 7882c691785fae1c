// The spawner's request format: what the daemon encodes, the spawner parses back exactly, and
// any message that is cut, padded or lies about its counts is refused.
#include "sandbox/spawn_request.h"

#include <gtest/gtest.h>
#include <linux/filter.h>

#include <cstring>
#include <string>
#include <vector>

#include "sandbox/spawner.h"

namespace sandstream::sandbox {
namespace {

const sock_filter kFilter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
    BPF_STMT(BPF_RET | BPF_K, 0x7fff0000u),
};
const sock_fprog kProgram{2, const_cast<sock_filter*>(kFilter)};

SpawnRequest Sample() {
  SpawnRequest r;
  r.argv = {"sh", "-c", "echo hi", ""};
  r.env = {"PATH=/usr/bin:/bin", "LANG=C"};
  r.cwd = "/workspace/sub";
  r.search_path = "/usr/bin:/bin";
  r.uid = 1000;
  r.gid = 1001;
  r.open_files = 4096;
  r.seccomp = &kProgram;
  r.has_stdin = true;
  return r;
}

// A pointer-aligned copy, as the spawner receives it.
struct Message {
  explicit Message(const std::string& bytes)
      : words((bytes.size() + 7) / 8 + 1), size(bytes.size()) {
    std::memcpy(words.data(), bytes.data(), bytes.size());
  }
  char* data() { return reinterpret_cast<char*>(words.data()); }
  std::vector<uint64_t> words;
  size_t size;
};

std::string Encode(const SpawnRequest& r) {
  auto encoded = EncodeSpawnRequest(r);
  EXPECT_TRUE(encoded.ok()) << encoded.error().message;
  return encoded.ok() ? *encoded : std::string();
}

bool Parses(const std::string& bytes, const std::vector<int>& fds = {10, 11, 12, 13, 14}) {
  Message m(bytes);
  ParsedSpawnRequest out;
  return ParseSpawnRequest(m.data(), m.size, fds.data(), fds.size(), &out);
}

std::vector<std::string> Strings(char* const* v) {
  std::vector<std::string> out;
  for (; *v != nullptr; ++v) out.emplace_back(*v);
  return out;
}

TEST(SpawnRequestTest, RoundTrip) {
  const SpawnRequest r = Sample();
  Message m(Encode(r));
  const int fds[] = {10, 11, 12, 13, 14};
  ParsedSpawnRequest out;
  ASSERT_TRUE(ParseSpawnRequest(m.data(), m.size, fds, 5, &out));
  const LaunchSpec& l = out.launch;
  EXPECT_EQ(Strings(l.argv), r.argv);
  EXPECT_EQ(Strings(l.envp), r.env);
  EXPECT_STREQ(l.cwd, "/workspace/sub");
  EXPECT_STREQ(l.search_path, "/usr/bin:/bin");
  EXPECT_EQ(l.uid, 1000u);
  EXPECT_EQ(l.gid, 1001u);
  EXPECT_EQ(l.open_files, 4096);
  EXPECT_FALSE(l.tty);
  EXPECT_EQ(l.stdin_fd, 10);
  EXPECT_EQ(l.stdout_fd, 11);
  EXPECT_EQ(l.stderr_fd, 12);
  EXPECT_EQ(l.report_fd, 13);
  EXPECT_EQ(out.exit_fd, 14);
  EXPECT_EQ(out.held_count, 0u);
  ASSERT_EQ(l.seccomp, &out.filter);
  ASSERT_EQ(out.filter.len, 2);
  EXPECT_EQ(std::memcmp(out.filter.filter, kFilter, sizeof kFilter), 0);
}

TEST(SpawnRequestTest, NoStdinNoSearchTerminal) {
  SpawnRequest r = Sample();
  r.argv = {"/bin/true"};
  r.env.clear();
  r.search_path.reset();
  r.has_stdin = false;
  r.tty = true;
  r.uid = 0;
  Message m(Encode(r));
  const int fds[] = {5, 6, 7, 8};
  ParsedSpawnRequest out;
  ASSERT_TRUE(ParseSpawnRequest(m.data(), m.size, fds, 4, &out));
  EXPECT_EQ(Strings(out.launch.argv), std::vector<std::string>{"/bin/true"});
  EXPECT_EQ(out.launch.envp[0], nullptr);
  EXPECT_EQ(out.launch.search_path, nullptr);
  EXPECT_TRUE(out.launch.tty);
  EXPECT_EQ(out.launch.stdin_fd, -1);
  EXPECT_EQ(out.launch.stdout_fd, 5);
  EXPECT_EQ(out.launch.report_fd, 7);
  EXPECT_EQ(out.exit_fd, 8);
  EXPECT_FALSE(Parses(Encode(r), {5, 6, 7, 8, 9})) << "an fd more than the flags say";
}

TEST(SpawnRequestTest, StringsEndAtTheirFirstNul) {
  SpawnRequest r = Sample();
  r.argv = {"sh", std::string("a\0b", 3)};
  Message m(Encode(r));
  const int fds[] = {10, 11, 12, 13, 14};
  ParsedSpawnRequest out;
  ASSERT_TRUE(ParseSpawnRequest(m.data(), m.size, fds, 5, &out));
  EXPECT_EQ(Strings(out.launch.argv), (std::vector<std::string>{"sh", "a"}));
}

TEST(SpawnRequestTest, EveryTruncationAndAnyTrailingByteIsRefused) {
  const std::string bytes = Encode(Sample());
  ASSERT_TRUE(Parses(bytes));
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_FALSE(Parses(bytes.substr(0, len))) << len;
  }
  EXPECT_FALSE(Parses(bytes + '\0'));
  EXPECT_FALSE(Parses(bytes + 'x'));
}

TEST(SpawnRequestTest, LyingHeadersAreRefused) {
  const std::string good = Encode(Sample());
  auto with = [&](auto edit) {
    std::string bytes = good;
    SpawnRequestHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    edit(h);
    std::memcpy(bytes.data(), &h, sizeof h);
    return bytes;
  };
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.magic ^= 1; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.flags |= 64; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.argc = 0; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.argc = 0xffffffffu; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.envc = 0xffffffffu; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.argc += 1; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.envc -= 1; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.filter_len = 0; })));
  EXPECT_FALSE(
      Parses(with([](SpawnRequestHeader& h) { h.filter_len = kMaxSeccompInstructions + 1; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.filter_len = 0xffffffffu; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.open_files = 0; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.uid = 65536; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.gid = 65536; })));
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.reserved = 1; })));
  // Without its PATH the strings no longer line up with the counts.
  EXPECT_FALSE(Parses(with([](SpawnRequestHeader& h) { h.flags &= ~uint32_t{kSpawnSearchPath}; })));
}

TEST(SpawnRequestTest, WrongFdsAreRefused) {
  const std::string bytes = Encode(Sample());
  EXPECT_FALSE(Parses(bytes, {}));
  EXPECT_FALSE(Parses(bytes, {10, 11, 12, 13}));
  EXPECT_FALSE(Parses(bytes, {10, -1, 12, 13, 14}));
}

// What the keeper holds for the daemon comes after the exit pipe, and the count is the header's.
TEST(SpawnRequestTest, HeldFdsAndTagComeBack) {
  SpawnRequest r = Sample();
  r.held = 3;
  r.tag = 0x5;
  Message m(Encode(r));
  const int fds[] = {10, 11, 12, 13, 14, 20, 21, 22};
  ParsedSpawnRequest out;
  ASSERT_TRUE(ParseSpawnRequest(m.data(), m.size, fds, 8, &out));
  EXPECT_EQ(out.exit_fd, 14);
  ASSERT_EQ(out.held_count, 3u);
  EXPECT_EQ(out.held[0], 20);
  EXPECT_EQ(out.held[2], 22);
  EXPECT_EQ(out.tag, 0x5u);
  EXPECT_FALSE(Parses(Encode(r))) << "fewer fds than the header holds";
  r.held = kMaxHeldFds + 1;
  EXPECT_FALSE(Parses(Encode(r), std::vector<int>(5 + kMaxHeldFds + 1, 9)));
}

TEST(SpawnRequestTest, UnsearchedRelativeCommandOrCwdIsRefused) {
  SpawnRequest r = Sample();
  r.search_path.reset();
  EXPECT_FALSE(Parses(Encode(r))) << "argv[0] without a '/' must be searched";
  r = Sample();
  r.cwd = "workspace";
  EXPECT_FALSE(Parses(Encode(r)));
}

TEST(SpawnRequestTest, OversizedRequestIsAnInvalidRequest) {
  SpawnRequest r = Sample();
  r.env.push_back("BIG=" + std::string(kMaxSpawnRequestBytes, 'x'));
  auto encoded = EncodeSpawnRequest(r);
  ASSERT_FALSE(encoded.ok());
  EXPECT_EQ(encoded.error().code, ErrorCode::kInvalidRequest);
}

}  // namespace
}  // namespace sandstream::sandbox
