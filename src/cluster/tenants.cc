#include "cluster/tenants.h"

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/log.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// How often a usage transaction is tried when other nodes keep changing the usage in between.
constexpr int kCommitAttempts = 16;
// The least time between two reads that Refresh starts.
constexpr auto kRefreshSpacing = std::chrono::milliseconds(100);

// The part of TenantUsage a cluster counts: what a sandbox commits for its whole life.
struct Counted {
  const char* name;
  int64_t TenantUsage::*field;
};
constexpr Counted kCounted[] = {{"sandboxes", &TenantUsage::sandboxes},
                                {"memory_mb", &TenantUsage::memory_mb},
                                {"cpu_percent", &TenantUsage::cpu_percent},
                                {"disk_mb", &TenantUsage::disk_mb}};

bool SameCounts(const TenantUsage& a, const TenantUsage& b) {
  for (const auto& c : kCounted) {
    if (a.*(c.field) != b.*(c.field)) return false;
  }
  return true;
}

bool Nothing(const TenantUsage& u) {
  return SameCounts(u, TenantUsage{});
}

// A usage document ({"node": {"sandboxes": n, ...}}) as a map; what cannot be read counts as
// nothing (logged).
std::map<std::string, TenantUsage, std::less<>> ParseUsage(std::string_view text,
                                                           std::string_view key) {
  std::map<std::string, TenantUsage, std::less<>> out;
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) {
    log::Warn("etcd: unreadable tenant usage", {{"key", std::string(key)}});
    return out;
  }
  for (const auto& [node, entry] : v.as_object()) {
    if (!entry.is_object()) continue;
    TenantUsage u;
    for (const auto& c : kCounted) {
      const json::value* n = entry.as_object().if_contains(c.name);
      if (n && n->is_int64()) u.*(c.field) = n->as_int64();
    }
    out[std::string(node)] = u;
  }
  return out;
}

std::string UsageText(const std::map<std::string, TenantUsage, std::less<>>& usage) {
  json::object o;
  for (const auto& [node, u] : usage) {
    json::object entry;
    for (const auto& c : kCounted) entry[c.name] = u.*(c.field);
    o[node] = std::move(entry);
  }
  return json::serialize(o);
}

// etcd could not be asked: what the caller could not do, and why.
Error Unavailable(std::string_view what, const Error& why) {
  return Error{ErrorCode::kUnavailable, std::string(what) + ": " + why.message};
}

}  // namespace

EtcdTenants::EtcdTenants(asio::any_io_executor ex, Etcd& etcd, Access& access, Local local,
                         Options options)
    : ex_(ex),
      etcd_(etcd),
      access_(access),
      local_(std::move(local)),
      options_(std::move(options)),
      synced_(ex),
      tick_(ex) {}

std::string EtcdTenants::TenantKey(std::string_view name) const {
  return options_.prefix + "access/tenants/" + std::string(name);
}

std::string EtcdTenants::KeysPrefix(std::string_view tenant) const {
  return options_.prefix + "access/keys/" + std::string(tenant) + "/";
}

std::string EtcdTenants::UsageKey(std::string_view tenant) const {
  return options_.prefix + "access/usage/" + std::string(tenant);
}

void EtcdTenants::Wrote(int64_t revision) {
  written_ = std::max(written_, revision);
}

void EtcdTenants::Stop() {
  stopping_ = true;
  tick_.cancel();
}

asio::awaitable<void> EtcdTenants::Run() {
  SteadyTime reconciled = SteadyNow();
  bool first = true;
  bool adopted = false;
  while (!stopping_) {
    if (!adopted) adopted = co_await Adopt();
    if (syncing_) {
      co_await synced_.Wait();  // a Refresh's read: the same
    } else {
      co_await Sync();
    }
    if (!failing_ && (first || SteadyNow() - reconciled >= options_.reconcile)) {
      Reconcile();
      reconciled = SteadyNow();
      first = false;
    }
    tick_.expires_after(options_.interval);
    auto [ec] = co_await tick_.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
  }
}

asio::awaitable<bool> EtcdTenants::Adopt() {
  // Tenants first: a key goes in only under its tenant.
  std::vector<Access::Record> records = access_.unshared();
  if (records.empty()) co_return true;
  std::stable_partition(records.begin(), records.end(),
                        [](const Access::Record& r) { return r.kind == "tenant"; });
  int64_t added = 0, kept = 0;
  for (const Access::Record& r : records) {
    std::vector<Condition> conditions;
    std::string key;
    if (r.kind == "tenant") {
      key = TenantKey(r.id);
      conditions.push_back({key, 0});
    } else {
      boost::system::error_code ec;
      const json::value v = json::parse(r.text, ec);
      const json::value* tenant =
          !ec && v.is_object() ? v.as_object().if_contains("tenant") : nullptr;
      if (!tenant || !tenant->is_string() || !Access::ValidTenantName(tenant->as_string())) {
        access_.Adopted(r);  // a key of no tenant opened nothing
        continue;
      }
      key = KeysPrefix(tenant->as_string()) + r.id;
      conditions.push_back({key, 0});
      conditions.push_back({TenantKey(tenant->as_string()), 0, true});
    }
    std::vector<Write> writes{{key, r.text}};
    auto done = co_await etcd_.Txn(std::move(conditions), std::move(writes));
    if (!done) co_return false;  // again on the next round
    if (*done > 0) {
      Wrote(*done);
      ++added;
    } else {
      ++kept;  // the cluster has one of that name already (or the key's tenant is gone)
    }
    access_.Adopted(r);
  }
  log::Info("etcd: the tenants and keys this node held before it joined are the cluster's now",
            {{"added", std::to_string(added)},
             {"not_added_as_the_cluster_has_that_name", std::to_string(kept)}});
  co_return true;
}

asio::awaitable<void> EtcdTenants::Refresh() {
  const SteadyTime asked = SteadyNow();
  Timer spacing(ex_);
  for (;;) {
    if (syncing_) {
      co_await synced_.Wait();
      continue;
    }
    if (sync_began_ >= asked) co_return;  // a read that began since, done: as fresh as asked
    const SteadyTime next = sync_began_ + kRefreshSpacing;
    if (next <= SteadyNow()) break;
    spacing.expires_at(next);
    auto [ec] = co_await spacing.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
  }
  co_await Sync();
}

asio::awaitable<void> EtcdTenants::Reread() {
  const SteadyTime asked = SteadyNow();
  while (syncing_) co_await synced_.Wait();
  if (sync_began_ < asked) co_await Sync();
}

asio::awaitable<void> EtcdTenants::Sync() {
  syncing_ = true;
  sync_began_ = SteadyNow();
  const std::string area = options_.prefix + "access/";
  auto listing = co_await etcd_.Range(area);
  syncing_ = false;
  synced_.Notify();
  if (!listing) {
    if (!failing_) {
      log::Warn("etcd: cannot read tenants and keys; keeping the last ones read",
                {{"error", listing.error().message}});
    }
    failing_ = true;
    co_return;
  }
  if (failing_) log::Info("etcd: tenants and keys read again");
  failing_ = false;
  // A read from before a write of ours to tenants or keys would take that write back, and one
  // older than a read applied already would bring back what that one took away.
  if (listing->revision < written_ || listing->revision < applied_) co_return;
  applied_ = listing->revision;
  std::vector<Access::Record> records;
  std::map<std::string, Usage, std::less<>> usage;
  for (const KeyValue& kv : listing->kvs) {
    const std::string_view rest = std::string_view(kv.key).substr(area.size());
    if (rest.starts_with("tenants/")) {
      records.push_back({"tenant", std::string(rest.substr(8)), kv.value});
    } else if (rest.starts_with("keys/")) {
      const size_t slash = rest.rfind('/');
      records.push_back({"key", std::string(rest.substr(slash + 1)), kv.value});
    } else if (rest.starts_with("usage/")) {
      usage[std::string(rest.substr(6))] = ParseUsage(kv.value, kv.key);
    }
  }
  access_.Replace(records);
  usage_ = std::move(usage);
}

asio::awaitable<Result<void>> EtcdTenants::PutTenant(std::string name, std::string record,
                                                     bool create) {
  const std::string key = TenantKey(name);
  for (int attempt = 0; attempt < kCommitAttempts; ++attempt) {
    int64_t was = 0;  // create: only where there is none
    if (!create) {
      auto got = co_await etcd_.Get(key);
      if (!got) co_return Unavailable("tenant '" + name + "' cannot be changed", got.error());
      if (got->kvs.empty()) co_return Error{ErrorCode::kNotFound, "no tenant '" + name + "'"};
      was = got->kvs.front().mod_revision;
    }
    std::vector<Condition> conditions{{key, was}};
    std::vector<Write> writes{{key, record}};
    auto done = co_await etcd_.Txn(std::move(conditions), std::move(writes));
    if (!done) co_return Unavailable("tenant '" + name + "' cannot be kept", done.error());
    if (*done > 0) {
      Wrote(*done);
      co_return Ok{};
    }
    if (create) co_return Error{ErrorCode::kConflict, "tenant '" + name + "' exists already"};
  }
  co_return Error{ErrorCode::kConflict, "tenant '" + name + "' kept changing: try again"};
}

asio::awaitable<Result<void>> EtcdTenants::DeleteTenant(std::string name) {
  const std::string usage_key = UsageKey(name);
  auto got = co_await etcd_.Get(usage_key);
  if (!got) co_return Unavailable("tenant '" + name + "' cannot be deleted", got.error());
  int64_t was = 0;
  if (!got->kvs.empty()) {
    const KeyValue& kv = got->kvs.front();
    was = kv.mod_revision;
    int64_t sandboxes = 0;
    std::string nodes;
    for (const auto& [node, u] : ParseUsage(kv.value, kv.key)) {
      if (u.sandboxes == 0) continue;
      sandboxes += u.sandboxes;
      nodes += (nodes.empty() ? "" : ", ") + node;
    }
    if (sandboxes > 0) {
      co_return Error{ErrorCode::kConflict, "tenant '" + name + "' has " +
                                                std::to_string(sandboxes) + " sandbox(es) (on " +
                                                nodes + "): delete them first"};
    }
  }
  // Only if no sandbox was counted in between.
  std::vector<Condition> conditions{{usage_key, was}};
  std::vector<Write> writes{{TenantKey(name), std::nullopt},
                            {KeysPrefix(name), std::nullopt, true},
                            {usage_key, std::nullopt}};
  auto done = co_await etcd_.Txn(std::move(conditions), std::move(writes));
  if (!done) co_return Unavailable("tenant '" + name + "' cannot be deleted", done.error());
  if (*done == 0) {
    co_return Error{ErrorCode::kConflict,
                    "tenant '" + name + "' had a sandbox made meanwhile: delete it first"};
  }
  Wrote(*done);
  usage_.erase(name);
  co_return Ok{};
}

asio::awaitable<Result<void>> EtcdTenants::PutKey(std::string tenant, std::string id,
                                                  std::string record) {
  // Only while the tenant is there.
  std::vector<Condition> conditions{{TenantKey(tenant), 0, true}};
  std::vector<Write> writes{{KeysPrefix(tenant) + id, record}};
  auto done = co_await etcd_.Txn(std::move(conditions), std::move(writes));
  if (!done) co_return Unavailable("a key cannot be made", done.error());
  if (*done == 0) co_return Error{ErrorCode::kNotFound, "no tenant '" + tenant + "'"};
  Wrote(*done);
  co_return Ok{};
}

asio::awaitable<Result<void>> EtcdTenants::DeleteKey(std::string tenant, std::string id) {
  const std::string key = KeysPrefix(tenant) + id;
  auto got = co_await etcd_.Get(key);
  if (!got) co_return Unavailable("key " + id + " cannot be revoked", got.error());
  if (got->kvs.empty()) {
    co_return Error{ErrorCode::kNotFound, "no key '" + id + "' of tenant '" + tenant + "'"};
  }
  std::vector<Condition> conditions{{key, got->kvs.front().mod_revision}};
  std::vector<Write> writes{{key, std::nullopt}};
  auto done = co_await etcd_.Txn(std::move(conditions), std::move(writes));
  if (!done) co_return Unavailable("key " + id + " cannot be revoked", done.error());
  if (*done > 0) Wrote(*done);
  co_return Ok{};  // or revoked by another node meanwhile: gone either way
}

asio::awaitable<Result<void>> EtcdTenants::Commit(std::string tenant,
                                                  std::optional<Quotas> quotas) {
  const std::string key = UsageKey(tenant);
  for (int attempt = 0; attempt < kCommitAttempts; ++attempt) {
    auto got = co_await etcd_.Get(key);
    if (!got) {
      co_return Unavailable("tenant '" + tenant + "''s quotas cannot be counted", got.error());
    }
    int64_t was = 0;
    Usage usage;
    if (!got->kvs.empty()) {
      was = got->kvs.front().mod_revision;
      usage = ParseUsage(got->kvs.front().value, key);
    }
    // What this node holds, read now: after the read above, so a change made since is in it.
    const auto local = local_();
    const auto held = local.find(tenant);
    const TenantUsage mine = held == local.end() ? TenantUsage{} : held->second;
    if (quotas) {
      TenantUsage total = mine;
      for (const auto& [node, u] : usage) {
        if (node == options_.node_id) continue;
        for (const auto& c : kCounted) total.*(c.field) += u.*(c.field);
      }
      if (auto over = PastCreateQuota(tenant, *quotas, total, ", over every node")) {
        co_return std::move(*over);
      }
    }
    const auto entry = usage.find(options_.node_id);
    // A create is always written (with the tenant's being there as a condition), even when a
    // background publish has counted it already.
    if (!quotas && (entry != usage.end() ? SameCounts(entry->second, mine) : Nothing(mine))) {
      usage_[tenant] = std::move(usage);
      co_return Ok{};
    }
    if (Nothing(mine)) {
      usage.erase(options_.node_id);
    } else {
      usage[options_.node_id] = mine;
    }
    std::vector<Condition> conditions{{key, was}};
    // A new sandbox only while its tenant is there (deleted meanwhile through another node?).
    if (quotas) conditions.push_back({TenantKey(tenant), 0, true});
    std::vector<Write> writes;
    writes.push_back(usage.empty() ? Write{key, std::nullopt} : Write{key, UsageText(usage)});
    auto done = co_await etcd_.Txn(std::move(conditions), std::move(writes));
    if (!done) {
      co_return Unavailable("tenant '" + tenant + "''s quotas cannot be counted", done.error());
    }
    if (*done > 0) {
      usage_[tenant] = std::move(usage);
      co_return Ok{};
    }
    // Another node counted in between, or the tenant is gone.
    if (quotas) {
      auto there = co_await etcd_.Get(TenantKey(tenant));
      if (there && there->kvs.empty()) {
        co_return Error{ErrorCode::kNotFound, "no tenant '" + tenant + "'"};
      }
    }
  }
  co_return Error{ErrorCode::kUnavailable,
                  "tenant '" + tenant + "''s usage kept changing on other nodes: try again"};
}

void EtcdTenants::Changed(std::string tenant) {
  if (stopping_) return;  // the daemon is ending: the next start publishes what it holds
  changed_.insert(std::move(tenant));
  if (flushing_) return;
  flushing_ = true;
  Spawn(ex_, Flush(), "publishing tenant usage");
}

asio::awaitable<void> EtcdTenants::Flush() {
  while (!changed_.empty() && !stopping_) {
    const std::string tenant = *changed_.begin();
    changed_.erase(changed_.begin());
    auto published = co_await Commit(tenant, std::nullopt);
    if (!published) {
      // Reconcile publishes it once etcd answers again.
      log::Warn("etcd: tenant usage not published; retried later",
                {{"tenant", tenant}, {"error", published.error().message}});
    }
  }
  flushing_ = false;  // here, not when the task's end is reported: a Changed() in between
}

void EtcdTenants::Reconcile() {
  const auto local = local_();
  std::vector<std::string> stale;
  for (const auto& [tenant, mine] : local) {
    const auto doc = usage_.find(tenant);
    const TenantUsage* entry = nullptr;
    if (doc != usage_.end()) {
      if (auto e = doc->second.find(options_.node_id); e != doc->second.end()) entry = &e->second;
    }
    if (!entry || !SameCounts(*entry, mine)) stale.push_back(tenant);
  }
  for (const auto& [tenant, doc] : usage_) {
    if (doc.contains(options_.node_id) && !local.contains(tenant)) stale.push_back(tenant);
  }
  for (auto& tenant : stale) Changed(std::move(tenant));
}

TenantUsage EtcdTenants::Total(std::string_view tenant) const {
  TenantUsage total;
  const auto doc = usage_.find(tenant);
  if (doc == usage_.end()) return total;
  for (const auto& [node, u] : doc->second) {
    for (const auto& c : kCounted) total.*(c.field) += u.*(c.field);
  }
  return total;
}

}  // namespace sandstream::cluster
