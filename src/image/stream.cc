#include "image/stream.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sandstream::image {
namespace {

constexpr size_t kChunk = 64 * 1024;

Error Truncated(std::string_view what) {
  return Error{ErrorCode::kInvalidRequest, std::string(what) + ": truncated (the data ends early)"};
}

class PassSource : public Source {
 public:
  explicit PassSource(Source& in) : in_(in) {}
  Result<size_t> Read(char* buf, size_t size) override { return in_.Read(buf, size); }

 private:
  Source& in_;
};

}  // namespace

Result<void> Source::Skip(uint64_t n) {
  char buf[kChunk];
  while (n > 0) {
    auto got = Read(buf, static_cast<size_t>(std::min<uint64_t>(n, sizeof buf)));
    if (!got) return std::move(got).error();
    if (*got == 0) return Error{ErrorCode::kInvalidRequest, "truncated (the data ends early)"};
    n -= *got;
  }
  return Ok{};
}

Result<void> ReadFull(Source& in, char* buf, size_t size, std::string_view what) {
  size_t done = 0;
  while (done < size) {
    auto got = in.Read(buf + done, size - done);
    if (!got) return std::move(got).error();
    if (*got == 0) return Truncated(what);
    done += *got;
  }
  return Ok{};
}

Result<std::string> ReadAll(Source& in, size_t max, std::string_view what) {
  std::string out;
  char buf[kChunk];
  for (;;) {
    auto got = in.Read(buf, sizeof buf);
    if (!got) return std::move(got).error();
    if (*got == 0) return out;
    if (out.size() + *got > max) {
      return Error{ErrorCode::kInvalidRequest,
                   std::string(what) + ": larger than " + std::to_string(max) + " bytes"};
    }
    out.append(buf, *got);
  }
}

Result<void> Drain(Source& in) {
  char buf[kChunk];
  for (;;) {
    auto got = in.Read(buf, sizeof buf);
    if (!got) return std::move(got).error();
    if (*got == 0) return Ok{};
  }
}

Result<size_t> FileSource::Read(char* buf, size_t size) {
  size = static_cast<size_t>(std::min<uint64_t>(size, left_));
  if (size == 0) return size_t{0};
  for (;;) {
    const ssize_t n = ::pread(fd_, buf, size, static_cast<off_t>(offset_));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SysError(ErrorCode::kInternal, what_ + ": read", errno);
    if (n == 0) return Truncated(what_);
    offset_ += static_cast<uint64_t>(n);
    left_ -= static_cast<uint64_t>(n);
    return static_cast<size_t>(n);
  }
}

Result<void> FileSource::Skip(uint64_t n) {
  if (n > left_) return Truncated(what_);
  offset_ += n;
  left_ -= n;
  return Ok{};
}

Result<size_t> HashingSource::Read(char* buf, size_t size) {
  auto got = in_.Read(buf, size);
  if (got && *got > 0) {
    hash_.Update(std::string_view(buf, *got));
    bytes_ += *got;
  }
  return got;
}

Error OverBudget(const Budget& budget, std::string_view what) {
  return Error{ErrorCode::kPayloadTooLarge,
               std::string(what) + ": the image unpacks to more than its limit of " +
                   std::to_string(budget.limit) + " bytes (max_unpacked_bytes)"};
}

Result<size_t> BudgetSource::Read(char* buf, size_t size) {
  // One byte past what is left is enough to know the limit is crossed.
  const uint64_t allowed = budget_.left == UINT64_MAX ? budget_.left : budget_.left + 1;
  auto got = in_.Read(buf, static_cast<size_t>(std::min<uint64_t>(size, allowed)));
  if (!got) return got;
  if (*got > budget_.left) return OverBudget(budget_, what_);
  budget_.left -= *got;
  return got;
}

Result<size_t> ProgressSource::Read(char* buf, size_t size) {
  auto got = in_.Read(buf, size);
  if (!got) return got;
  done_ += *got;
  if (*got == 0 ? !ended_ : done_ - reported_ >= kProgressStep) {
    report_(done_);
    reported_ = done_;
    ended_ = *got == 0;
  }
  return got;
}

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kGzip: return "gzip";
    case Compression::kZstd: return "zstd";
  }
  return "none";
}

Compression SniffCompression(std::string_view head) {
  if (head.size() >= 2 && head[0] == '\x1f' && head[1] == '\x8b') return Compression::kGzip;
  if (head.size() >= 4 && head.substr(0, 4) == std::string_view("\x28\xb5\x2f\xfd", 4)) {
    return Compression::kZstd;
  }
  return Compression::kNone;
}

GzipSource::GzipSource(Source& in, std::string what)
    : in_(in), what_(std::move(what)), input_(kChunk) {
  // 16 + 15: a gzip header and trailer (CRC-32, size) around a deflate stream of any window.
  if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
}

GzipSource::~GzipSource() { inflateEnd(&z_); }

Result<size_t> GzipSource::Read(char* buf, size_t size) {
  if (size == 0) return size_t{0};
  for (;;) {
    if (z_.avail_in == 0 && !eof_) {
      auto got = in_.Read(input_.data(), input_.size());
      if (!got) return std::move(got).error();
      eof_ = *got == 0;
      z_.next_in = reinterpret_cast<Bytef*>(input_.data());
      z_.avail_in = static_cast<uInt>(*got);
    }
    if (member_done_) {
      if (z_.avail_in == 0 && eof_) return size_t{0};
      if (z_.avail_in == 0) continue;
      inflateReset(&z_);
      member_done_ = false;
    }
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(size, UINT32_MAX));
    const uInt before_in = z_.avail_in;
    const int rc = inflate(&z_, Z_NO_FLUSH);
    const size_t produced = static_cast<size_t>(reinterpret_cast<char*>(z_.next_out) - buf);
    if (rc == Z_STREAM_END) {
      member_done_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return Error{ErrorCode::kInvalidRequest,
                   what_ + ": not valid gzip (" + (z_.msg ? z_.msg : zError(rc)) + ")"};
    }
    if (produced > 0) return produced;
    if (!member_done_ && eof_ && z_.avail_in == 0 && before_in == 0) {
      return Error{ErrorCode::kInvalidRequest, what_ + ": truncated gzip stream"};
    }
  }
}

ZstdSource::ZstdSource(Source& in, std::string what)
    : in_(in), what_(std::move(what)), ctx_(ZSTD_createDCtx()), input_(ZSTD_DStreamInSize()) {
  if (!ctx_) throw std::bad_alloc();
  in_buf_.src = input_.data();
}

ZstdSource::~ZstdSource() { ZSTD_freeDCtx(ctx_); }

Result<size_t> ZstdSource::Read(char* buf, size_t size) {
  if (size == 0) return size_t{0};
  for (;;) {
    if (in_buf_.pos == in_buf_.size && !eof_) {
      auto got = in_.Read(input_.data(), input_.size());
      if (!got) return std::move(got).error();
      eof_ = *got == 0;
      in_buf_.size = *got;
      in_buf_.pos = 0;
    }
    const size_t before_in = in_buf_.pos;
    ZSTD_outBuffer out{buf, size, 0};
    const size_t rc = ZSTD_decompressStream(ctx_, &out, &in_buf_);
    if (ZSTD_isError(rc)) {
      return Error{ErrorCode::kInvalidRequest,
                   what_ + ": not valid zstd (" + ZSTD_getErrorName(rc) + ")"};
    }
    // Without progress the return value only hints at a next frame: keep the last verdict.
    const bool progress = in_buf_.pos != before_in || out.pos > 0;
    if (progress) frame_done_ = rc == 0;
    if (out.pos > 0) return out.pos;
    if (!progress && eof_ && in_buf_.pos == in_buf_.size) {
      if (frame_done_) return size_t{0};
      return Error{ErrorCode::kInvalidRequest, what_ + ": truncated zstd stream"};
    }
  }
}

std::unique_ptr<Source> Decompress(Source& in, Compression c, std::string what) {
  switch (c) {
    case Compression::kGzip: return std::make_unique<GzipSource>(in, std::move(what));
    case Compression::kZstd: return std::make_unique<ZstdSource>(in, std::move(what));
    case Compression::kNone: break;
  }
  return std::make_unique<PassSource>(in);
}

}  // namespace sandstream::image
