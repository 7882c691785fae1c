// Pull streams of bytes for the image store: a range of a file, and filters that hash, count
// against a budget, report progress or decompress (gzip, zstd) what they pull. Every input is
// untrusted: a stream that ends early is an error naming what was cut short, never a short read.
#pragma once

#include <sys/types.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "image/digest.h"

namespace sandstream::image {

class Source {
 public:
  virtual ~Source() = default;
  // Up to `size` bytes into `buf`; 0 only at the end of the stream.
  virtual Result<size_t> Read(char* buf, size_t size) = 0;
  // Passes over `n` bytes; what is not there is an error.
  virtual Result<void> Skip(uint64_t n);
};

// Exactly `size` bytes, or an error saying that `what` is truncated.
Result<void> ReadFull(Source& in, char* buf, size_t size, std::string_view what);
// Reads to the end, at most `max` bytes (more is an error naming `what`).
Result<std::string> ReadAll(Source& in, size_t max, std::string_view what);
// Reads and drops everything left.
Result<void> Drain(Source& in);

// `length` bytes of `fd` from `offset`, read with pread (the fd's offset is left alone). The file
// ending before them is an error naming `what`.
class FileSource : public Source {
 public:
  FileSource(int fd, uint64_t offset, uint64_t length, std::string what)
      : fd_(fd), offset_(offset), left_(length), what_(std::move(what)) {}
  Result<size_t> Read(char* buf, size_t size) override;
  Result<void> Skip(uint64_t n) override;
  uint64_t offset() const { return offset_; }

 private:
  int fd_;
  uint64_t offset_;
  uint64_t left_;
  std::string what_;
};

// Hashes (SHA-256) and counts what passes through.
class HashingSource : public Source {
 public:
  explicit HashingSource(Source& in) : in_(in) {}
  Result<size_t> Read(char* buf, size_t size) override;
  std::string Digest() const { return hash_.Digest(); }
  uint64_t bytes() const { return bytes_; }

 private:
  Source& in_;
  Sha256 hash_;
  uint64_t bytes_ = 0;
};

// What one import may still unpack: its share of StoreLimits::max_unpacked_bytes.
struct Budget {
  uint64_t limit = 0;  // the whole, for messages
  uint64_t left = 0;
};

// The error for going over a budget's limit, naming `what`.
Error OverBudget(const Budget& budget, std::string_view what);

// Passes bytes on while `budget` lasts; a byte more is kPayloadTooLarge naming `what`.
class BudgetSource : public Source {
 public:
  BudgetSource(Source& in, Budget& budget, std::string what)
      : in_(in), budget_(budget), what_(std::move(what)) {}
  Result<size_t> Read(char* buf, size_t size) override;

 private:
  Source& in_;
  Budget& budget_;
  std::string what_;
};

// Progress is reported at most once per this many bytes (and at the end).
inline constexpr uint64_t kProgressStep = 1 << 20;

// Calls `report(done)` as bytes pass (every kProgressStep, and at the end).
class ProgressSource : public Source {
 public:
  ProgressSource(Source& in, std::function<void(uint64_t)> report)
      : in_(in), report_(std::move(report)) {}
  Result<size_t> Read(char* buf, size_t size) override;

 private:
  Source& in_;
  std::function<void(uint64_t)> report_;
  uint64_t done_ = 0;
  uint64_t reported_ = 0;
  bool ended_ = false;
};

enum class Compression { kNone, kGzip, kZstd };
std::string_view CompressionName(Compression c);
// By the magic number at the start of a blob: gzip, zstd, or neither.
Compression SniffCompression(std::string_view head);

// gzip (RFC 1952), concatenated members read as one stream as gzip(1) does; what follows the
// last member must be another member or nothing.
class GzipSource : public Source {
 public:
  GzipSource(Source& in, std::string what);
  ~GzipSource() override;
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;
  Result<size_t> Read(char* buf, size_t size) override;

 private:
  Source& in_;
  std::string what_;
  z_stream z_{};
  std::vector<char> input_;
  bool eof_ = false;
  bool member_done_ = false;  // the last member ended: a next one may start
};

// zstd frames (skippable ones too), one after another.
class ZstdSource : public Source {
 public:
  ZstdSource(Source& in, std::string what);
  ~ZstdSource() override;
  ZstdSource(const ZstdSource&) = delete;
  ZstdSource& operator=(const ZstdSource&) = delete;
  Result<size_t> Read(char* buf, size_t size) override;

 private:
  Source& in_;
  std::string what_;
  ZSTD_DCtx* ctx_;
  std::vector<char> input_;
  ZSTD_inBuffer in_buf_{};
  bool eof_ = false;
  bool frame_done_ = false;  // a frame ended and no next one has begun
};

// `in` decompressed per `c` (kNone: `in` itself, wrapped).
std::unique_ptr<Source> Decompress(Source& in, Compression c, std::string what);

}  // namespace sandstream::image
