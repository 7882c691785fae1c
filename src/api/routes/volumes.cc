// Volumes: create, list, get, delete (their files: routes/files.cc). What a volume is:
// service/volumes.h.
#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "base/async.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Its record, what its filesystem holds now (statfs, on the blocking pool: a disk can stall)
// and the sandboxes that mount it.
asio::awaitable<json::array> VolumesJson(Context& ctx, const std::vector<const Volume*>& volumes) {
  std::vector<std::string> ids;
  std::vector<std::string> paths;
  for (const Volume* v : volumes) {
    ids.push_back(v->id);
    paths.push_back(ctx.service.volumes().MountPath(*v));
  }
  auto usage = [paths] {
    std::vector<Result<VolumeUsage>> out;
    out.reserve(paths.size());
    for (const auto& path : paths) out.push_back(Volumes::UsageOf(path));
    return out;
  };
  const std::vector<Result<VolumeUsage>> used =
      co_await OffThread(ctx.service.blocking_pool(), std::move(usage));
  json::array out;
  for (size_t i = 0; i < ids.size(); ++i) {
    // Looked up again: it may have gone while its filesystem was read.
    const Volume* v = ctx.service.volumes().Find("", true, ids[i]);
    if (!v) continue;
    json::object o = Volumes::Json(*v);
    o["used_bytes"] = used[i] ? json::value(used[i]->used_bytes) : json::value(nullptr);
    o["total_bytes"] = used[i] ? json::value(used[i]->total_bytes) : json::value(nullptr);
    json::array users;
    for (const auto& id : ctx.service.VolumeUsers(v->id)) users.emplace_back(id);
    o["mounted_by"] = std::move(users);
    out.push_back(std::move(o));
  }
  co_return out;
}

}  // namespace

asio::awaitable<void> CreateVolume(Context& ctx) {
  auto body = ParseBody(ctx);
  if (!body) co_return co_await ReplyError(ctx, body.error());
  for (const auto& [key, unused] : *body) {
    if (key != "name" && key != "size_mb") {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    "unknown field '" + std::string(key) + "' (name, size_mb)");
    }
  }
  const json::value* name = body->if_contains("name");
  if (!name || !name->is_string() || !Volumes::ValidName(name->as_string())) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest, std::string(Volumes::kNameRule));
  }
  std::optional<int64_t> size_mb;
  if (const json::value* s = body->if_contains("size_mb"); s && !s->is_null()) {
    if (!s->is_int64()) {
      co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                    std::string("size_mb must be an integer (MiB)"));
    }
    size_mb = s->as_int64();
  }
  auto made = co_await ctx.service.CreateVolume(std::string(name->as_string()),
                                                ctx.principal.tenant, size_mb);
  if (!made) co_return co_await ReplyError(ctx, made.error());
  const std::vector<const Volume*> one{*made};
  json::array shown = co_await VolumesJson(ctx, one);
  if (shown.empty()) {
    co_return co_await ReplyError(ctx, ErrorCode::kNotFound,
                                  std::string("the volume was deleted meanwhile"));
  }
  co_await ReplyJson(ctx, http::status::created, shown.front());
}

asio::awaitable<void> ListVolumes(Context& ctx) {
  const std::vector<const Volume*> listed =
      ctx.service.volumes().List(ctx.principal.tenant, ctx.principal.admin());
  json::object body;
  body["volumes"] = co_await VolumesJson(ctx, listed);
  co_await ReplyJson(ctx, http::status::ok, body);
}

asio::awaitable<void> GetVolume(Context& ctx) {
  const Volume* v = FindVolume(ctx);
  if (!v) co_return co_await ReplyError(ctx, VolumeNotFound(ctx));
  const std::vector<const Volume*> one{v};
  json::array shown = co_await VolumesJson(ctx, one);
  if (shown.empty()) co_return co_await ReplyError(ctx, VolumeNotFound(ctx));
  co_await ReplyJson(ctx, http::status::ok, shown.front());
}

asio::awaitable<void> DeleteVolume(Context& ctx) {
  const Volume* v = FindVolume(ctx);
  if (!v) co_return co_await ReplyError(ctx, VolumeNotFound(ctx));
  Result<void> deleted = co_await ctx.service.DeleteVolume(v->id);
  if (!deleted) co_return co_await ReplyError(ctx, deleted.error());
  co_await ReplyEmpty(ctx, http::status::no_content);
}

}  // namespace sandstream::api
