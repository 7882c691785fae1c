// The file routes (/api/write, read, read/stream, mkdir, delete, rename, move, list-files,
// exists) over the sandbox's files as `user`, as sandstream's files routes reach them.
#include "api/common/files.h"

#include <boost/json.hpp>

#include "api/cloudflare/errors.h"
#include "api/cloudflare/routes.h"
#include "api/cloudflare/wire.h"
#include "api/common/lookup.h"
#include "api/request.h"
#include "api/stream.h"
#include "base/base64.h"
#include "base/json_string.h"
#include "base/utf8.h"

namespace sandstream::api::cloudflare {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The raw bytes of one read/stream chunk: a multiple of 3, so every base64 chunk decodes alone.
constexpr size_t kStreamChunk = 65535;
// The user a SandboxClient acts as: the sandbox's `user` (uid 1000 inside).
constexpr uint32_t kUserUid = 1000;

// What a file route acts on: the sandbox's files and the request's path fields.
struct Target {
  const SandboxEntry* sb = nullptr;
  sandbox::SandboxFs fs;
  json::object request;
};

Result<Target> FindTarget(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) return std::move(sb).error();
  auto request = ParseBody(ctx);
  if (!request) return std::move(request).error();
  auto fs = ctx.service.Files((*sb)->id, kUserUid);
  if (!fs) return std::move(fs).error();
  return Target{*sb, std::move(*fs), std::move(*request)};
}

Result<std::string> PathOf(const Target& t, std::string_view key) {
  auto path = RequiredString(t.request, key);
  if (!path) return std::move(path).error();
  return Absolute(*t.sb, *path);
}

// Whether bytes read as text: UTF-8 without NUL, as `file --mime` would call them.
bool IsText(std::string_view bytes) {
  return bytes.find('\0') == std::string_view::npos && IsValidUtf8(bytes);
}

std::string MimeOf(std::string_view path, bool text) {
  const std::string_view mime = MimeType(path);
  if (mime == "application/octet-stream" && text) return "text/plain";
  return std::string(mime);
}

// rwxr-xr-x
std::string ModeString(uint32_t mode) {
  std::string out;
  for (int shift = 6; shift >= 0; shift -= 3) {
    out += mode & (4u << shift) ? 'r' : '-';
    out += mode & (2u << shift) ? 'w' : '-';
    out += mode & (1u << shift) ? 'x' : '-';
  }
  return out;
}

json::object FileInfoJson(const sandbox::FileInfo& f, std::string_view root) {
  std::string_view relative = std::string_view(f.path).substr(std::min(root.size(), f.path.size()));
  while (relative.starts_with('/')) relative.remove_prefix(1);
  json::object o;
  o["name"] = f.name;
  o["absolutePath"] = f.path;
  o["relativePath"] = relative;
  o["type"] = sandbox::FileTypeName(f.type);
  o["size"] = f.size;
  o["modifiedAt"] = FormatRfc3339(FromUnixMillis(f.mtime_ms));
  o["mode"] = ModeString(f.mode);
  o["permissions"] = json::object{{"readable", (f.mode & 0400) != 0},
                                  {"writable", (f.mode & 0200) != 0},
                                  {"executable", (f.mode & 0100) != 0}};
  return o;
}

// The entries under `root`, depth first when `recursive`, hidden ones (.name) only if asked.
Result<std::vector<sandbox::FileInfo>> Walk(const sandbox::SandboxFs& fs, const std::string& root,
                                            bool recursive, bool hidden) {
  std::vector<sandbox::FileInfo> out;
  std::vector<std::string> dirs{root};
  while (!dirs.empty() && out.size() < kListLimit) {
    const std::string dir = std::move(dirs.back());
    dirs.pop_back();
    bool truncated = false;
    auto entries = fs.List(dir, kListLimit - out.size(), &truncated);
    if (!entries) return std::move(entries).error();
    for (auto& e : *entries) {
      if (!hidden && e.name.starts_with('.')) continue;
      if (recursive && e.type == sandbox::FileType::kDirectory) dirs.push_back(e.path);
      out.push_back(std::move(e));
    }
  }
  return out;
}

asio::awaitable<std::optional<Error>> FeedAll(const BodySink& sink, const std::string& data) {
  Result<void> taken = co_await sink(data);
  co_return taken ? std::nullopt : std::optional(taken.error());
}

}  // namespace

asio::awaitable<void> WriteFile(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto content = StringField(t->request, "content");
  if (!content) co_return co_await ReplyError(ctx, content.error());
  auto encoding = StringField(t->request, "encoding");
  if (!encoding) co_return co_await ReplyError(ctx, encoding.error());
  std::string data = content->value_or("");
  if (*encoding && **encoding == "base64") {
    auto decoded = DecodeBase64(data);
    if (!decoded) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, "content is not valid base64");
    }
    data = std::move(*decoded);
  } else if (*encoding && **encoding != "utf-8" && **encoding != "utf8") {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                  "encoding must be \"utf-8\" or \"base64\"");
  }
  const Feed feed = [&data](const BodySink& sink) { return FeedAll(sink, data); };
  auto written =
      co_await api::WriteFile(ctx, ctx.params.at(0), t->fs, *path, std::nullopt, true, feed);
  if (!written) co_return co_await Fail(ctx, written.error(), Subject::kFile, *path);
  json::object out;
  out["path"] = written->info.path;
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ReadFile(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto encoding = StringField(t->request, "encoding");
  if (!encoding) co_return co_await ReplyError(ctx, encoding.error());
  // A buffered answer holds no more than buffered exec does; readFileStream has no limit.
  const uint64_t limit = ctx.service.options().exec_output_limit_bytes;
  auto bytes = co_await OffThread(ctx, [&]() -> Result<std::string> {
    auto file = t->fs.OpenRead(*path);
    if (!file) return std::move(file).error();
    if (file->info.size > limit) {
      return Error{ErrorCode::kPayloadTooLarge, *path + " is larger than " + std::to_string(limit) +
                                                    " bytes: read it with readFileStream"};
    }
    std::string data(file->info.size, '\0');
    size_t got = 0;
    while (got < data.size()) {
      auto n = file->Read(data.data() + got, data.size() - got);
      if (!n) return std::move(n).error();
      if (*n == 0) break;
      got += *n;
    }
    data.resize(got);
    return data;
  });
  if (!bytes) co_return co_await Fail(ctx, bytes.error(), Subject::kFile, *path);
  const bool text = IsText(*bytes);
  const bool base64 = !text || (*encoding && **encoding == "base64");
  json::object out;
  out["path"] = *path;
  out["encoding"] = base64 ? "base64" : "utf-8";
  out["isBinary"] = !text;
  out["mimeType"] = MimeOf(*path, text);
  out["size"] = bytes->size();
  out["content"] = base64 ? Base64(*bytes) : std::move(*bytes);
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> ReadFileStream(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto file = co_await OffThread(ctx, [&] { return t->fs.OpenRead(*path); });
  if (!file) co_return co_await Fail(ctx, file.error(), Subject::kFile, *path);
  std::string chunk(kStreamChunk, '\0');
  auto first = co_await OffThread(ctx, [&] { return file->Read(chunk.data(), chunk.size()); });
  if (!first) co_return co_await Fail(ctx, first.error(), Subject::kFile, *path);
  chunk.resize(*first);
  // The first chunk decides, as the metadata must come before any chunk.
  const bool text = IsText(std::string_view(chunk).substr(0, Utf8CompletePrefix(chunk)));

  StreamResponse sse(ctx);
  json::object metadata{{"type", "metadata"},
                        {"mimeType", MimeOf(*path, text)},
                        {"size", file->info.size},
                        {"isBinary", !text},
                        {"encoding", text ? "utf-8" : "base64"}};
  sse::AppendEvent(sse.out(), 0, "metadata", json::serialize(metadata));
  uint64_t read = 0;
  std::string carry;  // a code point cut by the chunk's end, sent with the next one
  std::optional<Error> failure;
  for (;;) {
    const bool end = chunk.empty();
    read += chunk.size();
    std::string data = std::move(carry) + chunk;
    carry.clear();
    if (text && !end) {
      const size_t whole = Utf8CompletePrefix(data);
      carry = data.substr(whole);
      data.resize(whole);
    }
    if (!data.empty()) {
      std::string event = "{\"type\":\"chunk\",\"data\":";
      if (text) {
        AppendJsonString(event, data);
      } else {
        event += '"' + Base64(data) + '"';
      }
      event += '}';
      sse::AppendEvent(sse.out(), 0, "chunk", event);
      if (!co_await sse.Flush()) co_return;
    }
    if (end) break;
    chunk.resize(kStreamChunk);
    auto n = co_await OffThread(ctx, [&] { return file->Read(chunk.data(), chunk.size()); });
    if (!n) {
      failure = n.error();
      break;
    }
    chunk.resize(*n);
  }
  if (failure) {
    json::object error{{"type", "error"}, {"error", failure->message}};
    sse::AppendEvent(sse.out(), 0, "error", json::serialize(error));
  } else {
    sse::AppendEvent(sse.out(), 0, "complete",
                     json::serialize(json::object{{"type", "complete"}, {"bytesRead", read}}));
  }
  co_await sse.Finish(StreamEnd::kEnded, sse::Format::kCloudflare);
}

asio::awaitable<void> Mkdir(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  const json::value* r = t->request.if_contains("recursive");
  if (r && !r->is_null() && !r->is_bool()) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                  "recursive must be true or false");
  }
  const bool recursive = r && r->is_bool() && r->as_bool();
  auto made = co_await OffThread(ctx, [&] { return t->fs.Mkdir(*path, 0755, recursive); });
  if (!made) co_return co_await Fail(ctx, made.error(), Subject::kFile, *path);
  json::object out;
  out["path"] = made->path;
  out["recursive"] = recursive;
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> DeleteFile(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  // deleteFile removes files: a directory is refused, as Cloudflare's container refuses it.
  auto removed = co_await OffThread(ctx, [&]() -> Result<void> {
    auto info = t->fs.Stat(*path);
    if (!info) return std::move(info).error();
    if (info->type == sandbox::FileType::kDirectory) {
      return Invalid(*path + " is a directory: deleteFile removes files only");
    }
    return t->fs.Remove(*path, false);
  });
  if (!removed) co_return co_await Fail(ctx, removed.error(), Subject::kFile, *path);
  json::object out;
  out["path"] = *path;
  co_await ReplyOk(ctx, std::move(out));
}

namespace {

// rename and move: the same call under two pairs of field names; the target is replaced.
asio::awaitable<void> MoveFrom(Context& ctx, std::string_view from_key, std::string_view to_key) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto from = PathOf(*t, from_key);
  if (!from) co_return co_await ReplyError(ctx, from.error());
  auto to = PathOf(*t, to_key);
  if (!to) co_return co_await ReplyError(ctx, to.error());
  auto moved = co_await OffThread(ctx, [&] { return t->fs.Move(*from, *to, true); });
  if (!moved) co_return co_await Fail(ctx, moved.error(), Subject::kFile, *from);
  json::object out;
  out["path"] = *from;
  out["newPath"] = moved->path;
  co_await ReplyOk(ctx, std::move(out));
}

}  // namespace

asio::awaitable<void> RenameFile(Context& ctx) {
  return MoveFrom(ctx, "oldPath", "newPath");
}

asio::awaitable<void> MoveFile(Context& ctx) {
  return MoveFrom(ctx, "sourcePath", "destinationPath");
}

asio::awaitable<void> ListFiles(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  bool recursive = false;
  bool hidden = false;
  if (const json::value* o = t->request.if_contains("options"); o && o->is_object()) {
    for (auto [key, flag] :
         {std::pair<const char*, bool*>{"recursive", &recursive}, {"includeHidden", &hidden}}) {
      const json::value* v = o->as_object().if_contains(key);
      if (v && v->is_bool()) *flag = v->as_bool();
    }
  }
  auto root = sandbox::NormalizeSandboxPath(*path);
  if (!root) co_return co_await ReplyError(ctx, root.error());
  auto entries = co_await OffThread(ctx, [&] { return Walk(t->fs, *root, recursive, hidden); });
  if (!entries) co_return co_await Fail(ctx, entries.error(), Subject::kFile, *path);
  json::array files;
  for (const auto& e : *entries) files.push_back(FileInfoJson(e, *root));
  json::object out;
  out["path"] = *root;
  out["count"] = files.size();
  out["files"] = std::move(files);
  co_await ReplyOk(ctx, std::move(out));
}

asio::awaitable<void> Exists(Context& ctx) {
  auto t = FindTarget(ctx);
  if (!t) co_return co_await ReplyError(ctx, t.error());
  auto path = PathOf(*t, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto info = co_await OffThread(ctx, [&] { return t->fs.Stat(*path); });
  if (!info && info.error().code != ErrorCode::kNotFound) {
    co_return co_await Fail(ctx, info.error(), Subject::kFile, *path);
  }
  json::object out;
  out["path"] = *path;
  out["exists"] = static_cast<bool>(info);
  co_await ReplyOk(ctx, std::move(out));
}

}  // namespace sandstream::api::cloudflare
