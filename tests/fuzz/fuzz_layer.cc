// A layer's tar stream (image/unpack.h) from bytes an image could hold, unpacked as root into a
// fresh directory. Whatever it holds, nothing is created or changed outside that directory (the
// seeds aim symlinks at a fixed directory beside it), a refusal is bad input rather than a host
// failure, nothing below it is a device but a whiteout, and all of it can be removed again.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "image/stream.h"
#include "image/tar.h"
#include "image/tree.h"
#include "image/unpack.h"

namespace sandstream::image {
namespace {

// Fixed, so that seeds can name it: symlinks to it must never be written through.
constexpr char kBase[] = "/tmp/sandstream-fuzz-layer";
constexpr char kOutside[] = "/tmp/sandstream-fuzz-layer/outside";
constexpr char kSecret[] = "host secret";

class BytesSource : public Source {
 public:
  BytesSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  Result<size_t> Read(char* buf, size_t size) override {
    const size_t n = std::min(size, size_ - at_);
    std::memcpy(buf, data_ + at_, n);
    at_ += n;
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  FUZZ_CHECK(d != nullptr);
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out.insert(e->d_name);
    }
  }
  ::closedir(d);
  return out;
}

// Every entry below `dir` (an fd) is a file, a directory, a symlink, a FIFO or a whiteout.
void CheckTree(int dir, int depth) {
  FUZZ_CHECK(depth < 4096);
  auto names = ListDir(dir);
  FUZZ_CHECK(names.ok());
  for (const auto& name : *names) {
    struct stat st{};
    FUZZ_CHECK(::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0);
    FUZZ_CHECK(name.rfind(kWhiteoutPrefix, 0) != 0);  // markers never land as themselves
    FUZZ_CHECK(!S_ISBLK(st.st_mode) && !S_ISSOCK(st.st_mode));
    if (S_ISCHR(st.st_mode)) FUZZ_CHECK(st.st_rdev == 0);
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub = OpenBeneath(dir, name, O_RDONLY | O_DIRECTORY);
      FUZZ_CHECK(sub.valid());
      CheckTree(sub.get(), depth + 1);
    }
  }
}

struct World {
  std::string own;  // kBase/<pid>: holds "layer" only
  World() {
    ::mkdir(kBase, 0700);
    ::mkdir(kOutside, 0755);
    UniqueFd secret(::open((std::string(kOutside) + "/secret").c_str(),
                           O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    FUZZ_CHECK(secret.valid());
    FUZZ_CHECK(::write(secret.get(), kSecret, sizeof kSecret - 1) ==
               static_cast<ssize_t>(sizeof kSecret - 1));
    own = std::string(kBase) + "/" + std::to_string(::getpid());
    ::mkdir(own.c_str(), 0700);
  }
  ~World() { ::rmdir(own.c_str()); }
};

}  // namespace
}  // namespace sandstream::image

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  using namespace sandstream::image;
  static World world;
  UniqueFd own(::open(world.own.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  FUZZ_CHECK(own.valid());
  FUZZ_CHECK(::mkdirat(own.get(), "layer", 0700) == 0);
  UniqueFd root(::openat(own.get(), "layer", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  FUZZ_CHECK(root.valid());

  BytesSource in(data, size);
  Budget budget{1 << 20, 1 << 20};
  BudgetSource counted(in, budget, "layer fuzz");
  TarReader tar(counted, "layer fuzz");
  const std::string what = "layer fuzz";
  auto unpacked = UnpackLayer(tar, root.get(), what, UnpackLimits{1000, &budget});
  if (!unpacked) {
    FUZZ_CHECK(unpacked.error().code == ErrorCode::kInvalidRequest ||
               unpacked.error().code == ErrorCode::kPayloadTooLarge);
    FUZZ_CHECK(unpacked.error().message.rfind("layer fuzz: ", 0) == 0);
  }

  CheckTree(root.get(), 0);
  FUZZ_CHECK(Names(world.own) == std::set<std::string>{"layer"});
  FUZZ_CHECK(Names(kOutside) == std::set<std::string>{"secret"});
  char buf[64] = {};
  UniqueFd secret(::open((std::string(kOutside) + "/secret").c_str(), O_RDONLY | O_CLOEXEC));
  FUZZ_CHECK(secret.valid() && ::read(secret.get(), buf, sizeof buf) == sizeof kSecret - 1);
  FUZZ_CHECK(std::string(buf) == kSecret);
  root.reset();
  FUZZ_CHECK(RemoveTree(own.get(), "layer", "layer").ok());
  FUZZ_CHECK(Names(world.own).empty());
  return 0;
}
