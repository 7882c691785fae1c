#include "api/e2b/inflate.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

namespace sandstream::api::e2b {

namespace {

constexpr size_t kMaxZlibSize = std::numeric_limits<uInt>::max();

}  // namespace

void GzipInflater::InflateEnd::operator()(z_stream_s* z) const {
  inflateEnd(z);
  delete z;
}

GzipInflater::GzipInflater() = default;
GzipInflater::~GzipInflater() = default;

Result<void> GzipInflater::Feed(std::string_view compressed) {
  if (failed_) return *failed_;
  if (!z_) {
    auto z = std::make_unique<z_stream>();
    // 16 + MAX_WBITS: a gzip header and trailer around a deflate stream of any window.
    if (const int rc = inflateInit2(z.get(), 16 + MAX_WBITS); rc != Z_OK) {
      failed_ = Error{ErrorCode::kInternal, std::string("gzip: inflateInit2: ") + zError(rc)};
      return *failed_;
    }
    z_.reset(z.release());
  }
  if (!input_.empty() || z_->avail_in > 0) {
    return Error{ErrorCode::kInternal, "gzip: a piece was fed before the last was read"};
  }
  input_ = compressed;
  started_ = started_ || !compressed.empty();
  return Ok{};
}

Result<std::optional<std::string_view>> GzipInflater::Fail(std::string message) {
  failed_ = Error{ErrorCode::kInvalidRequest, "the gzip body is corrupt: " + std::move(message)};
  return *failed_;
}

Result<std::optional<std::string_view>> GzipInflater::Next(size_t max_bytes) {
  if (failed_) return *failed_;
  if (!z_) return std::optional<std::string_view>();
  max_bytes = std::clamp<size_t>(max_bytes, 1, kMaxZlibSize);
  if (output_.size() < max_bytes) output_.resize(max_bytes);
  for (;;) {
    if (z_->avail_in == 0) {
      if (input_.empty()) return std::optional<std::string_view>();
      const size_t n = std::min(input_.size(), kMaxZlibSize);
      // zlib reads next_in only; it is not const unless zlib.h is told ZLIB_CONST.
      z_->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(input_.data()));
      z_->avail_in = static_cast<uInt>(n);
      input_.remove_prefix(n);
    }
    if (member_ended_) {
      if (inflateReset(z_.get()) != Z_OK) return Fail("inflateReset failed");
      member_ended_ = false;
    }
    z_->next_out = reinterpret_cast<Bytef*>(output_.data());
    z_->avail_out = static_cast<uInt>(max_bytes);
    const int rc = inflate(z_.get(), Z_NO_FLUSH);
    const size_t produced = max_bytes - z_->avail_out;
    switch (rc) {
      case Z_OK:
        break;
      case Z_STREAM_END:
        member_ended_ = true;
        break;
      case Z_BUF_ERROR:
        // With input and room for output, zlib makes progress or fails: not so is a stream it
        // cannot read, and looping on it would never end.
        if (z_->avail_in > 0) return Fail("zlib made no progress");
        break;
      case Z_NEED_DICT:
        return Fail("it asks for a preset dictionary");
      case Z_MEM_ERROR:
        failed_ = Error{ErrorCode::kInternal, "gzip: inflate: out of memory"};
        return *failed_;
      default:
        return Fail(z_->msg ? z_->msg : zError(rc));
    }
    if (produced > 0)
      return std::optional<std::string_view>(std::string_view(output_.data(), produced));
  }
}

Result<void> GzipInflater::Finish() const {
  if (failed_) return *failed_;
  if (!started_) return Error{ErrorCode::kInvalidRequest, "the gzip body is corrupt: it is empty"};
  if (!member_ended_ || !input_.empty() || z_->avail_in > 0) {
    return Error{ErrorCode::kInvalidRequest,
                 "the gzip body is corrupt: it ends before the end of its gzip stream"};
  }
  return Ok{};
}

}  // namespace sandstream::api::e2b
