// A cluster's templates in etcd, under `prefix`templates/{name}: {"image", "tenant"} for each
// template pulled from a registry without credentials on any node. Every node reads them every
// `interval` and pulls, one at a time, those it does not have (a node that joins later, one
// that was down), each from the registry it came from; a template deleted on a node leaves the
// catalog, so no node pulls it again.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/clock.h"
#include "base/timer.h"
#include "cluster/etcd.h"
#include "service/service.h"

namespace sandstream::cluster {

class EtcdTemplates final : public TemplateCatalog {
 public:
  struct Options {
    std::string prefix = "/sandstream/";
    SteadyClock::duration interval = std::chrono::seconds(5);
    // A pull that failed is not tried again before this.
    SteadyClock::duration retry = std::chrono::minutes(5);
  };
  EtcdTemplates(boost::asio::any_io_executor ex, Etcd& etcd, Options options);

  // Reads the catalog and pulls what `service` lacks, until Stop().
  boost::asio::awaitable<void> Run(Service& service);
  void Stop();

  void Pulled(const std::string& name, const std::string& tenant,
              const std::string& image) override;
  void Deleted(const std::string& name) override;

 private:
  std::string Key(std::string_view name) const;
  // Pulls, one after another, the catalog's templates `service` has not.
  boost::asio::awaitable<void> PullMissing(Service& service);

  boost::asio::any_io_executor ex_;
  Etcd& etcd_;
  Options options_;
  // Writes the queued catalog changes in order; one that fails stays first, for the next round.
  // Only one runs at a time (writing_, set by whoever starts it).
  void StartDrain();
  boost::asio::awaitable<void> Drain();

  // The catalog changes to write, in order: a put (the record) or a delete (none).
  std::deque<std::pair<std::string, std::optional<std::string>>> writes_;
  bool writing_ = false;
  std::string pulling_;  // the template this catalog pulls now (not published again)
  // By name: not pulled before then (it failed, or this node deleted it).
  std::map<std::string, SteadyTime, std::less<>> failed_;
  bool stopping_ = false;
  bool failing_ = false;  // the last read failed (logged once per episode)
  Timer tick_;
};

}  // namespace sandstream::cluster
