// Tar archives, streamed: a reader of what image layers and image archives are written as
// (ustar, GNU long names and links, PAX extended and global headers, base-256 numbers) and a
// writer of the canonical form the store hashes directory trees as. The reader trusts nothing:
// every header's checksum is checked, every size bounded, and input that ends early is an error.
// It only parses; what an entry may do to a filesystem is decided by its caller.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "image/stream.h"

namespace sandstream::image {

enum class EntryType { kFile, kDirectory, kSymlink, kHardlink, kFifo, kCharDevice, kBlockDevice };

struct TarEntry {
  std::string name;      // as the archive spells it (GNU long name, or PAX path, applied)
  std::string linkname;  // symlink target or hard link target, as spelled
  EntryType type = EntryType::kFile;
  uint64_t size = 0;  // bytes of data that follow (0 for all but files)
  uint32_t mode = 0;  // permission bits, setuid/setgid/sticky included (07777)
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime = 0;  // seconds since the epoch
  uint32_t mtime_nsec = 0;
  uint32_t dev_major = 0;
  uint32_t dev_minor = 0;
  std::vector<std::pair<std::string, std::string>> xattrs;  // from its own SCHILY.xattr.*
};

// The longest entry name and link target accepted (the kernel's PATH_MAX, less its NUL).
inline constexpr size_t kMaxPathBytes = 4095;

// An entry's name made relative and plain: leading "/" and "./" dropped, "." and empty
// components dropped, a trailing "/" dropped; "" is the archive's root. A `..` component, a NUL,
// an empty name, a component longer than 255 bytes (a whiteout marker's: 259) or a name over
// kMaxPathBytes is an error
// whose message says which (the caller names the entry).
Result<std::string> NormalizeEntryName(std::string_view name);

// `name` quoted for a message: 'a/b', control bytes escaped, long names shortened.
std::string Quote(std::string_view name);

class TarReader {
 public:
  // `what` starts every error message ("layer sha256:...").
  TarReader(Source& in, std::string what) : in_(in), what_(std::move(what)) {}

  // The next entry, or nullopt after the end-of-archive blocks (or at the end of the input
  // between two entries, as Go's reader allows). What is left of the previous entry's data is
  // skipped first.
  Result<std::optional<TarEntry>> Next();
  // Up to `size` bytes of the current entry's data; 0 once it is all read.
  Result<size_t> ReadData(char* buf, size_t size);
  // Bytes of the input consumed so far (at the start of an entry's data, right after Next).
  uint64_t position() const { return position_; }

 private:
  Result<void> ReadBlock(char* block, bool* eof);
  Result<void> SkipData();
  Result<std::string> ReadMeta(uint64_t size, std::string_view kind);
  using PaxRecords = std::map<std::string, std::string, std::less<>>;
  // Parses `records` into `into`; of a global header only the keys an entry uses are kept.
  Result<void> ApplyPax(std::string_view records, PaxRecords& into, bool global);

  Source& in_;
  std::string what_;
  uint64_t position_ = 0;
  uint64_t data_left_ = 0;  // of the current entry
  uint64_t padding_ = 0;    // after the current entry's data, to the next block
  bool ended_ = false;
  // PAX 'g' records, for every entry after them: only the keys an entry uses (no xattrs), and
  // at most kMaxGlobalBytes of 'g' headers read in all.
  PaxRecords global_;
  uint64_t global_bytes_ = 0;
};

// Where a TarWriter's bytes go.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Result<void> Write(std::string_view data) = 0;
};

// Writes the canonical tar of a tree: ustar headers with empty user and group names, zero
// device numbers and no prefix field; a PAX header only where a value does not fit ustar (path,
// linkpath, uid, gid, size, mtime) or for xattrs, its records sorted; whole seconds; two zero
// blocks at the end and no padding after them. The same entries give the same bytes.
class TarWriter {
 public:
  explicit TarWriter(Sink& out) : out_(out) {}
  // The header of `e` (its name as it is written: relative, "/" after a directory's).
  Result<void> WriteHeader(const TarEntry& e);
  // Data of the current file entry; all of it (e.size bytes), then Pad.
  Result<void> WriteData(std::string_view data) { return out_.Write(data); }
  // Zeros after `size` bytes of data, to the next block.
  Result<void> Pad(uint64_t size);
  Result<void> Finish();

 private:
  Sink& out_;
};

}  // namespace sandstream::image
