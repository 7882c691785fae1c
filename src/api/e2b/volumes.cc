// E2B's volumes on sandstream's (service/volumes.h): the control plane's /volumes (X-API-KEY),
// and /volumecontent/{id}/{dir,path,file}, which E2B's SDKs call with the volume's token as a
// Bearer (from E2B_VOLUME_API_URL: point it at the daemon). A volume's token is an HMAC of its
// id and the key it was handed to, like a sandbox's envd token: it needs no record, opens that
// volume only, and ends with the key.
#include <algorithm>
#include <array>
#include <charconv>
#include <deque>

#include <boost/json.hpp>

#include "api/common/files.h"
#include "api/common/lookup.h"
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"
#include "api/request.h"
#include "base/ids.h"
#include "service/access.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Signed as a sandbox's envd token is, over "volume:" + its id: neither kind opens the other.
std::string TokenSubject(std::string_view volume_id) {
  return "volume:" + std::string(volume_id);
}

std::string VolumeToken(const Context& ctx, const Volume& v) {
  const std::string_view holder = ctx.principal.admin() ? kAdminHolder : ctx.principal.key;
  return SandboxAccessToken(ctx.server.options().api_key, TokenSubject(v.id), holder);
}

json::object VolumeAndToken(const Context& ctx, const Volume& v) {
  return {{"volumeID", v.id}, {"name", v.name}, {"token", VolumeToken(ctx, v)}};
}

Error NoVolume(std::string_view id) {
  return Error{ErrorCode::kNotFound, "volume " + std::string(id) + " not found"};
}

// The volume a content route names, if the request's Bearer token is its token and the key
// it was handed to is still one of the volume's tenant (or the admin's).
Result<const Volume*> ContentVolume(Context& ctx) {
  const std::string_view auth = ctx.Header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view token = auth.starts_with(kBearer) ? auth.substr(kBearer.size()) : "";
  const std::string& id = ctx.params.at(0);
  const Volume* v = ctx.service.volumes().Find("", true, id);
  if (!v || !VolumeHolder(ctx.server.options(), id, token, v->tenant)) {
    return VolumeUnauthorized();
  }
  if (auto refused = ctx.server.AdmitTenant(v->tenant, false)) return *refused;
  return v;
}

Result<std::optional<uint32_t>> Id(Context& ctx, std::string_view key) {
  const std::optional<std::string_view> text = ctx.Query(key);
  if (!text || text->empty()) return std::optional<uint32_t>();
  uint32_t n = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), n);
  if (ec != std::errc() || end != text->data() + text->size()) {
    return Invalid(std::string(key) + " must be a non-negative integer");
  }
  return std::optional<uint32_t>(n);
}

// The owner and mode a request asks for (nullopt: not asked).
struct Attributes {
  std::optional<uint32_t> uid, gid, mode;
  bool owner() const { return uid || gid; }
};

// Each attribute's name, in the query and in a body.
constexpr std::array kAttributes = {std::pair{"uid", &Attributes::uid},
                                    std::pair{"gid", &Attributes::gid},
                                    std::pair{"mode", &Attributes::mode}};

// From the query (make_dir, write_file).
Result<Attributes> QueryAttributes(Context& ctx) {
  Attributes a;
  for (auto [key, field] : kAttributes) {
    auto n = Id(ctx, key);
    if (!n) return std::move(n).error();
    a.*field = *n;
  }
  return a;
}

// From a body (update_metadata): each a non-negative integer, or null or absent.
Result<Attributes> BodyAttributes(const json::object& body) {
  Attributes a;
  for (auto [key, field] : kAttributes) {
    const json::value* v = body.if_contains(key);
    if (!v || v->is_null()) continue;
    if (!v->is_int64() || v->as_int64() < 0 || v->as_int64() > UINT32_MAX) {
      return Invalid(std::string(key) + " must be a non-negative integer");
    }
    a.*field = static_cast<uint32_t>(v->as_int64());
  }
  return a;
}

// What a content request acts on: the volume's files, as the sandbox user (1000, who owns its
// top) or, to give files another owner, as root; the path; the owner and mode asked for.
struct Content {
  sandbox::SandboxFs fs;
  std::string path;
  Attributes asked;
};

Result<Content> ContentOf(Context& ctx, Attributes asked = {}) {
  auto v = ContentVolume(ctx);
  if (!v) return std::move(v).error();
  const std::optional<std::string_view> given = ctx.Query("path");
  if (!given || given->empty()) return Invalid("the path query parameter is required");
  auto path = sandbox::NormalizeSandboxPath(given->starts_with('/') ? std::string(*given)
                                                                    : "/" + std::string(*given));
  if (!path) return std::move(path).error();
  const uint32_t as = asked.owner() ? 0 : sandbox::kSandboxUserId;
  auto root = ctx.service.volumes().Root(**v);
  if (!root) return std::move(root).error();
  auto fs = sandbox::SandboxFs::Open(*root, as);
  if (!fs) return std::move(fs).error();
  return Content{std::move(*fs), std::move(*path), asked};
}

// E2B's VolumeEntryStat. A volume's ids are the sandbox's own.
json::object EntryStat(const sandbox::FileInfo& f) {
  const std::string time = FormatRfc3339(FromUnixMillis(f.mtime_ms));
  std::string_view type = "unknown";
  if (f.type == sandbox::FileType::kFile) type = "file";
  if (f.type == sandbox::FileType::kDirectory) type = "directory";
  if (f.type == sandbox::FileType::kSymlink) type = "symlink";
  json::object o{{"name", f.name}, {"type", type}, {"path", f.path}, {"size", f.size},
                 {"mode", f.mode}, {"uid", f.uid}, {"gid", f.gid},   {"atime", time},
                 {"mtime", time},  {"ctime", time}};
  if (f.type == sandbox::FileType::kSymlink) o["target"] = f.link_target;
  return o;
}

// The owner and mode asked for, given to what was just made (as root when an owner is asked:
// the other id then stays the sandbox user's).
Result<sandbox::FileInfo> Own(const Content& c, sandbox::FileInfo made) {
  const Attributes& a = c.asked;
  if (!a.owner() && !a.mode) return made;
  const auto id = [&](std::optional<uint32_t> v) {
    return a.owner() ? std::optional<uint32_t>(v.value_or(sandbox::kSandboxUserId)) : v;
  };
  return c.fs.SetAttributes(made.path, id(a.uid), id(a.gid), a.mode);
}

}  // namespace

std::optional<std::string> VolumeHolder(const ServerOptions& options, std::string_view volume_id,
                                        std::string_view token,
                                        std::optional<std::string_view> tenant) {
  if (token.empty()) return std::nullopt;
  std::optional<std::string> holder =
      AccessTokenHolder(options.api_key, TokenSubject(volume_id), token);
  // The admin's token opens any volume, as the admin's key does.
  if (!holder || *holder == kAdminHolder) return holder;
  if (!options.access || (tenant && tenant->empty())) return std::nullopt;
  if (!options.access->KeyLive(*holder, tenant.value_or(std::string_view()))) return std::nullopt;
  return holder;
}

Error VolumeUnauthorized() {
  return Error{ErrorCode::kUnauthorized,
               "unauthorized: Authorization must be Bearer <the volume's token, as "
               "Volume.create or GET /volumes/{id} answered it>, handed to a key that is not "
               "revoked"};
}

asio::awaitable<void> CreateVolume(Context& ctx) {
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  const json::value* name = body->if_contains("name");
  if (!name || !name->is_string() || !Volumes::ValidName(name->as_string())) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, std::string(Volumes::kNameRule));
  }
  auto made = co_await ctx.service.CreateVolume(std::string(name->as_string()),
                                                ctx.principal.tenant, std::nullopt);
  if (!made) co_return co_await ReplyError(ctx, made.error());
  co_await ReplyJson(ctx, http::status::created, VolumeAndToken(ctx, **made));
}

asio::awaitable<void> ListVolumes(Context& ctx) {
  json::array out;
  for (const Volume* v : ctx.service.volumes().List(ctx.principal.tenant, ctx.principal.admin())) {
    out.push_back(json::object{{"volumeID", v->id}, {"name", v->name}});
  }
  co_await ReplyJson(ctx, http::status::ok, out);
}

asio::awaitable<void> GetVolume(Context& ctx) {
  const Volume* v = FindVolume(ctx);
  if (!v) co_return co_await ReplyError(ctx, NoVolume(ctx.params.at(0)));
  co_await ReplyJson(ctx, http::status::ok, VolumeAndToken(ctx, *v));
}

asio::awaitable<void> DestroyVolume(Context& ctx) {
  const Volume* v = FindVolume(ctx);
  if (!v) co_return co_await ReplyError(ctx, NoVolume(ctx.params.at(0)));
  Result<void> deleted = co_await ctx.service.DeleteVolume(v->id);
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> VolumeListDir(Context& ctx) {
  auto c = ContentOf(ctx);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  uint32_t depth = 1;
  if (auto d = Id(ctx, "depth"); !d) {
    co_return co_await ReplyError(ctx, d.error());
  } else if (*d) {
    depth = std::max<uint32_t>(1, **d);
  }
  // Breadth first, `depth` levels, at most kListLimit entries in all.
  auto list = [&]() -> Result<json::array> {
    json::array out;
    std::deque<std::pair<std::string, uint32_t>> dirs{{c->path, 1}};
    while (!dirs.empty() && out.size() < kListLimit) {
      auto [dir, level] = dirs.front();
      dirs.pop_front();
      bool truncated = false;
      auto entries = c->fs.List(dir, kListLimit - out.size(), &truncated);
      if (!entries) {
        if (level == 1) return std::move(entries).error();
        continue;  // gone meanwhile, or not readable: listed as far as it goes
      }
      for (const auto& e : *entries) {
        out.push_back(EntryStat(e));
        if (e.type == sandbox::FileType::kDirectory && level < depth) {
          dirs.emplace_back(e.path, level + 1);
        }
      }
    }
    return out;
  };
  auto listed = co_await OffThread(ctx, std::move(list));
  if (!listed) co_return co_await ReplyError(ctx, listed.error());
  co_await ReplyJson(ctx, http::status::ok, *listed);
}

asio::awaitable<void> VolumeMakeDir(Context& ctx) {
  auto asked = QueryAttributes(ctx);
  if (!asked) co_return co_await ReplyError(ctx, asked.error());
  auto c = ContentOf(ctx, *asked);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  // force: the parents too.
  auto parents = ctx.QueryFlag("force");
  if (!parents) co_return co_await ReplyError(ctx, parents.error());
  auto make = [&]() -> Result<sandbox::FileInfo> {
    auto made = c->fs.Mkdir(c->path, c->asked.mode.value_or(0755), *parents);
    if (!made) return made;
    return Own(*c, *made);
  };
  auto made = co_await OffThread(ctx, std::move(make));
  if (!made) co_return co_await ReplyError(ctx, made.error());
  co_await ReplyJson(ctx, http::status::created, EntryStat(*made));
}

asio::awaitable<void> VolumeStat(Context& ctx) {
  auto c = ContentOf(ctx);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  auto info = co_await OffThread(ctx, [&] { return c->fs.Stat(c->path); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, EntryStat(*info));
}

asio::awaitable<void> VolumeUpdateMetadata(Context& ctx) {
  // The credential before the body.
  if (auto v = ContentVolume(ctx); !v) co_return co_await ReplyError(ctx, v.error());
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  auto asked = BodyAttributes(*body);
  if (!asked) co_return co_await ReplyError(ctx, asked.error());
  // A change of owner needs root; of the mode alone, the owner (the sandbox's user).
  auto c = ContentOf(ctx, *asked);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  auto info = co_await OffThread(
      ctx, [&] { return c->fs.SetAttributes(c->path, asked->uid, asked->gid, asked->mode); });
  if (!info) co_return co_await ReplyError(ctx, info.error());
  co_await ReplyJson(ctx, http::status::ok, EntryStat(*info));
}

asio::awaitable<void> VolumeRemove(Context& ctx) {
  auto c = ContentOf(ctx);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  Result<void> removed = co_await OffThread(ctx, [&] { return c->fs.Remove(c->path, true); });
  if (!removed) co_return co_await ReplyError(ctx, removed.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

asio::awaitable<void> VolumeReadFile(Context& ctx) {
  auto c = ContentOf(ctx);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  co_await ServeDownload(ctx, c->fs, c->path);
}

asio::awaitable<void> VolumeWriteFile(Context& ctx) {
  // An answer given before the whole body is read must close the connection.
  const bool keep_alive = ctx.req.keep_alive();
  if (ctx.body_parser && !ctx.body_parser->is_done()) ctx.req.keep_alive(false);
  auto asked = QueryAttributes(ctx);
  if (!asked) co_return co_await ReplyError(ctx, asked.error());
  auto c = ContentOf(ctx, *asked);
  if (!c) co_return co_await ReplyError(ctx, c.error());
  auto force = ctx.QueryFlag("force");
  if (!force) co_return co_await ReplyError(ctx, force.error());
  if (!*force) {
    auto existing = co_await OffThread(ctx, [&] { return c->fs.Stat(c->path); });
    if (existing) {
      co_return co_await ReplyError(ctx, ErrorCode::kConflict,
                                    c->path + " exists: write it with force to replace it");
    }
  }
  const Feed upload = [&ctx](const BodySink& sink) {
    return ReceiveBody(ctx, sink, "file upload (max_file_bytes)",
                       ctx.server.options().max_file_bytes);
  };
  auto written = co_await WriteFile(ctx, "", c->fs, c->path, c->asked.mode, true, upload);
  if (!ctx.body_parser || ctx.body_parser->is_done()) ctx.req.keep_alive(keep_alive);
  if (!written) co_return co_await ReplyError(ctx, written.error());
  auto owned = co_await OffThread(ctx, [&] { return Own(*c, written->info); });
  if (!owned) co_return co_await ReplyError(ctx, owned.error());
  co_await ReplyJson(ctx, http::status::created, EntryStat(*owned));
}

}  // namespace sandstream::api::e2b
