// envd's HTTP routes: /health, and /files: downloads, and uploads as multipart/form-data (a
// part per file, named by the `path` query or the part's filename) or as one
// application/octet-stream body (gzip too), each written as sandstream's own uploads are.
#include "api/common/files.h"

#include <boost/algorithm/string/predicate.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "api/e2b/connect.h"
#include "api/e2b/inflate.h"
#include "api/e2b/multipart.h"
#include "api/e2b/routes.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Decompressed bytes are written in pieces of this size at most.
constexpr size_t kInflatePiece = 256 * 1024;

json::object WriteInfo(const sandbox::FileInfo& info) {
  json::object o;
  o["name"] = info.name;
  o["type"] = "file";
  o["path"] = info.path;
  return o;
}

// An upload's files as they arrive: at most one open at a time.
struct Uploads {
  Context& ctx;
  EnvdFiles& files;
  std::optional<std::string> path;  // the `path` query: where every file goes
  json::array written;
  std::unique_ptr<FileUpload> current;

  asio::awaitable<Result<void>> Begin(std::string dest) {
    if (dest.empty())
      co_return Invalid("a file part has no filename and the path query is missing");
    auto opened = co_await FileUpload::Open(ctx, files.sandbox_id, files.fs, files.Resolve(dest),
                                            std::nullopt, true);
    if (!opened) co_return std::move(opened).error();
    current = std::move(*opened);
    co_return Result<void>(Ok{});
  }
  asio::awaitable<Result<void>> End(std::optional<Error> failure = {}) {
    if (!current) co_return failure ? Result<void>(*failure) : Result<void>(Ok{});
    std::unique_ptr<FileUpload> upload = std::move(current);
    auto done = co_await upload->Close(std::move(failure));
    if (!done) co_return std::move(done).error();
    written.push_back(WriteInfo(done->info));
    co_return Result<void>(Ok{});
  }
};

asio::awaitable<Result<void>> TakeParts(Uploads& u, MultipartReader& reader,
                                        std::string_view piece) {
  if (auto fed = reader.Feed(piece); !fed) co_return fed;
  for (;;) {
    auto event = reader.Next();
    if (!event) co_return std::move(event).error();
    if (!*event) co_return Result<void>(Ok{});
    switch ((*event)->kind) {
      case MultipartEvent::Kind::kBegin:
        // envd writes the parts named "file"; others are read past.
        if (reader.part().name == "file") {
          if (auto begun = co_await u.Begin(u.path ? *u.path : reader.part().filename); !begun) {
            co_return begun;
          }
        }
        break;
      case MultipartEvent::Kind::kData:
        if (u.current) {
          if (auto w = co_await u.current->Write((*event)->data); !w) co_return w;
        }
        break;
      case MultipartEvent::Kind::kEnd:
        if (auto ended = co_await u.End(); !ended) co_return ended;
        break;
    }
  }
}

// A gzip body's bytes, inflated as they arrive. The file, not the body, is what max_file_bytes
// bounds; and as a few compressed bytes may inflate to many, the loop yields between pieces.
struct Inflating {
  GzipInflater inflater;
  uint64_t inflated = 0;
  uint64_t limit = 0;
};

asio::awaitable<Result<void>> TakeGzip(Uploads& u, Inflating& in, std::string_view piece) {
  if (auto fed = in.inflater.Feed(piece); !fed) co_return fed;
  for (;;) {
    auto out = in.inflater.Next(kInflatePiece);
    if (!out) co_return std::move(out).error();
    if (!*out) co_return Result<void>(Ok{});
    in.inflated += (*out)->size();
    if (in.inflated > in.limit) {
      co_return Error{ErrorCode::kPayloadTooLarge,
                      "file upload (max_file_bytes): the inflated file is larger than " +
                          std::to_string(in.limit) + " bytes"};
    }
    if (auto w = co_await u.current->Write(**out); !w) co_return w;
    co_await asio::post(u.ctx.stream.get_executor(), asio::use_awaitable);
  }
}

// The error of an upload, as envd answers a full disk: 507, which the SDKs raise as
// NotEnoughSpaceException.
asio::awaitable<void> FailUpload(Context& ctx, const Error& error) {
  if (error.sys_errno == ENOSPC || error.sys_errno == EDQUOT || error.sys_errno == EFBIG) {
    co_return co_await Fail(ctx, http::status::insufficient_storage, error.message);
  }
  co_await ReplyError(ctx, Refusal(error));
}

}  // namespace

asio::awaitable<void> Health(Context& ctx) {
  // A sandbox that is gone answers as E2B's edge does (502): the SDKs' is_running() is false.
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> ReadFile(Context& ctx) {
  auto sb = co_await FilesSandbox(ctx, "read");
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto files = OpenFiles(ctx, **sb);
  if (!files) co_return co_await ReplyError(ctx, files.error());
  auto path = ctx.Query("path");
  if (!path || path->empty()) {
    co_return co_await ReplyError(ctx, Invalid("the path query parameter is required"));
  }
  co_await ServeDownload(ctx, files->fs, files->Resolve(*path));
}

asio::awaitable<void> WriteFiles(Context& ctx) {
  // An answer given before the whole body is read must close the connection, or the client
  // would send its next request into the rest of this body.
  const bool keep_alive = ctx.req.keep_alive();
  if (ctx.body_parser && !ctx.body_parser->is_done()) ctx.req.keep_alive(false);
  auto sb = co_await FilesSandbox(ctx, "write");
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto files = OpenFiles(ctx, **sb);
  if (!files) co_return co_await ReplyError(ctx, files.error());
  Uploads u{ctx, *files, std::nullopt, {}, {}};
  if (auto path = ctx.Query("path"); path && !path->empty()) u.path = std::string(*path);

  const std::string_view type = ctx.Header(http::field::content_type);
  const std::string_view encoding = ctx.Header(http::field::content_encoding);
  const std::string what = "file upload (max_file_bytes)";
  const uint64_t limit = ctx.server.options().max_file_bytes;
  std::optional<Error> failed;
  if (boost::algorithm::istarts_with(type, "multipart/")) {
    auto boundary = MultipartBoundary(type);
    if (!boundary) co_return co_await ReplyError(ctx, boundary.error());
    MultipartReader reader(std::move(*boundary));
    failed = co_await ReceiveBody(
        ctx, [&](std::string_view piece) { return TakeParts(u, reader, piece); }, what, limit);
    if (!failed) {
      if (auto finished = reader.Finish(); !finished) failed = finished.error();
    }
  } else {
    if (!u.path)
      co_return co_await ReplyError(ctx, Invalid("the path query parameter is required"));
    const bool gzip = encoding == "gzip";
    if (!encoding.empty() && encoding != "identity" && !gzip) {
      co_return co_await ReplyError(
          ctx, ErrorCode::kUnsupportedMediaType,
          "Content-Encoding " + std::string(encoding) + " is not served (gzip is)");
    }
    if (auto begun = co_await u.Begin(*u.path); !begun)
      co_return co_await FailUpload(ctx, begun.error());
    if (gzip) {
      Inflating in{{}, 0, limit};
      failed = co_await ReceiveBody(
          ctx, [&](std::string_view piece) { return TakeGzip(u, in, piece); }, what, limit);
      if (!failed) {
        if (auto finished = in.inflater.Finish(); !finished) failed = finished.error();
      }
    } else {
      failed = co_await ReceiveBody(
          ctx, [&](std::string_view piece) { return u.current->Write(piece); }, what, limit);
    }
  }
  // A file cut short is closed with the failure (a new one is removed again).
  Result<void> ended = co_await u.End(failed);
  if (!ctx.body_parser || ctx.body_parser->is_done()) ctx.req.keep_alive(keep_alive);
  if (!ended) co_return co_await FailUpload(ctx, ended.error());
  if (u.written.empty()) co_return co_await ReplyError(ctx, Invalid("the upload held no file"));
  co_await Reply(ctx, http::status::ok, json::serialize(u.written),
                 "application/json; charset=utf-8");
}

}  // namespace sandstream::api::e2b
