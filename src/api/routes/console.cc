// The web console: the static files of web/dist served at `/`, without authentication (the
// console asks for the key and sends it with every API call). Only plain file names directly
// in the directory (or its assets/) are served, so no request can reach outside it.
#include <filesystem>

#include <boost/url/decode_view.hpp>

#include "api/routes/routes.h"
#include "api/server.h"
#include "platform/fd.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::string_view ContentType(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".map", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".json", "application/json"},
      {".txt", "text/plain; charset=utf-8"}};
  for (const auto& [ext, type] : kTypes) {
    if (name.ends_with(ext)) return type;
  }
  return "application/octet-stream";
}

bool PlainName(std::string_view name) {
  if (name.empty() || name.front() == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// The file a request names, or an error. Percent-decoded first, so "%2e%2e" is ".." and refused.
Result<std::string> StaticPath(const Context& ctx) {
  const std::string& root = ctx.server.options().web_dir;
  const auto missing = Error{ErrorCode::kNotFound, "no route " + std::string(ctx.req.target())};
  if (root.empty()) return missing;
  std::string relative = "index.html";
  if (!ctx.params.empty()) {
    const std::string name(boost::urls::decode_view(ctx.params.back()).begin(),
                           boost::urls::decode_view(ctx.params.back()).end());
    if (!PlainName(name)) return missing;
    relative = ctx.params.size() == 2 ? "assets/" + name : name;
  }
  std::error_code ec;
  const fs::path base = fs::canonical(root, ec);
  if (ec) return missing;
  const fs::path file = fs::canonical(base / relative, ec);
  // Also refuses a symlink that leads out of the directory.
  if (ec || !fs::is_regular_file(file, ec) || file.string().rfind(base.string() + "/", 0) != 0) {
    return missing;
  }
  return file.string();
}

}  // namespace

asio::awaitable<void> GetConsoleFile(Context& ctx) {
  auto path = StaticPath(ctx);
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto body = ReadFile(*path);
  if (!body) co_return co_await ReplyError(ctx, ErrorCode::kNotFound, "cannot read " + *path);
  // No other page may frame the console (a port's preview on this origin could, and then read
  // what is typed into it).
  // Named: g++ 12 destroys a braced temporary that lives across a co_await twice.
  std::vector<std::pair<std::string, std::string>> framing{
      {"Content-Security-Policy", "frame-ancestors 'none'"}, {"X-Frame-Options", "DENY"}};
  co_await Reply(ctx, http::status::ok, std::move(*body), ContentType(*path), std::move(framing));
}

}  // namespace sandstream::api
