// Unit tests of SandboxFs on a temporary directory standing in for a sandbox's root: path
// normalization, every way out of the root (`..`, absolute symlinks, links to host paths, link
// chains), and the file operations' results and errors. Acts as the test's own user.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sandbox/files.h"

namespace sandstream::sandbox {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

class SandboxFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandstream-fs-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    root_ = base_ / "root";
    outside_ = base_ / "outside";
    fs::create_directories(root_ / "workspace");
    fs::create_directories(root_ / "etc");
    fs::create_directories(outside_);
    WriteFile(outside_ / "secret", "host secret");
    WriteFile(root_ / "etc" / "hostname", "sandbox\n");
    auto opened = SandboxFs::Open(root_.string(), std::nullopt);
    ASSERT_TRUE(opened) << opened.error().message;
    sfs_.emplace(std::move(*opened));
  }
  void TearDown() override { fs::remove_all(base_); }

  const SandboxFs& sfs() { return *sfs_; }

  fs::path base_, root_, outside_;
  std::optional<SandboxFs> sfs_;
};

TEST(NormalizeSandboxPathTest, NormalizesAndRefusesEscapes) {
  EXPECT_EQ(*NormalizeSandboxPath("/"), "/");
  EXPECT_EQ(*NormalizeSandboxPath("/a/./b/../c/"), "/a/c");
  EXPECT_EQ(*NormalizeSandboxPath("//a//b"), "/a/b");
  EXPECT_EQ(*NormalizeSandboxPath("/a/.."), "/");
  EXPECT_FALSE(NormalizeSandboxPath("/.."));
  EXPECT_FALSE(NormalizeSandboxPath("/a/../../etc/passwd"));
  EXPECT_FALSE(NormalizeSandboxPath("relative/path"));
  EXPECT_FALSE(NormalizeSandboxPath(""));
  EXPECT_FALSE(NormalizeSandboxPath(std::string_view("/a\0b", 4)));
}

TEST_F(SandboxFsTest, ReadsAndWritesInsideTheRoot) {
  auto w = sfs().OpenWrite("/workspace/dir/new.txt", 0640, true);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_TRUE(w->created);
  ASSERT_EQ(::write(w->fd.get(), "hello", 5), 5);
  w->fd.reset();
  EXPECT_EQ((fs::status(root_ / "workspace/dir/new.txt").permissions() & fs::perms::all),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);

  auto r = sfs().OpenRead("/workspace/dir/new.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->info.size, 5u);
  EXPECT_EQ(r->info.path, "/workspace/dir/new.txt");
  EXPECT_EQ(r->info.type, FileType::kFile);
  EXPECT_EQ(ReadAll(r->fd.get()), "hello");

  auto missing = sfs().OpenRead("/workspace/nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("/workspace/nope"), std::string::npos);
  auto no_parent = sfs().OpenWrite("/workspace/a/b/c", std::nullopt, false);
  ASSERT_FALSE(no_parent);
  EXPECT_EQ(no_parent.error().code, ErrorCode::kNotFound);
}

TEST_F(SandboxFsTest, AbsoluteSymlinksResolveAgainstTheSandboxRoot) {
  fs::create_symlink("/", root_ / "workspace" / "to-root");
  fs::create_symlink("/etc/hostname", root_ / "workspace" / "hostname");
  fs::create_symlink(outside_ / "secret", root_ / "workspace" / "host-secret");
  fs::create_symlink("../../../../../../" + outside_.relative_path().string() + "/secret",
                     root_ / "workspace" / "climb");

  auto via_root = sfs().OpenRead("/workspace/to-root/etc/hostname");
  ASSERT_TRUE(via_root) << via_root.error().message;
  EXPECT_EQ(ReadAll(via_root->fd.get()), "sandbox\n");  // the sandbox's file, not the host's
  auto hostname = sfs().OpenRead("/workspace/hostname");
  ASSERT_TRUE(hostname) << hostname.error().message;
  EXPECT_EQ(ReadAll(hostname->fd.get()), "sandbox\n");

  // The host path does not exist under the sandbox root; `..` in a link stops at the root.
  for (const char* path : {"/workspace/host-secret", "/workspace/climb"}) {
    auto escaped = sfs().OpenRead(path);
    ASSERT_FALSE(escaped) << path << " reached " << ReadAll(escaped->fd.get());
    EXPECT_EQ(escaped.error().code, ErrorCode::kNotFound) << escaped.error().message;
  }
  // Writing through a link to the host creates nothing on the host.
  (void)sfs().OpenWrite("/workspace/host-secret", std::nullopt, true);
  std::string host_text;
  std::getline(std::ifstream(outside_ / "secret"), host_text);
  EXPECT_EQ(host_text, "host secret");

  bool truncated = false;
  auto listed = sfs().List("/workspace/to-root", 100, &truncated);
  ASSERT_TRUE(listed) << listed.error().message;
  std::vector<std::string> names;
  for (const auto& f : *listed) names.push_back(f.name);
  EXPECT_EQ(names, (std::vector<std::string>{"etc", "workspace"}));
}

TEST_F(SandboxFsTest, ListStatMkdirMoveRemove) {
  auto dir = sfs().Mkdir("/workspace/a/b", 0755, true);
  ASSERT_TRUE(dir) << dir.error().message;
  EXPECT_EQ(dir->type, FileType::kDirectory);
  auto again = sfs().Mkdir("/workspace/a/b", 0755, false);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kConflict);

  WriteFile(root_ / "workspace/a/one", "1");
  WriteFile(root_ / "workspace/a/two", "22");
  ASSERT_TRUE(sfs().Symlink("/workspace/a/one", "/workspace/a/link"));
  bool truncated = true;
  auto all = sfs().List("/workspace/a", 100, &truncated);
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_FALSE(truncated);
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].name, "b");
  EXPECT_EQ((*all)[1].name, "link");
  EXPECT_EQ((*all)[1].type, FileType::kSymlink);
  EXPECT_EQ((*all)[1].link_target, "/workspace/a/one");
  EXPECT_EQ((*all)[3].size, 2u);
  auto two = sfs().List("/workspace/a", 2, &truncated);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->size(), 2u);
  EXPECT_TRUE(truncated);

  auto moved = sfs().Move("/workspace/a/one", "/workspace/a/two", false);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error().code, ErrorCode::kConflict);
  moved = sfs().Move("/workspace/a/one", "/workspace/a/two", true);
  ASSERT_TRUE(moved) << moved.error().message;
  EXPECT_EQ(moved->path, "/workspace/a/two");
  EXPECT_EQ(moved->size, 1u);

  auto not_empty = sfs().Remove("/workspace/a", false);
  ASSERT_FALSE(not_empty);
  ASSERT_TRUE(sfs().Remove("/workspace/a", true));
  EXPECT_FALSE(fs::exists(root_ / "workspace/a"));
  auto gone = sfs().Stat("/workspace/a");
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
}

TEST_F(SandboxFsTest, RecursiveRemoveDoesNotFollowLinksOut) {
  fs::create_directories(root_ / "workspace/tree/sub");
  fs::create_directory_symlink(outside_, root_ / "workspace/tree/sub/out");
  ASSERT_TRUE(sfs().Remove("/workspace/tree", true));
  EXPECT_FALSE(fs::exists(root_ / "workspace/tree"));
  EXPECT_TRUE(fs::exists(outside_ / "secret"));
}

TEST_F(SandboxFsTest, WatchReportsChangesUnderADirectory) {
  fs::create_directories(root_ / "workspace/w/sub");
  auto watch = FileWatch::Start(sfs(), "/workspace/w", true, 64);
  ASSERT_TRUE(watch) << watch.error().message;
  WriteFile(root_ / "workspace/w/sub/f", "x");
  fs::remove(root_ / "workspace/w/sub/f");
  bool gone = false;
  std::vector<FileEvent> events = watch->Drain(sfs(), &gone);
  EXPECT_FALSE(gone);
  std::vector<std::string> seen;
  for (const auto& e : events) seen.push_back(e.type + " " + e.path);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), "create /workspace/w/sub/f");
  EXPECT_EQ(seen.back(), "delete /workspace/w/sub/f");
}

}  // namespace
}  // namespace sandstream::sandbox
