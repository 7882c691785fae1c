// Unit tests of SandboxFs on a temporary directory standing in for a sandbox's root: path
// normalization, every way out of the root (`..`, absolute symlinks, links to host paths, link
// chains), the file operations' results and errors, what a hostile sandbox can plant (a lease,
// a FIFO), and a watch's bounded steps. Acts as the test's own user.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

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
  FileWatch::Batch batch = watch->Drain();
  EXPECT_FALSE(batch.gone);
  EXPECT_FALSE(batch.more);
  std::vector<std::string> seen;
  for (const auto& e : batch.events) seen.push_back(e.type + " " + e.path);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), "create /workspace/w/sub/f");
  EXPECT_EQ(seen.back(), "delete /workspace/w/sub/f");
}

TEST_F(SandboxFsTest, DrainTakesABoundedBatchAndSaysMoreIsLeft) {
  fs::create_directories(root_ / "workspace/w");
  auto watch = FileWatch::Start(sfs(), "/workspace/w", false, 64);
  ASSERT_TRUE(watch) << watch.error().message;
  constexpr int kFiles = 5000;  // ~160 KiB of events, under the kernel's 16384-event queue
  for (int i = 0; i < kFiles; ++i) {
    const std::string path = (root_ / "workspace/w" / ("f" + std::to_string(i))).string();
    ::close(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  }
  int creates = 0;
  int calls = 0;
  for (bool more = true; more; ++calls) {
    FileWatch::Batch batch = watch->Drain();
    ASSERT_LE(batch.events.size(), FileWatch::kDrainBytes / sizeof(inotify_event));
    for (const auto& e : batch.events) creates += e.type == "create";
    more = batch.more;
    ASSERT_LT(calls, kFiles);
  }
  EXPECT_EQ(creates, kFiles);
  EXPECT_GT(calls, 2);
  EXPECT_TRUE(watch->Drain().events.empty());
}

TEST_F(SandboxFsTest, NewSubtreesAreWatchedInBoundedSteps) {
  fs::create_directories(root_ / "workspace/w");
  constexpr int kEntries = 5000;  // more than one Scan's worth
  fs::create_directories(root_ / "away/big/sub");
  for (int i = 0; i < kEntries; ++i) {
    const std::string path = (root_ / "away/big" / ("f" + std::to_string(i))).string();
    ::close(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  }
  auto watch = FileWatch::Start(sfs(), "/workspace/w", true, 64);
  ASSERT_TRUE(watch) << watch.error().message;
  EXPECT_FALSE(watch->scanning());

  fs::rename(root_ / "away/big", root_ / "workspace/w/big");
  FileWatch::Batch batch = watch->Drain();
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].type, "create");
  EXPECT_TRUE(batch.events[0].is_dir);
  ASSERT_TRUE(watch->scanning());  // Drain itself touched nothing of the sandbox's
  watch->Scan(sfs());
  EXPECT_TRUE(watch->scanning()) << "one Scan listed a directory of " << kEntries << " entries";
  int scans = 1;
  while (watch->scanning() && scans < 100) {
    watch->Scan(sfs());
    ++scans;
  }
  EXPECT_FALSE(watch->scanning());
  EXPECT_EQ(scans, 2);

  WriteFile(root_ / "workspace/w/big/sub/new", "x");
  std::vector<std::string> seen;
  for (const auto& e : watch->Drain().events) seen.push_back(e.type + " " + e.path);
  EXPECT_EQ(seen, (std::vector<std::string>{"create /workspace/w/big/sub/new",
                                            "modify /workspace/w/big/sub/new"}));

  for (int i = 0; i < 3; ++i) fs::create_directories(root_ / "workspace/w/more" / std::to_string(i));
  auto too_big = FileWatch::Start(sfs(), "/workspace/w", true, 4);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(too_big.error().message.find("more than 4 directories"), std::string::npos);
}

TEST_F(SandboxFsTest, ALeaseHeldInsideIsAConflictNotAWait) {
  WriteFile(root_ / "workspace/leased", "mine");
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    // Deaf to the lease-break signal, as a hostile holder would be.
    ::signal(SIGIO, SIG_IGN);
    const int fd = ::open((root_ / "workspace/leased").c_str(), O_RDONLY);
    const bool leased = fd >= 0 && ::fcntl(fd, F_SETLEASE, F_WRLCK) == 0;
    (void)!::write(ready[1], leased ? "y" : "n", 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char answer = 0;
  ASSERT_EQ(::read(ready[0], &answer, 1), 1);
  ::close(ready[0]);
  if (answer != 'y') {
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
    GTEST_SKIP() << "F_SETLEASE is not available here";
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto read = sfs().OpenRead("/workspace/leased");
  auto write = sfs().OpenWrite("/workspace/leased", std::nullopt, false);
  const auto took = std::chrono::steady_clock::now() - t0;
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, ErrorCode::kConflict);
  EXPECT_NE(read.error().message.find("lease"), std::string::npos) << read.error().message;
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code, ErrorCode::kConflict);
  EXPECT_LT(took, std::chrono::seconds(1));
}

TEST_F(SandboxFsTest, AFifoIsNotAFileToOpen) {
  ASSERT_EQ(::mkfifo((root_ / "workspace/pipe").c_str(), 0644), 0);
  auto read = sfs().OpenRead("/workspace/pipe");
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(read.error().message.find("not a regular file"), std::string::npos);
  auto write = sfs().OpenWrite("/workspace/pipe", std::nullopt, false);
  ASSERT_FALSE(write);
  EXPECT_EQ(write.error().code, ErrorCode::kInvalidRequest);
}

TEST_F(SandboxFsTest, OpenedFilesReadAndWriteThroughTheirOwnCalls) {
  auto w = sfs().OpenWrite("/workspace/rw", std::nullopt, false);
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_TRUE(w->Write("hello world"));
  w->fd.reset();
  auto r = sfs().OpenRead("/workspace/rw");
  ASSERT_TRUE(r) << r.error().message;
  char buf[5];
  auto n = r->Read(buf, sizeof buf);
  ASSERT_TRUE(n);
  EXPECT_EQ(std::string(buf, *n), "hello");
  EXPECT_EQ(ReadAll(r->fd.get()), " world");
  EXPECT_EQ(*r->Read(buf, sizeof buf), 0u);
}

}  // namespace
}  // namespace sandstream::sandbox
