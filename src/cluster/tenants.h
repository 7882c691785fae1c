// A cluster's tenants, keys and quota usage in etcd, under `prefix`access/:
//   tenants/{name}          a tenant's record (its quotas), as a node's store would keep it
//   keys/{tenant}/{key id}  a key's record (its tenant, its hash)
//   usage/{tenant}          {"<node id>": {"sandboxes": 2, "memory_mb": 1024, ...}, ...}: what
//                           the tenant's sandboxes take on each node, absent when nothing
// Every node mirrors tenants and keys into its Access (every `interval`, and at once when a
// credential it does not know arrives), so a key made through one node opens every node. A
// node counts a new sandbox in its tenant's usage before making it, in a transaction that
// holds only if nobody changed the usage since it was read: two nodes cannot both take the
// last of a quota. What a node gives back (deleted sandboxes) is published in the background,
// and each node checks its own entries against what it holds every `reconcile`.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "cluster/etcd.h"
#include "service/access.h"

namespace sandstream::cluster {

class EtcdTenants final : public SharedTenants {
 public:
  // What each tenant takes on this node now (Service::Committed).
  using Local = std::function<std::map<std::string, TenantUsage, std::less<>>()>;
  struct Options {
    std::string prefix = "/sandstream/";
    std::string node_id;
    SteadyClock::duration interval = std::chrono::seconds(1);
    SteadyClock::duration reconcile = std::chrono::seconds(5);
  };
  EtcdTenants(boost::asio::any_io_executor ex, Etcd& etcd, Access& access, Local local,
              Options options);

  // Mirrors and reconciles until Stop().
  boost::asio::awaitable<void> Run();
  void Stop();
  // Reads tenants and keys again, unless a read has begun since this was called; at most one
  // read every 100 ms however often it is asked (credentials nobody knows cost etcd little).
  boost::asio::awaitable<void> Refresh();

  boost::asio::awaitable<Result<void>> PutTenant(std::string name, std::string record,
                                                 bool create) override;
  boost::asio::awaitable<Result<void>> DeleteTenant(std::string name) override;
  boost::asio::awaitable<Result<void>> PutKey(std::string tenant, std::string id,
                                              std::string record) override;
  boost::asio::awaitable<Result<void>> DeleteKey(std::string tenant, std::string id) override;
  boost::asio::awaitable<Result<void>> Commit(std::string tenant,
                                              std::optional<Quotas> quotas) override;
  void Changed(std::string tenant) override;
  boost::asio::awaitable<void> Reread() override;
  TenantUsage Total(std::string_view tenant) const override;

 private:
  // A tenant's usage by node.
  using Usage = std::map<std::string, TenantUsage, std::less<>>;

  std::string TenantKey(std::string_view name) const;
  std::string KeysPrefix(std::string_view tenant) const;
  std::string UsageKey(std::string_view tenant) const;
  // Reads tenants, keys and usage, and hands tenants and keys to Access.
  boost::asio::awaitable<void> Sync();
  // Publishes the tenants Changed() named, one at a time, until none is left.
  boost::asio::awaitable<void> Flush();
  // Publishes every tenant whose entry for this node differs from what it holds.
  void Reconcile();
  // Takes in the tenants and keys this node held before it joined (Access::unshared), each
  // only where etcd has none of that name: whether all are in.
  boost::asio::awaitable<bool> Adopt();
  // A write of ours to tenants or keys reached etcd at `revision`: a read from before it is not
  // mirrored. (Usage writes do not count: on a busy node every read would be.)
  void Wrote(int64_t revision);

  boost::asio::any_io_executor ex_;
  Etcd& etcd_;
  Access& access_;
  Local local_;
  Options options_;
  std::map<std::string, Usage, std::less<>> usage_;  // by tenant, as last read or written
  int64_t written_ = 0;  // the revision of our last write to tenants or keys
  int64_t applied_ = 0;  // the revision of the last read mirrored
  bool syncing_ = false;
  SteadyTime sync_began_{};
  AsyncSignal synced_;
  std::set<std::string, std::less<>> changed_;
  bool flushing_ = false;
  bool stopping_ = false;
  bool failing_ = false;  // the last read failed (logged once per episode)
  Timer tick_;
};

}  // namespace sandstream::cluster
