// A node's membership: its record under NodeKey() in etcd, held by a lease it renews.
// The record is written again at every renewal, so gateways read a load at most `interval` old;
// a node that stops renewing (dead, cut off) disappears when the lease's TTL runs out.
#pragma once

#include <functional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/clock.h"
#include "cluster/etcd.h"
#include "cluster/node.h"

namespace sandstream::cluster {

class Registrar {
 public:
  // `key`: the node's (NodeKey); `record`: the node as it is now.
  Registrar(boost::asio::any_io_executor ex, Etcd& etcd, std::string key,
            std::function<NodeRecord()> record,
            SteadyClock::duration interval = std::chrono::seconds(2), int64_t ttl_seconds = 10);

  // Registers and renews until Leave().
  boost::asio::awaitable<void> Run();
  // Stops renewing and takes the record away, so gateways stop placing here at once.
  boost::asio::awaitable<void> Leave();

 private:
  boost::asio::awaitable<Result<void>> Renew();

  boost::asio::any_io_executor ex_;
  Etcd& etcd_;
  std::string key_;
  std::function<NodeRecord()> record_;
  SteadyClock::duration interval_;
  int64_t ttl_seconds_;
  int64_t lease_ = 0;
  bool leaving_ = false;
  bool failing_ = false;  // the last renewal failed (logged once per episode)
};

}  // namespace sandstream::cluster
