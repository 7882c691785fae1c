#include "service/template_service.h"

#include <filesystem>

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/log.h"
#include "net/egress.h"
#include "sandbox/runtime.h"
#include "service/contexts.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

std::vector<std::string> LayerIds(const image::Image& image) {
  std::vector<std::string> ids;
  for (const auto& layer : image.layers) ids.push_back(layer.diff_id);
  return ids;
}

// `job` as image work: Templates::BeginWork and EndWork around it, and a collection put off
// meanwhile run after it.
template <class Fn>
auto AsImageWork(Templates& templates, Fn job) {
  return [&templates, job = std::move(job)]() mutable {
    templates.BeginWork();
    auto result = job();
    if (templates.EndWork()) {
      if (auto collected = templates.Collect(); !collected) {
        log::Warn("collecting image layers failed", {{"error", collected.error().message}});
      }
    }
    return result;
  };
}

// The image store; one that cannot be opened (its directory) leaves the daemon without image
// templates, said at each import, rather than without a start.
std::unique_ptr<image::Store> OpenImages(const ServiceOptions& options) {
  auto images = image::Store::Open(options.images_dir, options.image_limits);
  if (images) return std::move(*images);
  log::Error("image store unavailable", {{"error", images.error().message}});
  return nullptr;
}

}  // namespace

TemplateService::TemplateService(asio::any_io_executor ex, const ServiceOptions& options,
                                 Store& store, const QuotaLedger& quotas)
    : ex_(std::move(ex)),
      options_(options),
      quotas_(quotas),
      templates_(options.templates_dir, OpenImages(options), store) {
  templates_.Load();
  // What an earlier daemon left half made (an import it died in) or no template names.
  image_work_.Post(ImageWork::kCollections, [this] {
    if (auto collected = templates_.Collect(); !collected) {
      log::Warn("collecting image layers failed", {{"error", collected.error().message}});
    }
  });
}

Result<void> TemplateService::CheckStopping() const {
  if (stopping_) return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  return Ok{};
}

void TemplateService::CollectSoon() {
  image_work_.Post(ImageWork::kCollections, [this] { (void)templates_.Collect(); });
}

asio::awaitable<Result<const Template*>> TemplateService::Import(std::string name,
                                                                 std::string tenant,
                                                                 UniqueFd archive,
                                                                 Progress progress) {
  // The archive is the job's: it is closed (and, unnamed, gone) when the import is done.
  auto file = std::make_shared<UniqueFd>(std::move(archive));
  ImageJob job = [file](image::Store& store, const image::Progress& report) {
    return store.ImportArchive(file->get(), report);
  };
  co_return co_await Make(std::move(name), std::move(tenant), "archive", std::move(job),
                          std::move(progress));
}

asio::awaitable<Result<const Template*>> TemplateService::Pull(std::string name, std::string tenant,
                                                               image::Reference image,
                                                               image::Credentials credentials,
                                                               Progress progress) {
  image::RegistryPolicy policy;
  policy.allowed = options_.registry_allow;
  policy.plain_http = options_.registry_plain_http;
  policy.private_hosts = options_.registry_private_hosts;
  policy.stop = &stopping_;
  policy.timeout_seconds = options_.pull_timeout_seconds;
  const std::string source = image.String();
  // A private image's credentials are not kept: other nodes cannot pull it on their own.
  const bool shareable = credentials.username.empty() && credentials.password.empty();
  // Made on the image thread: libcurl's first use sets up TLS, which is no work for the loop.
  ImageJob job = [image = std::move(image), credentials = std::move(credentials),
                  policy = std::move(policy)](image::Store& store, const image::Progress& report) {
    // The node's addresses as they are now (read here, off the loop): a registry whose name
    // resolves to one of them would reach the node's own services.
    image::RegistryPolicy guarded = policy;
    guarded.public_address = [own = net::HostOwnAddresses()](std::string_view ip) {
      return net::IsRegistryAddress(ip, own);
    };
    image::Registry registry(image, credentials, guarded);
    return store.Pull(registry, report);
  };
  const std::string made_name = name, made_tenant = tenant;
  Result<const Template*> made = co_await Make(std::move(name), std::move(tenant), source,
                                               std::move(job), std::move(progress));
  if (made && shareable && options_.catalog) {
    options_.catalog->Pulled(made_name, made_tenant, source);
  }
  co_return made;
}

asio::awaitable<Result<const Template*>> TemplateService::Make(std::string name, std::string tenant,
                                                               std::string source, ImageJob make,
                                                               Progress progress) {
  if (auto stopping = CheckStopping(); !stopping) co_return std::move(stopping).error();
  if (auto room = quotas_.CheckTemplateStorage(templates_, tenant, 0); !room) {
    co_return std::move(room).error();
  }
  if (auto reserved = templates_.Reserve(name, tenant); !reserved) {
    co_return std::move(reserved).error();
  }
  // The store reports from its thread; the caller hears it on the event loop, in order.
  image::Progress report = [ex = ex_, progress](std::string_view step, std::string_view digest,
                                                uint64_t done, uint64_t total) {
    json::object o{{"step", step}, {"digest", digest}, {"done", done}, {"total", total}};
    asio::post(ex, [progress, o = std::move(o)]() mutable { progress(std::move(o)); });
  };
  struct Imported {
    Result<image::Image> image;
    Result<std::pair<uint32_t, uint32_t>> user;
  };
  auto job = [&templates = templates_, make = std::move(make), report]() -> Imported {
    image::Store& images = templates.images();
    Imported out{make(images, report), std::pair<uint32_t, uint32_t>{0, 0}};
    if (!out.image) return out;
    std::vector<std::string> dirs;
    for (const auto& layer : out.image->layers) dirs.push_back(images.LayerPath(layer.diff_id));
    templates.Pin(LayerIds(*out.image));
    out.user = ResolveUser(dirs, out.image->config.user);
    return out;
  };
  Imported imported =
      co_await OffThread(image_work_, tenant, AsImageWork(templates_, std::move(job)));
  // Pinned until the template names them (or is given up): a collection meanwhile keeps them.
  const std::vector<std::string> layers =
      imported.image ? LayerIds(*imported.image) : std::vector<std::string>{};
  uint64_t size_bytes = 0;
  if (imported.image) {
    for (const auto& layer : imported.image->layers) size_bytes += layer.size;
  }
  Result<void> room = imported.image && imported.user
                          ? quotas_.CheckTemplateStorage(templates_, tenant, size_bytes)
                          : Result<void>(Ok{});
  if (!imported.image || !imported.user || !room) {
    templates_.Abandon(name);
    templates_.Unpin(layers);
    // Layers unpacked before a later step failed belong to no template: collected now.
    CollectSoon();
    co_return !imported.image ? imported.image.error()
                              : (!imported.user ? imported.user.error() : room.error());
  }
  const image::Image& im = *imported.image;
  Template t;
  t.name = name;
  t.kind = "image";
  t.tenant = tenant;
  t.layers = layers;
  t.size_bytes = size_bytes;
  t.env = im.config.env;
  t.working_dir = im.config.working_dir;
  t.user = im.config.user;
  std::tie(t.uid, t.gid) = *imported.user;
  t.source = source;
  t.digest = im.manifest_digest;
  t.config_digest = im.config_digest;
  t.tags = im.repo_tags;
  t.created_at = SystemNow();
  Result<const Template*> committed = templates_.Commit(std::move(t));
  templates_.Unpin(layers);
  if (committed) {
    log::Info("template imported", {{"template", name}, {"digest", im.manifest_digest}});
  }
  co_return committed;
}

asio::awaitable<Result<const Template*>> TemplateService::Snapshot(std::string name,
                                                                   SnapshotSource from) {
  if (auto stopping = CheckStopping(); !stopping) co_return std::move(stopping).error();
  const Template* parent = templates_.Find(from.template_name);
  if (!parent) {
    co_return Error{ErrorCode::kConflict, "snapshot: sandbox " + from.sandbox_id +
                                              " is made from template '" + from.template_name +
                                              "', which is gone: its layers cannot be named"};
  }
  if (from.upper.empty() || !from.base_id) {
    co_return Error{ErrorCode::kConflict, "snapshot: sandbox " + from.sandbox_id +
                                              " has no writable layer the daemon can read"};
  }
  // Each snapshot adds a layer; a sandbox takes at most kMaxTemplateLayers.
  if (parent->layers.size() + (parent->kind == "directory" || parent->root == "directory") + 1 >
      sandbox::kMaxTemplateLayers) {
    co_return Error{ErrorCode::kConflict, "snapshot: template '" + from.template_name + "' has " +
                                              std::to_string(parent->layers.size()) +
                                              " layers; a snapshot of it would pass the " +
                                              std::to_string(sandbox::kMaxTemplateLayers) +
                                              " a sandbox can mount"};
  }
  const std::string& tenant = from.tenant;
  if (auto room = quotas_.CheckTemplateStorage(templates_, tenant, 0); !room) {
    co_return std::move(room).error();
  }
  if (auto reserved = templates_.Reserve(name, tenant); !reserved) {
    co_return std::move(reserved).error();
  }
  // What the snapshot's layer goes over: its parent's layers, and under them its parent's root.
  Template t = *parent;
  if (parent->kind == "base") t.root = "base";
  // The code-interpreter's python link is in the layer; the PATH that finds it goes along.
  if (parent->kind == "base" && parent->name == "code-interpreter") {
    t.env.push_back("PATH=" + CodeInterpreterPath(options_));
  }
  if (parent->kind == "directory") t.root = "directory";
  t.checkpoint.clear();  // of its files only
  auto job = [&templates = templates_, upper = from.upper, base = *from.base_id,
              disk_bytes = from.disk_bytes]() -> Result<image::LayerRef> {
    auto layer = templates.images().LayerFromDirectory(upper, base, 65536, disk_bytes);
    if (layer) templates.Pin({layer->diff_id});
    return layer;
  };
  Result<image::LayerRef> layer =
      co_await OffThread(image_work_, tenant, AsImageWork(templates_, std::move(job)));
  if (!layer) {
    templates_.Abandon(name);
    co_return Error{layer.error().code, "snapshot: " + layer.error().message};
  }
  t.size_bytes += layer->size;
  if (auto room = quotas_.CheckTemplateStorage(templates_, tenant, t.size_bytes); !room) {
    templates_.Abandon(name);
    templates_.Unpin({layer->diff_id});
    CollectSoon();
    co_return std::move(room).error();
  }
  t.name = name;
  t.kind = "snapshot";
  t.tenant = tenant;
  t.layers.push_back(layer->diff_id);
  t.source = from.sandbox_id;
  t.created_at = SystemNow();
  Result<const Template*> committed = templates_.Commit(std::move(t));
  templates_.Unpin({layer->diff_id});
  if (committed) {
    log::Info("sandbox snapshotted", {{"sandbox", from.sandbox_id}, {"template", name}});
  }
  co_return committed;
}

Result<void> TemplateService::ReserveSnapshot(const std::string& name, const std::string& tenant) {
  if (auto stopping = CheckStopping(); !stopping) return stopping;
  if (auto room = quotas_.CheckTemplateStorage(templates_, tenant, 0); !room) return room;
  return templates_.Reserve(name, tenant);
}

void TemplateService::AbandonSnapshot(const std::string& name) {
  templates_.Abandon(name);
}

Result<const Template*> TemplateService::CommitMemorySnapshot(const std::string& name,
                                                              const SnapshotSource& from,
                                                              const std::string& dir) {
  const Template* parent = templates_.Find(from.template_name);
  if (!parent) {
    templates_.Abandon(name);
    return Error{ErrorCode::kConflict, "snapshot: sandbox " + from.sandbox_id +
                                           " is made from template '" + from.template_name +
                                           "', which is gone"};
  }
  // Its images, a few files in a directory of the daemon's own.
  uint64_t size_bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec)) size_bytes += entry.file_size(ec);
  }
  if (auto room = quotas_.CheckTemplateStorage(templates_, from.tenant, size_bytes); !room) {
    templates_.Abandon(name);
    return room.error();
  }
  // What its sandboxes start as: the source's root (the host's system; memory snapshots are of
  // such sandboxes only) with the source's template's env and user.
  Template t = *parent;
  if (parent->kind == "base" && parent->name == "code-interpreter") {
    t.env.push_back("PATH=" + CodeInterpreterPath(options_));
  }
  t.name = name;
  t.kind = "snapshot";
  t.tenant = from.tenant;
  t.root = "base";
  t.layers.clear();
  t.directory.clear();
  t.checkpoint = dir;
  t.size_bytes = size_bytes;
  t.source = from.sandbox_id;
  t.created_at = SystemNow();
  Result<const Template*> committed = templates_.Commit(std::move(t));
  if (committed) {
    log::Info("sandbox snapshotted with its memory",
              {{"sandbox", from.sandbox_id}, {"template", name}});
  }
  return committed;
}

asio::awaitable<Result<void>> TemplateService::Delete(std::string name, std::string used_by) {
  const Template* t = templates_.Find(name);
  if (!t) co_return Error{ErrorCode::kNotFound, "no template '" + name + "'"};
  if (t->kind == "base" || t->kind == "directory") {
    co_return Error{ErrorCode::kConflict,
                    "template '" + name + "' is " +
                        (t->kind == "base" ? "built in" : "a directory of templates_dir") +
                        ": it cannot be deleted through the API"};
  }
  if (!t->ready) co_return Error{ErrorCode::kConflict, "template '" + name + "' is being made"};
  if (!used_by.empty()) {
    co_return Error{ErrorCode::kConflict, "template '" + name + "' is in use by sandbox " +
                                              used_by + "; delete it first"};
  }
  const std::string checkpoint = t->checkpoint;
  if (auto removed = templates_.Remove(name); !removed) co_return std::move(removed).error();
  if (!checkpoint.empty()) {
    auto remove = [checkpoint] {
      std::error_code ec;
      std::filesystem::remove_all(checkpoint, ec);
      return Result<void>(Ok{});
    };
    (void)co_await OffThread(image_work_, ImageWork::kCollections, std::move(remove));
  }
  // Its layers go once no other template names them, off the event loop.
  Result<void> collected = co_await OffThread(image_work_, ImageWork::kCollections,
                                              [this] { return templates_.Collect(); });
  if (!collected) {
    log::Warn("collecting template layers failed", {{"error", collected.error().message}});
  }
  log::Info("template deleted", {{"template", name}});
  if (options_.catalog) options_.catalog->Deleted(name);
  co_return Ok{};
}

}  // namespace sandstream
