// A gateway's view of the nodes: who they are, where they answer, their load. Read from etcd
// (the records nodes keep there under a lease) or, without etcd, from a fixed list of addresses
// whose GET /healthz says the rest to the admin key; refreshed every `interval`. Nothing here is
// authoritative: a node's own answer is.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/clock.h"
#include "base/error.h"
#include "cluster/etcd.h"
#include "cluster/http_client.h"
#include "cluster/node.h"

namespace sandstream::cluster {

struct Member {
  NodeRecord record;
  HostPort address;
  bool up = false;
  std::string why_down;  // when not up
  SteadyTime seen{};     // the last time it was seen up
  int64_t pending = 0;   // placed here by this gateway since its record last changed
};

class Members {
 public:
  struct Options {
    std::vector<HostPort> nodes;  // fixed addresses (no etcd)
    Etcd* etcd = nullptr;         // else the records under `prefix`nodes/
    // The admin key, with which fixed nodes are asked: a node tells its record to it alone.
    std::string api_key;
    std::string prefix = "/sandstream/";
    SteadyClock::duration interval = std::chrono::seconds(1);
  };
  Members(boost::asio::any_io_executor ex, Options options);

  // Refreshes until Stop().
  boost::asio::awaitable<void> Run();
  void Stop() { stopping_ = true; }

  const Member* Find(std::string_view node_id) const;
  std::vector<const Member*> All() const;
  // The nodes to try for a new sandbox of `template_name` ("" for the default), in order: of
  // two picked at random among those up with room (and the template, where some node has it),
  // the less loaded; then the other; then the rest, least loaded first. An error when there is
  // none, or when membership cannot be read (etcd down).
  Result<std::vector<std::string>> Candidates(std::string_view template_name);
  // A sandbox placed on `node_id`: counted in its load until its record changes.
  void Placed(std::string_view node_id);
  // Why membership cannot be read now (etcd down), if it cannot.
  const std::optional<Error>& unavailable() const { return unavailable_; }
  // A node seen up with this record (what a refresh does for each node it reads).
  void Saw(NodeRecord record, HostPort address);

 private:
  boost::asio::awaitable<void> PollNode(HostPort address);
  boost::asio::awaitable<void> RefreshFromEtcd();

  boost::asio::any_io_executor ex_;
  Options options_;
  std::map<std::string, Member, std::less<>> members_;
  std::optional<Error> unavailable_;
  std::mt19937_64 rng_;
  bool stopping_ = false;
};

}  // namespace sandstream::cluster
