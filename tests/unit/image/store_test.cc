// The store end to end, as root (owners, devices and xattrs are real): layers unpacked with
// everything a layer holds, whiteouts that overlayfs honours, archives of every kind, layers
// shared between images, every refusal leaving nothing behind, snapshots of a directory, and
// collection.
#include "image/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "builders.h"
#include "image/digest.h"
#include "image/tar.h"
#include "image/unpack.h"

namespace sandstream::image {
namespace {

namespace fs = std::filesystem;
using test::Entry;
using test::Layer;
using test::MakeLayer;
using test::Tar;

struct stat Lstat(const fs::path& p) {
  struct stat st{};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Xattr(const fs::path& p, const char* name) {
  char buf[256];
  const ssize_t n = ::lgetxattr(p.c_str(), name, buf, sizeof buf);
  return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
}

// A v2 file capability: cap_net_raw, effective.
const std::string kCapNetRaw("\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00"
                             "\x00\x00\x00\x00\x00\x00\x00\x00",
                             20);

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandstream-image-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    root_ = base_ / "images";
    outside_ = base_ / "outside";
    fs::create_directories(outside_);
    std::ofstream(outside_ / "secret") << "host secret";
    Reopen();
  }
  void TearDown() override { fs::remove_all(base_); }

  void Reopen() {
    auto s = Store::Open(root_.string(), limits_);
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
  }

  // A file holding `bytes`, open for reading, as the daemon hands one over.
  UniqueFd File(const std::string& bytes) {
    const fs::path p = base_ / ("upload" + std::to_string(++files_));
    std::ofstream(p, std::ios::binary) << bytes;
    return UniqueFd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  }
  Result<LayerRef> ImportTar(const std::string& tar) {
    UniqueFd fd = File(tar);
    return store_->ImportLayer(fd.get(), kOciLayerType, Sha256Of(tar), Sha256Of(tar), nullptr);
  }
  Result<Image> ImportArchive(const std::string& bytes, std::vector<std::string>* steps = nullptr) {
    UniqueFd fd = File(bytes);
    return store_->ImportArchive(fd.get(), [&](std::string_view step, std::string_view digest,
                                               uint64_t done, uint64_t total) {
      EXPECT_LE(done, total);
      if (steps) steps->push_back(std::string(step) + " " + std::string(digest));
    });
  }

  // Everything in the store: blobs, layers and staging directories.
  std::vector<std::string> Contents() {
    std::vector<std::string> out;
    for (const char* dir : {"blobs/sha256", "layers/sha256", "tmp"}) {
      for (const auto& e : fs::directory_iterator(root_ / dir)) {
        out.push_back(std::string(dir) + "/" + e.path().filename().string());
      }
    }
    return out;
  }
  void ExpectEmptyAndOutsideUntouched() {
    EXPECT_EQ(Contents(), std::vector<std::string>{});
    std::vector<std::string> outside;
    for (const auto& e : fs::directory_iterator(outside_)) outside.push_back(e.path().filename());
    EXPECT_EQ(outside, std::vector<std::string>{"secret"});
    EXPECT_EQ(Slurp(outside_ / "secret"), "host secret");
  }
  void ExpectRefused(const std::string& tar, ErrorCode code, const std::string& text) {
    auto r = ImportTar(tar);
    ASSERT_FALSE(r) << "imported: " << text;
    EXPECT_EQ(r.error().code, code) << r.error().message;
    EXPECT_NE(r.error().message.find(text), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("layer sha256:", 0), 0u) << r.error().message;
    ExpectEmptyAndOutsideUntouched();
  }

  fs::path base_, root_, outside_;
  StoreLimits limits_{1 << 30, 1 << 30, 100000};
  std::unique_ptr<Store> store_;
  int files_ = 0;
};

TEST_F(StoreTest, UnpacksEverythingALayerHolds) {
  Tar t;
  t.Dir("./", 0751);
  t.Dir("etc/");
  t.File("etc/hosts", "first\n");
  t.Add(Entry("home/app/").Type('5').Mode(0750).Uid(1000).Gid(1000).Mtime(1500000000));
  t.Add(Entry("home/app/notes").Data("n").Mode(0600).Uid(1000).Gid(1001).Mtime(1600000000));
  t.File("usr/bin/sudo", "ELF sudo", 04755);
  t.File("usr/bin/wall", "ELF wall", 02755, 0, 5);
  t.Dir("tmp/", 01777);
  t.Symlink("usr/bin/abs", "/etc/hosts");
  t.Symlink("usr/bin/rel", "../../etc/hosts");
  t.Symlink("usr/bin/dangling", "/nowhere/at/all");
  t.Hardlink("usr/bin/sudo2", "usr/bin/sudo");
  t.Hardlink("usr/bin/abs2", "usr/bin/abs");
  t.Add(Entry("usr/bin/ping")
            .Data("ELF ping")
            .Mode(0755)
            .Pax({{"SCHILY.xattr.security.capability", kCapNetRaw},
                  {"SCHILY.xattr.user.overlay.redirect", "/etc"},
                  {"SCHILY.xattr.trusted.overlay.opaque", "y"},
                  {"SCHILY.xattr.user.note", "dropped"}}));
  t.Add(Entry("run/fifo").Type('6').Mode(0620).Uid(7).Gid(8));
  t.Add(Entry(std::string(120, 'x') + "/" + std::string(120, 'y')).Data("long").GnuLong());
  t.File("etc/hosts", "second\n");  // a later entry of the same name replaces it
  t.File("replaced-dir/child", "c");
  t.File("replaced-dir", "now a file");
  const std::string tar = t.Finish();
  auto ref = ImportTar(tar);
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_EQ(ref->diff_id, Sha256Of(tar));
  EXPECT_EQ(ref->digest, Sha256Of(tar));
  EXPECT_EQ(ref->size, tar.size());
  ASSERT_TRUE(store_->HasLayer(ref->diff_id));
  const fs::path l = store_->LayerPath(ref->diff_id);
  EXPECT_EQ(l, root_ / "layers/sha256" / ref->diff_id.substr(7));

  EXPECT_EQ(Lstat(l).st_mode & 07777, 0751u);
  EXPECT_EQ(Slurp(l / "etc/hosts"), "second\n");
  const struct stat app = Lstat(l / "home/app");
  EXPECT_EQ(app.st_mode & 07777, 0750u);
  EXPECT_EQ(app.st_uid, 1000u);
  EXPECT_EQ(app.st_mtim.tv_sec, 1500000000);  // set after its child was written
  const struct stat notes = Lstat(l / "home/app/notes");
  EXPECT_EQ(notes.st_uid, 1000u);
  EXPECT_EQ(notes.st_gid, 1001u);
  EXPECT_EQ(notes.st_mode & 07777, 0600u);
  EXPECT_EQ(notes.st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(Lstat(l / "home").st_mode & 07777, 0755u);  // made for its child
  EXPECT_EQ(Lstat(l / "usr/bin/sudo").st_mode & 07777, 04755u);
  EXPECT_EQ(Lstat(l / "usr/bin/wall").st_mode & 07777, 02755u);
  EXPECT_EQ(Lstat(l / "usr/bin/wall").st_gid, 5u);
  EXPECT_EQ(Lstat(l / "tmp").st_mode & 07777, 01777u);
  EXPECT_EQ(fs::read_symlink(l / "usr/bin/abs"), "/etc/hosts");
  EXPECT_EQ(fs::read_symlink(l / "usr/bin/rel"), "../../etc/hosts");
  EXPECT_EQ(fs::read_symlink(l / "usr/bin/dangling"), "/nowhere/at/all");
  EXPECT_EQ(Lstat(l / "usr/bin/sudo2").st_ino, Lstat(l / "usr/bin/sudo").st_ino);
  EXPECT_TRUE(S_ISLNK(Lstat(l / "usr/bin/abs2").st_mode));
  EXPECT_EQ(Xattr(l / "usr/bin/ping", "security.capability"), kCapNetRaw);
  EXPECT_EQ(Xattr(l / "usr/bin/ping", "user.overlay.redirect"), "");
  EXPECT_EQ(Xattr(l / "usr/bin/ping", "trusted.overlay.opaque"), "");
  EXPECT_EQ(Xattr(l / "usr/bin/ping", "user.note"), "");
  const struct stat fifo = Lstat(l / "run/fifo");
  EXPECT_TRUE(S_ISFIFO(fifo.st_mode));
  EXPECT_EQ(fifo.st_mode & 07777, 0620u);
  EXPECT_EQ(fifo.st_uid, 7u);
  EXPECT_EQ(Slurp(l / (std::string(120, 'x') + "/" + std::string(120, 'y'))), "long");
  EXPECT_EQ(Slurp(l / "replaced-dir"), "now a file");
  // Nothing but the layer and no blob (a layer blob is not kept).
  EXPECT_EQ(Contents(), std::vector<std::string>{"layers/sha256/" + ref->diff_id.substr(7)});

  // Present: reused, not unpacked again.
  const ino_t inode = Lstat(l / "etc/hosts").st_ino;
  ASSERT_TRUE(ImportTar(tar));
  EXPECT_EQ(Lstat(l / "etc/hosts").st_ino, inode);
}

// GNU tar as a second writer: both its formats read as it wrote them.
TEST_F(StoreTest, ImportsWhatGnuTarWrites) {
  const fs::path src = base_ / "src";
  const std::string deep = std::string(100, 'd') + "/" + std::string(100, 'e') + "/" +
                           std::string(100, 'f');
  fs::create_directories(src / deep);
  std::ofstream(src / deep / "leaf") << "deep";
  std::ofstream(src / "suid") << "x";
  ASSERT_EQ(::chown((src / "suid").c_str(), 123, 456), 0);  // before chmod: it clears setuid
  ASSERT_EQ(::chmod((src / "suid").c_str(), 04750), 0);
  ASSERT_EQ(::setxattr((src / "suid").c_str(), "security.capability", kCapNetRaw.data(),
                       kCapNetRaw.size(), 0), 0);
  ASSERT_EQ(::link((src / "suid").c_str(), (src / "hard").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/os-release", (src / "abs").c_str()), 0);
  ASSERT_EQ(::mkfifo((src / "fifo").c_str(), 0600), 0);
  for (const std::string format : {"posix", "gnu"}) {
    const fs::path out = base_ / (format + ".tar");
    // Only the POSIX format holds xattrs.
    const std::string command =
        "tar --format=" + format +
        (format == "posix" ? " --xattrs --xattrs-include='*'" : "") + " -C " + src.string() +
        " -cf " + out.string() + " .";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    auto ref = ImportTar(Slurp(out));
    ASSERT_TRUE(ref) << format << ": " << ref.error().message;
    const fs::path l = store_->LayerPath(ref->diff_id);
    EXPECT_EQ(Slurp(l / deep / "leaf"), "deep") << format;
    EXPECT_EQ(Lstat(l / "suid").st_mode & 07777, 04750u) << format;
    EXPECT_EQ(Lstat(l / "suid").st_uid, 123u) << format;
    EXPECT_EQ(Lstat(l / "hard").st_ino, Lstat(l / "suid").st_ino) << format;
    EXPECT_EQ(fs::read_symlink(l / "abs"), "/etc/os-release") << format;
    EXPECT_TRUE(S_ISFIFO(Lstat(l / "fifo").st_mode)) << format;
    if (format == "posix") {
      EXPECT_EQ(Xattr(l / "suid", "security.capability"), kCapNetRaw);
    }
  }
}

TEST_F(StoreTest, WhiteoutsAndOpaqueDirectoriesAreWhatOverlayfsTakes) {
  Tar t;
  t.File(".wh.gone", "");
  t.File("dir/.wh..wh..opq", "");
  t.File("dir/new", "new");
  t.File("kept", "same layer");
  t.File(".wh.kept", "");  // hides the layers below only: this layer's file stays
  t.File(".wh.later", "");
  t.File("later", "replaces the whiteout");
  t.File(".wh..wh.plnk/123.456", "aufs metadata");
  t.File(".wh..wh.aufs", "");
  auto ref = ImportTar(t.Finish());
  ASSERT_TRUE(ref) << ref.error().message;
  const fs::path l = store_->LayerPath(ref->diff_id);
  const struct stat gone = Lstat(l / "gone");
  EXPECT_TRUE(S_ISCHR(gone.st_mode));
  EXPECT_EQ(gone.st_rdev, makedev(0, 0));
  EXPECT_FALSE(fs::exists(l / ".wh.gone"));
  EXPECT_EQ(Xattr(l / "dir", kOpaqueXattr), "y");
  EXPECT_FALSE(fs::exists(l / "dir/.wh..wh..opq"));
  EXPECT_EQ(Slurp(l / "kept"), "same layer");
  EXPECT_EQ(Slurp(l / "later"), "replaces the whiteout");
  EXPECT_FALSE(fs::exists(l / ".wh..wh.plnk"));
  EXPECT_FALSE(fs::exists(l / ".wh..wh.aufs"));
  EXPECT_FALSE(fs::exists(l / "plnk"));
}

TEST_F(StoreTest, OverlayfsHonoursTheWhiteoutsOfAnUnpackedLayer) {
  auto lower = ImportTar(
      Tar().File("gone", "x").File("dir/old", "old").File("stay", "stay").Finish());
  auto upper = ImportTar(
      Tar().File(".wh.gone", "").File("dir/.wh..wh..opq", "").File("dir/new", "new").Finish());
  ASSERT_TRUE(lower && upper);
  const fs::path mnt = base_ / "mnt";
  fs::create_directories(mnt);
  // The topmost layer first in lowerdir=, as the daemon mounts them.
  const std::string options = "lowerdir=" + store_->LayerPath(upper->diff_id) + ":" +
                              store_->LayerPath(lower->diff_id) + ",userxattr";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // In a mount namespace of its own: the mount goes with the child.
    if (::unshare(CLONE_NEWNS) != 0) _exit(10);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(11);
    if (::mount("overlay", mnt.c_str(), "overlay", MS_RDONLY, options.c_str()) != 0) _exit(12);
    int bad = 0;
    if (::access((mnt / "gone").c_str(), F_OK) == 0) bad |= 1;
    if (::access((mnt / "dir/old").c_str(), F_OK) == 0) bad |= 2;
    if (::access((mnt / "dir/new").c_str(), F_OK) != 0) bad |= 4;
    if (::access((mnt / "stay").c_str(), F_OK) != 0) bad |= 8;
    _exit(bad ? 20 + bad : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  // 12: the mount failed; 21-35: 20 + bits of what showed wrongly (1 the whiteout, 2 the opaque
  // directory's lower entry, 4 and 8 what should show).
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(StoreTest, RefusesNamesThatClimbOut) {
  ExpectRefused(Tar().File("a/../../etc/x", "x").Finish(), ErrorCode::kInvalidRequest,
                "entry 'a/../../etc/x': path climbs out");
  ExpectRefused(Tar().File("../x", "x").Finish(), ErrorCode::kInvalidRequest, "climbs out");
  ExpectRefused(Tar().Add(Entry("ok").Pax({{"path", std::string("a\0b", 3)}})).Finish(),
                ErrorCode::kInvalidRequest, "NUL");
  ExpectRefused(Tar().File("", "x").Finish(), ErrorCode::kInvalidRequest, "empty name");
  ExpectRefused(Tar().File("./", "x").Finish(), ErrorCode::kInvalidRequest, "root");
}

TEST_F(StoreTest, NeverWritesThroughASymlinkOfTheLayer) {
  ExpectRefused(Tar().Symlink("a", outside_.string()).File("a/pwned", "x").Finish(),
                ErrorCode::kInvalidRequest, "entry 'a/pwned': 'a' is a symlink");
  ExpectRefused(Tar().Symlink("etc", "/etc").File("etc/passwd", "root::0:0::/:/bin/sh").Finish(),
                ErrorCode::kInvalidRequest, "'etc' is a symlink");
  ExpectRefused(Tar().Symlink("up", "..").Dir("up/escape/").Finish(), ErrorCode::kInvalidRequest,
                "'up' is a symlink");
  ExpectRefused(Tar().Dir("d/").Symlink("d/s", outside_.string()).File("d/s/x/y", "x").Finish(),
                ErrorCode::kInvalidRequest, "'d/s' is a symlink");
  ExpectRefused(Tar().File("f", "x").File("f/under", "x").Finish(), ErrorCode::kInvalidRequest,
                "'f' is not a directory");
  // Whiteouts and opaque markers resolve the same way.
  ExpectRefused(Tar().Symlink("w", outside_.string()).File("w/.wh.secret", "").Finish(),
                ErrorCode::kInvalidRequest, "'w' is a symlink");
  ExpectRefused(Tar().Symlink("o", outside_.string()).File("o/.wh..wh..opq", "").Finish(),
                ErrorCode::kInvalidRequest, "'o' is a symlink");
  ExpectRefused(Tar().File(".wh.x/y", "").Finish(), ErrorCode::kInvalidRequest, "whiteout");
}

TEST_F(StoreTest, HardLinksStayInTheLayer) {
  ExpectRefused(Tar().Hardlink("h", "../../etc/passwd").Finish(), ErrorCode::kInvalidRequest,
                "links to '../../etc/passwd': path climbs out");
  ExpectRefused(Tar().Hardlink("h", "/etc/passwd").Finish(), ErrorCode::kInvalidRequest,
                "links to 'etc/passwd', which is not earlier in this layer");
  ExpectRefused(Tar().Hardlink("h", "nope").Finish(), ErrorCode::kInvalidRequest,
                "not earlier in this layer");
  ExpectRefused(Tar().Symlink("s", outside_.string()).Hardlink("h", "s/secret").Finish(),
                ErrorCode::kInvalidRequest, "not earlier in this layer");
  ExpectRefused(Tar().Dir("d/").Hardlink("h", "d").Finish(), ErrorCode::kInvalidRequest,
                "links to a directory");
  ExpectRefused(Tar().File(".wh.w", "").Hardlink("h", "w").Finish(), ErrorCode::kInvalidRequest,
                "links to a whiteout");
  ExpectRefused(Tar().File("f", "x").Hardlink("f", "f").Finish(), ErrorCode::kInvalidRequest,
                "links to itself");
}

TEST_F(StoreTest, RefusesDeviceNodes) {
  ExpectRefused(Tar().Add(Entry("dev/null").Type('3').Major(1).Minor(3)).Finish(),
                ErrorCode::kInvalidRequest, "entry 'dev/null': a device node (char 1:3)");
  ExpectRefused(Tar().Add(Entry("dev/sda").Type('4').Major(8)).Finish(),
                ErrorCode::kInvalidRequest, "a device node (block 8:0)");
  // Not even 0:0: a whiteout comes from a marker, never from a device entry.
  ExpectRefused(Tar().Add(Entry("w").Type('3')).Finish(), ErrorCode::kInvalidRequest,
                "device node");
}

TEST_F(StoreTest, RefusesBlobsThatAreNotWhatTheyClaim) {
  const std::string tar = Tar().File("a", "a").Finish();
  {
    UniqueFd fd = File(tar);
    auto r =
        store_->ImportLayer(fd.get(), kOciLayerType, Sha256Of("other"), Sha256Of(tar), nullptr);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("digest mismatch"), std::string::npos) << r.error().message;
    ExpectEmptyAndOutsideUntouched();
  }
  {
    UniqueFd fd = File(tar);
    auto r =
        store_->ImportLayer(fd.get(), kOciLayerType, Sha256Of(tar), Sha256Of("other"), nullptr);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("diff_id mismatch"), std::string::npos) << r.error().message;
    ExpectEmptyAndOutsideUntouched();
  }
  {
    const Layer gz = MakeLayer(tar, Compression::kGzip);
    const std::string cut = gz.blob.substr(0, gz.blob.size() / 2);
    UniqueFd fd = File(cut);
    auto r = store_->ImportLayer(fd.get(), gz.media_type, Sha256Of(cut), gz.diff_id, nullptr);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("truncated gzip"), std::string::npos) << r.error().message;
    ExpectEmptyAndOutsideUntouched();
  }
  {
    UniqueFd fd = File(tar);
    auto r = store_->ImportLayer(fd.get(), "application/x-tar", Sha256Of(tar), Sha256Of(tar),
                                 nullptr);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kUnsupportedMediaType);
    UniqueFd again = File(tar);
    EXPECT_FALSE(store_->ImportLayer(again.get(), kOciLayerType, "sha256:../x", Sha256Of(tar),
                                     nullptr));
    ExpectEmptyAndOutsideUntouched();
  }
  const std::string body = Tar().File("a", std::string(5000, 'a')).File("b", "b").Finish();
  ExpectRefused(body.substr(0, 2000), ErrorCode::kInvalidRequest, "truncated tar");
  ExpectRefused(body.substr(0, 6000), ErrorCode::kInvalidRequest, "truncated tar");
}

TEST_F(StoreTest, LimitsAreErrorsNamingThem) {
  limits_.max_unpacked_bytes = 64 * 1024;
  limits_.max_entries = 10;
  Reopen();
  ExpectRefused(Tar().File("big", std::string(100 * 1024, 'b')).Finish(),
                ErrorCode::kPayloadTooLarge, "max_unpacked_bytes");
  Tar many;
  for (int i = 0; i < 11; ++i) many.File("f" + std::to_string(i), "");
  ExpectRefused(many.Finish(), ErrorCode::kPayloadTooLarge, "max_entries");
  // A decompression bomb stops at the limit, however small its blob.
  const Layer bomb = MakeLayer(std::string(10 << 20, '\0'), Compression::kGzip);
  UniqueFd fd = File(bomb.blob);
  auto r = store_->ImportLayer(fd.get(), bomb.media_type, bomb.digest, bomb.diff_id, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPayloadTooLarge);
  ExpectEmptyAndOutsideUntouched();
  // One budget over several layers of an image.
  Budget budget = store_->NewBudget();
  const std::string half = Tar().File("h", std::string(40 * 1024, 'h')).Finish();
  UniqueFd first = File(half);
  ASSERT_TRUE(store_->ImportLayer(first.get(), kOciLayerType, Sha256Of(half), Sha256Of(half),
                                  nullptr, &budget));
  const std::string other = Tar().File("i", std::string(40 * 1024, 'i')).Finish();
  UniqueFd second = File(other);
  auto over = store_->ImportLayer(second.get(), kOciLayerType, Sha256Of(other), Sha256Of(other),
                                  nullptr, &budget);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kPayloadTooLarge);
}

TEST(UnpackTest, AFileOverTheBudgetIsNeverWritten) {
  char tmpl[] = "/tmp/sandstream-unpack-test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  test::StringSource in(Tar().File("small", "s").File("big", std::string(4000, 'b')).Finish());
  Budget budget{3000, 3000};
  BudgetSource counted(in, budget, "layer t");
  TarReader tar(counted, "layer t");
  UniqueFd root(::open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto r = UnpackLayer(tar, root.get(), "layer t", UnpackLimits{100, &budget});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPayloadTooLarge);
  EXPECT_NE(r.error().message.find("entry 'big'"), std::string::npos) << r.error().message;
  EXPECT_TRUE(fs::exists(dir / "small"));
  EXPECT_FALSE(fs::exists(dir / "big"));
  fs::remove_all(dir);
}

// Three layers over two images: a base they share, and one of each on top.
struct TwoImages {
  Layer base = MakeLayer(Tar().File("etc/os-release", "ID=test\n").Finish(), Compression::kGzip);
  Layer a = MakeLayer(Tar().File("app/a", "a").Finish(), Compression::kZstd);
  Layer b = MakeLayer(Tar().File("app/b", "b").Finish(), Compression::kNone);
  std::string config_a = test::ConfigJson({base.diff_id, a.diff_id});
  std::string config_b = test::ConfigJson({base.diff_id, b.diff_id});
};

TEST_F(StoreTest, ImportsAnOciLayoutAndSharesLayersBetweenImages) {
  TwoImages t;
  std::vector<std::string> steps;
  auto a = ImportArchive(test::OciArchive(t.config_a, {t.base, t.a}), &steps);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->manifest_digest, Sha256Of(test::ManifestJson(t.config_a, {t.base, t.a})));
  EXPECT_EQ(a->config_digest, Sha256Of(t.config_a));
  EXPECT_EQ(a->repo_tags, std::vector<std::string>{"demo:1"});
  EXPECT_EQ(a->config.user, "1000:1000");
  EXPECT_EQ(a->config.cmd, std::vector<std::string>{"echo hi"});
  ASSERT_EQ(a->layers.size(), 2u);
  EXPECT_EQ(a->layers[0].digest, t.base.digest);
  EXPECT_EQ(a->layers[0].diff_id, t.base.diff_id);
  EXPECT_EQ(a->layers[0].size, t.base.blob.size());
  EXPECT_EQ(a->layers[1].diff_id, t.a.diff_id);
  EXPECT_EQ(Slurp(fs::path(store_->LayerPath(t.a.diff_id)) / "app/a"), "a");
  EXPECT_EQ(*store_->ReadBlob(a->config_digest), t.config_a);
  EXPECT_TRUE(store_->ReadBlob(a->manifest_digest));
  for (const char* step : {"verify ", "unpack ", "done "}) {
    EXPECT_NE(std::find(steps.begin(), steps.end(), step + t.base.digest), steps.end()) << step;
  }

  const ino_t shared = Lstat(fs::path(store_->LayerPath(t.base.diff_id)) / "etc/os-release").st_ino;
  steps.clear();
  auto b = ImportArchive(test::OciArchive(t.config_b, {t.base, t.b}), &steps);
  ASSERT_TRUE(b) << b.error().message;
  // The base was there: checked against its diff_id, not unpacked again.
  EXPECT_EQ(std::count(steps.begin(), steps.end(), "unpack " + t.base.digest), 0);
  EXPECT_EQ(std::count(steps.begin(), steps.end(), "done " + t.base.digest), 1);
  EXPECT_EQ(Lstat(fs::path(store_->LayerPath(t.base.diff_id)) / "etc/os-release").st_ino, shared);
  size_t layers = 0;
  for (const auto& c : Contents()) layers += c.rfind("layers/", 0) == 0;
  EXPECT_EQ(layers, 3u);

  // Collect keeps what the first image needs.
  std::set<std::string> keep{a->manifest_digest, a->config_digest};
  for (const auto& l : a->layers) keep.insert(l.diff_id);
  fs::create_directories(root_ / "tmp/left-by-a-crash/deep");
  ASSERT_TRUE(store_->Collect(keep));
  EXPECT_TRUE(store_->HasLayer(t.base.diff_id));
  EXPECT_TRUE(store_->HasLayer(t.a.diff_id));
  EXPECT_FALSE(store_->HasLayer(t.b.diff_id));
  EXPECT_FALSE(store_->ReadBlob(b->config_digest));
  EXPECT_TRUE(store_->ReadBlob(a->config_digest));
  EXPECT_EQ(Contents().size(), 4u);  // two layers, two blobs, nothing in tmp/
  ASSERT_TRUE(store_->Collect({}));
  EXPECT_EQ(Contents(), std::vector<std::string>{});
}

// A config that names a stored layer's diff_id gets it only with a blob that unpacks to it.
TEST_F(StoreTest, AStoredLayerIsReusedOnlyForABlobThatHoldsIt) {
  TwoImages t;
  const Layer decoy = MakeLayer(Tar().File("decoy", "x").Finish(), Compression::kGzip);
  const std::string claims = test::ConfigJson({t.base.diff_id});
  for (bool stored : {false, true}) {
    for (const std::string& archive :
         {test::OciArchive(claims, {decoy}), test::DockerSaveArchive(claims, {decoy}, {"d:1"})}) {
      auto r = ImportArchive(archive);
      ASSERT_FALSE(r) << "stored: " << stored;
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
      EXPECT_NE(r.error().message.find("diff_id mismatch"), std::string::npos) << r.error().message;
    }
    if (!stored) {
      ASSERT_TRUE(ImportArchive(test::OciArchive(t.config_a, {t.base, t.a})));
    }
  }
  // Its own blob, compressed another way, is verified and shares the stored layer.
  std::vector<std::string> steps;
  const Layer other = MakeLayer(t.base.tar, Compression::kZstd);
  auto again = ImportArchive(test::OciArchive(claims, {other}), &steps);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->layers[0].digest, other.digest);
  EXPECT_EQ(std::count(steps.begin(), steps.end(), "unpack " + other.digest), 0);
  EXPECT_NE(std::find(steps.begin(), steps.end(), "verify " + other.digest), steps.end());
}

TEST_F(StoreTest, PicksLinuxAmd64FromANestedIndex) {
  const Layer layer = MakeLayer(Tar().File("amd64", "yes").Finish(), Compression::kGzip);
  const std::string config = test::ConfigJson({layer.diff_id});
  const std::string manifest = test::ManifestJson(config, {layer});
  const std::string platforms = test::IndexJson({
      {std::string(kOciManifestType), Sha256Of("arm64 manifest not in the archive"), 10,
       "linux/arm64", {}},
      {std::string(kOciManifestType), Sha256Of(manifest), manifest.size(), "linux/amd64", {}},
  });
  Tar t;
  t.File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  t.File("index.json",
         test::IndexJson({{std::string(kOciIndexType), Sha256Of(platforms), platforms.size(), "",
                           {{"io.containerd.image.name", "docker.io/library/demo:2"}}}}));
  for (const std::string& blob : {platforms, manifest, config, layer.blob}) {
    t.File("blobs/sha256/" + Sha256Of(blob).substr(7), blob);
  }
  auto image = ImportArchive(t.Finish());
  ASSERT_TRUE(image) << image.error().message;
  EXPECT_EQ(image->manifest_digest, Sha256Of(manifest));
  EXPECT_EQ(image->repo_tags, std::vector<std::string>{"docker.io/library/demo:2"});
  EXPECT_EQ(Slurp(fs::path(store_->LayerPath(layer.diff_id)) / "amd64"), "yes");
}

TEST_F(StoreTest, ImportsBothKindsOfDockerSave) {
  const Layer base = MakeLayer(Tar().File("bin/sh", "sh", 0755).Finish());
  const Layer empty = MakeLayer(Tar().Finish());
  const std::string config = test::ConfigJson({base.diff_id, empty.diff_id, empty.diff_id});
  // The older kind: layers by id, a repeated one a symlink to the first.
  auto old = ImportArchive(test::DockerSaveArchive(config, {base, empty, empty}, {"demo:old"}));
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(old->repo_tags, std::vector<std::string>{"demo:old"});
  EXPECT_EQ(old->config_digest, Sha256Of(config));
  ASSERT_EQ(old->layers.size(), 3u);
  EXPECT_EQ(old->layers[0].digest, base.diff_id);  // uncompressed: the digest is the diff_id
  EXPECT_EQ(old->layers[2].diff_id, empty.diff_id);
  // The store wrote an OCI manifest for it.
  auto manifest = ParseManifest(*store_->ReadBlob(old->manifest_digest));
  ASSERT_TRUE(manifest) << manifest.error().message;
  EXPECT_EQ(manifest->config.digest, old->config_digest);
  EXPECT_EQ(manifest->layers.size(), 3u);
  EXPECT_EQ(Contents().size(), 4u);  // two layers (one repeated), manifest, config

  // The newer kind (docker 25): an OCI layout with manifest.json beside it.
  const Layer top = MakeLayer(Tar().File("top", "t").Finish());
  const std::string config2 = test::ConfigJson({base.diff_id, top.diff_id});
  const std::string manifest_json =
      R"([{"Config":"./blobs/sha256/)" + Sha256Of(config2).substr(7) +
      R"(","RepoTags":["demo:25"],"Layers":["blobs/sha256/)" + base.digest.substr(7) +
      R"(","blobs/sha256/)" + top.digest.substr(7) + R"("]}])";
  auto v25 =
      ImportArchive(test::OciArchive(config2, {base, top}, {{"manifest.json", manifest_json}}));
  ASSERT_TRUE(v25) << v25.error().message;
  EXPECT_EQ(v25->repo_tags, std::vector<std::string>{"demo:25"});
  EXPECT_EQ(Slurp(fs::path(store_->LayerPath(top.diff_id)) / "top"), "t");
}

TEST_F(StoreTest, ARefusedArchiveLeavesNothing) {
  TwoImages t;
  auto refused = [&](const std::string& archive, ErrorCode code, const std::string& text) {
    auto r = ImportArchive(archive);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, code) << r.error().message;
    EXPECT_NE(r.error().message.find(text), std::string::npos) << r.error().message;
    ExpectEmptyAndOutsideUntouched();
  };
  // A later layer refused: the earlier one, already unpacked, goes too.
  const Layer evil = MakeLayer(Tar().Symlink("x", "/etc").File("x/shadow", "").Finish());
  refused(test::OciArchive(test::ConfigJson({t.base.diff_id, evil.diff_id}), {t.base, evil}),
          ErrorCode::kInvalidRequest, "layer " + evil.digest + ": entry 'x/shadow'");
  refused(test::OciArchive(test::ConfigJson({t.base.diff_id, t.b.diff_id}), {t.base, t.a}),
          ErrorCode::kInvalidRequest, "diff_id mismatch");
  refused(test::OciArchive(test::ConfigJson({t.base.diff_id}), {t.base, t.a}),
          ErrorCode::kInvalidRequest, "2 layers and the config 1");
  // Bad JSON types.
  refused(test::OciArchive(R"({"config":{"Cmd":"sh"},"rootfs":{"type":"layers","diff_ids":[]}})",
                           {}),
          ErrorCode::kInvalidRequest, "config.config.Cmd");
  {
    Tar bad;
    bad.File("oci-layout", "{}").File("index.json", R"({"schemaVersion":2,"manifests":"x"})");
    refused(bad.Finish(), ErrorCode::kInvalidRequest, "index.manifests");
  }
  refused(Tar().File("manifest.json", R"([{"Config":1,"Layers":[]}])").Finish(),
          ErrorCode::kInvalidRequest, "Config");
  // A missing blob, a blob that is not what its name says, a size that is not the blob's.
  {
    Tar l;
    const std::string manifest = test::ManifestJson(t.config_a, {t.base, t.a});
    l.File("index.json", test::IndexJson({{std::string(kOciManifestType), Sha256Of(manifest),
                                           manifest.size(), "", {}}}));
    for (const std::string& blob : {manifest, t.config_a, t.base.blob}) {
      l.File("blobs/sha256/" + Sha256Of(blob).substr(7), blob);
    }
    refused(l.Finish(), ErrorCode::kInvalidRequest,
            "layer " + t.a.digest + ": the archive has no blob");
  }
  {
    Layer liar = t.a;
    liar.blob = t.b.blob;  // listed with a's digest
    refused(test::OciArchive(t.config_a, {t.base, liar}), ErrorCode::kInvalidRequest,
            "digest mismatch");
  }
  {
    Layer wrong_size = t.a;
    wrong_size.listed_size = wrong_size.blob.size() + 1;
    refused(test::OciArchive(t.config_a, {t.base, wrong_size}), ErrorCode::kInvalidRequest,
            "size mismatch");
  }
  refused(Tar().File("hello", "x").Finish(), ErrorCode::kInvalidRequest, "neither");
  refused(std::string(3000, 'z'), ErrorCode::kInvalidRequest, "checksum");
  const std::string good = test::OciArchive(t.config_a, {t.base, t.a});
  refused(good.substr(0, good.size() / 2), ErrorCode::kInvalidRequest, "truncated");
  limits_.max_archive_bytes = 1000;
  Reopen();
  refused(good, ErrorCode::kPayloadTooLarge, "max_archive_bytes");
}

class SnapshotTest : public StoreTest {
 protected:
  static constexpr uint32_t kBase = 200000;
  void SetUp() override {
    StoreTest::SetUp();
    upper_ = base_ / "upper";
    fs::create_directories(upper_ / "opq");
    fs::create_directories(upper_ / "home/user");
    std::ofstream(upper_ / "opq/inside") << "i";
    std::ofstream(upper_ / "home/user/file") << "mine";
    std::ofstream(upper_ / "rootfile") << "r";
    std::ofstream(upper_ / "stranger") << "s";
    std::ofstream(upper_ / "suid") << "x";
    ASSERT_EQ(::chown((upper_ / "home/user").c_str(), kBase + 1000, kBase + 1000), 0);
    ASSERT_EQ(::chown((upper_ / "home/user/file").c_str(), kBase + 1000, kBase + 1001), 0);
    ASSERT_EQ(::chown((upper_ / "rootfile").c_str(), kBase, kBase), 0);
    ASSERT_EQ(::chown((upper_ / "stranger").c_str(), 5, 5), 0);  // a host id: not the sandbox's
    ASSERT_EQ(::chown((upper_ / "suid").c_str(), kBase, kBase), 0);
    ASSERT_EQ(::chmod((upper_ / "suid").c_str(), 04711), 0);
    ASSERT_EQ(::link((upper_ / "rootfile").c_str(), (upper_ / "hardlink").c_str()), 0);
    ASSERT_EQ(::symlink("/etc/passwd", (upper_ / "abs").c_str()), 0);
    ASSERT_EQ(::mkfifo((upper_ / "fifo").c_str(), 0640), 0);
    ASSERT_EQ(::mknod((upper_ / "deleted").c_str(), S_IFCHR, makedev(0, 0)), 0);
    ASSERT_EQ(::setxattr((upper_ / "opq").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    ASSERT_EQ(::setxattr((upper_ / "suid").c_str(), "security.capability", kCapNetRaw.data(),
                         kCapNetRaw.size(), 0), 0);
    const struct timespec ts[2] = {{1234567890, 5}, {1234567890, 5}};
    ASSERT_EQ(::utimensat(AT_FDCWD, (upper_ / "rootfile").c_str(), ts, 0), 0);
    // A socket: left out, as tar cannot hold one.
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", (upper_ / "sock").c_str());
    ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(s);
  }
  fs::path upper_;
};

TEST_F(SnapshotTest, CopiesTheTreeWithOwnersShiftedAndOverlayMarksKept) {
  auto ref = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_EQ(ref->digest, ref->diff_id);
  const fs::path l = store_->LayerPath(ref->diff_id);
  EXPECT_EQ(Lstat(l / "home/user").st_uid, 1000u);
  EXPECT_EQ(Lstat(l / "home/user/file").st_uid, 1000u);
  EXPECT_EQ(Lstat(l / "home/user/file").st_gid, 1001u);
  EXPECT_EQ(Slurp(l / "home/user/file"), "mine");
  EXPECT_EQ(Lstat(l / "rootfile").st_uid, 0u);
  EXPECT_EQ(Lstat(l / "rootfile").st_mtim.tv_sec, 1234567890);
  EXPECT_EQ(Lstat(l / "stranger").st_uid, 65534u);
  EXPECT_EQ(Lstat(l / "stranger").st_gid, 65534u);
  EXPECT_EQ(Lstat(l / "suid").st_mode & 07777, 04711u);
  EXPECT_EQ(Xattr(l / "suid", "security.capability"), kCapNetRaw);
  EXPECT_EQ(Lstat(l / "hardlink").st_ino, Lstat(l / "rootfile").st_ino);
  EXPECT_EQ(fs::read_symlink(l / "abs"), "/etc/passwd");
  EXPECT_TRUE(S_ISFIFO(Lstat(l / "fifo").st_mode));
  EXPECT_TRUE(S_ISCHR(Lstat(l / "deleted").st_mode));
  EXPECT_EQ(Lstat(l / "deleted").st_rdev, makedev(0, 0));
  EXPECT_EQ(Xattr(l / "opq", kOpaqueXattr), "y");
  EXPECT_EQ(Slurp(l / "opq/inside"), "i");
  EXPECT_FALSE(fs::exists(l / "sock"));
  EXPECT_EQ(Lstat(l).st_mode & 07777, 0755u);

  // The same tree names the same layer; the layer's own tree names itself (its owners are
  // already shifted); and its canonical tar unpacks to it.
  auto again = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->diff_id, ref->diff_id);
  auto self = store_->LayerFromDirectory(l.string(), 0, 65536);
  ASSERT_TRUE(self) << self.error().message;
  EXPECT_EQ(self->diff_id, ref->diff_id);
  EXPECT_EQ(Contents().size(), 1u);
}

TEST_F(SnapshotTest, RefusesWhatALayerCannotHoldAndLeavesNothing) {
  ASSERT_EQ(::mknod((upper_ / "home/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  auto r = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(r.error().message.find("'home/null': a device node"), std::string::npos)
      << r.error().message;
  ExpectEmptyAndOutsideUntouched();
  ASSERT_EQ(::unlink((upper_ / "home/null").c_str()), 0);
  std::ofstream(upper_ / ".wh.sneaky") << "";
  r = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(".wh."), std::string::npos);
  ExpectEmptyAndOutsideUntouched();
  ASSERT_EQ(::unlink((upper_ / ".wh.sneaky").c_str()), 0);
  limits_.max_entries = 3;
  Reopen();
  r = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPayloadTooLarge);
  ExpectEmptyAndOutsideUntouched();
}

// A sparse file: 16 MiB long, 5 bytes of data in its middle and 3 at its end.
void MakeSparse(const fs::path& path, bool dense) {
  constexpr off_t kSize = off_t{16} << 20;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  if (dense) {
    const std::string zeros(1 << 20, '\0');
    for (off_t at = 0; at < kSize; at += static_cast<off_t>(zeros.size())) {
      ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), at), static_cast<ssize_t>(zeros.size()));
    }
  }
  ASSERT_EQ(::pwrite(fd, "hello", 5, kSize / 2), 5);
  ASSERT_EQ(::pwrite(fd, "end", 3, kSize - 3), 3);
  ASSERT_EQ(::ftruncate(fd, kSize), 0);
  const struct timespec ts[2] = {{1700000000, 0}, {1700000000, 0}};
  ASSERT_EQ(::futimens(fd, ts), 0);
  ::close(fd);
}

TEST_F(SnapshotTest, ASparseFileStaysSparseAndCountsAtItsFullSize) {
  MakeSparse(upper_ / "sparse", false);
  if (Lstat(upper_ / "sparse").st_blocks * 512 > (1 << 20)) {
    GTEST_SKIP() << "the test directory's filesystem does not keep holes";
  }
  auto ref = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_TRUE(ref) << ref.error().message;
  const fs::path copy = fs::path(store_->LayerPath(ref->diff_id)) / "sparse";
  EXPECT_EQ(Lstat(copy).st_size, off_t{16} << 20);
  EXPECT_LT(Lstat(copy).st_blocks * 512, 1 << 20);  // the holes are not written out
  const std::string bytes = Slurp(copy);
  EXPECT_EQ(bytes.substr(8 << 20, 5), "hello");
  EXPECT_EQ(bytes.substr((16 << 20) - 3), "end");
  EXPECT_EQ(bytes.find_first_not_of('\0'), size_t{8} << 20);

  // Its layer is the one the same file written out in full makes: the tar spells holes out.
  fs::remove(upper_ / "sparse");
  MakeSparse(upper_ / "sparse", true);
  auto dense = store_->LayerFromDirectory(upper_.string(), kBase, 65536);
  ASSERT_TRUE(dense) << dense.error().message;
  EXPECT_EQ(dense->diff_id, ref->diff_id);

  // The files, holes included, must fit in what the caller allows (the sandbox's disk).
  auto r = store_->LayerFromDirectory(upper_.string(), kBase, 65536, uint64_t{15} << 20);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kPayloadTooLarge);
  EXPECT_NE(r.error().message.find("more than 15 MiB, its disk_mb"), std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace sandstream::image
