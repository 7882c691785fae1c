#include "cluster/catalog.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/async.h"
#include "base/log.h"
#include "image/registry.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
namespace json = boost::json;

EtcdTemplates::EtcdTemplates(asio::any_io_executor ex, Etcd& etcd, Options options)
    : ex_(ex), etcd_(etcd), options_(std::move(options)), tick_(ex) {}

std::string EtcdTemplates::Key(std::string_view name) const {
  return options_.prefix + "templates/" + std::string(name);
}

void EtcdTemplates::Stop() {
  stopping_ = true;
  tick_.cancel();
}

void EtcdTemplates::Pulled(const std::string& name, const std::string& tenant,
                           const std::string& image) {
  failed_.erase(name);
  if (name == pulling_) return;  // from the catalog: it is there
  json::object record{{"image", image}};
  record["tenant"] = tenant.empty() ? json::value(nullptr) : json::value(tenant);
  writes_.emplace_back(Key(name), json::serialize(record));
  StartDrain();
}

void EtcdTemplates::Deleted(const std::string& name) {
  // Not pulled back from a catalog read before the delete reaches etcd.
  failed_[name] = SteadyNow() + options_.retry;
  writes_.emplace_back(Key(name), std::nullopt);
  StartDrain();
}

void EtcdTemplates::StartDrain() {
  if (writing_) return;
  writing_ = true;  // now: the task starts later, and a second one would write out of order
  Spawn(ex_, Drain(), "catalog writes");
}

asio::awaitable<void> EtcdTemplates::Drain() {
  while (!writes_.empty() && !stopping_) {
    const auto [key, value] = writes_.front();
    Result<void> written = Ok{};
    if (value) {
      written = co_await etcd_.Put(key, *value);
    } else {
      written = co_await etcd_.Delete(key);
    }
    if (!written) {
      log::Warn("etcd: the cluster's template catalog is not written yet; tried again",
                {{"key", key}, {"error", written.error().message}});
      break;
    }
    writes_.pop_front();
  }
  writing_ = false;
}

asio::awaitable<void> EtcdTemplates::Run(Service& service) {
  while (!stopping_) {
    if (!writes_.empty() && !writing_) {
      writing_ = true;
      co_await Drain();
    }
    co_await PullMissing(service);
    tick_.expires_after(options_.interval);
    auto [ec] = co_await tick_.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
  }
}

asio::awaitable<void> EtcdTemplates::PullMissing(Service& service) {
  const std::string area = options_.prefix + "templates/";
  auto listing = co_await etcd_.Range(area);
  if (!listing) {
    if (!failing_) {
      log::Warn("etcd: cannot read the cluster's templates", {{"error", listing.error().message}});
    }
    failing_ = true;
    co_return;
  }
  failing_ = false;
  for (const KeyValue& kv : listing->kvs) {
    if (stopping_) co_return;
    const std::string name = kv.key.substr(area.size());
    if (service.templates().Find(name)) continue;
    if (auto f = failed_.find(name); f != failed_.end() && SteadyNow() < f->second) continue;
    boost::system::error_code ec;
    const json::value record = json::parse(kv.value, ec);
    const json::value* image =
        !ec && record.is_object() ? record.as_object().if_contains("image") : nullptr;
    const json::value* tenant =
        !ec && record.is_object() ? record.as_object().if_contains("tenant") : nullptr;
    auto reference = image && image->is_string()
                         ? image::ParseReference(image->as_string())
                         : Result<image::Reference>(Error{ErrorCode::kInvalidRequest, "no image"});
    if (!reference) {
      log::Warn("etcd: unreadable template in the cluster's catalog", {{"key", kv.key}});
      failed_[name] = SteadyNow() + options_.retry;
      continue;
    }
    std::string owner = tenant && tenant->is_string() ? std::string(tenant->as_string()) : "";
    log::Info("pulling a template the cluster has",
              {{"template", name}, {"image", reference->String()}});
    // Named, not temporaries: GCC 12 destroys a temporary twice across a co_await.
    image::Credentials anonymous;
    TemplateService::Progress quiet = [](const json::object&) {};
    pulling_ = name;
    auto made = co_await service.template_service().Pull(
        name, std::move(owner), std::move(*reference), std::move(anonymous), std::move(quiet));
    pulling_.clear();
    if (made) {
      failed_.erase(name);
    } else if (made.error().code != ErrorCode::kConflict) {
      // A conflict is a template of that name being made meanwhile: it is there either way.
      log::Warn("could not pull a template the cluster has; tried again later",
                {{"template", name}, {"error", made.error().message}});
      failed_[name] = SteadyNow() + options_.retry;
    }
  }
}

}  // namespace sandstream::cluster
