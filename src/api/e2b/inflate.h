// A gzip upload body (Content-Encoding: gzip) decompressed as it arrives, in pieces of a size
// the caller bounds: a small body may expand a thousandfold, so output is never made at once.
// Synchronous and Asio-free.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

struct z_stream_s;

namespace sandstream::api::e2b {

// gzip (RFC 1952) over zlib. Concatenated members are read as one stream, as gzip(1) does;
// what follows the last member must be another member.
class GzipInflater {
 public:
  GzipInflater();
  ~GzipInflater();
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;

  // The next piece of the body, once Next has returned nullopt for the last one. The piece must
  // stay valid until then.
  Result<void> Feed(std::string_view compressed);
  // Up to max_bytes (at least 1) of what the pieces fed so far decompress to, or nullopt when
  // they are used up. The view is valid until the next call. A corrupt stream is
  // kInvalidRequest, and stays the answer.
  Result<std::optional<std::string_view>> Next(size_t max_bytes);
  // After the last piece: whether the stream was complete (not cut short, nor empty).
  Result<void> Finish() const;

 private:
  struct InflateEnd {
    void operator()(z_stream_s* z) const;
  };
  Result<std::optional<std::string_view>> Fail(std::string message);

  // Made by the first Feed, where a failure can be told.
  std::unique_ptr<z_stream_s, InflateEnd> z_;
  std::string_view input_;  // what zlib has not been handed yet
  std::string output_;      // Next's pieces: as large as the largest max_bytes asked
  std::optional<Error> failed_;
  bool member_ended_ = false;  // a member ended and no byte of a next one was read
  bool started_ = false;       // a byte was fed
};

}  // namespace sandstream::api::e2b
