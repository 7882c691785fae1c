// What sandstream asks of etcd, through its v3 API's HTTP/JSON gateway (POST /v3/...): leases,
// puts under a lease, a prefix's range. Endpoints are tried in turn until one answers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "cluster/http_client.h"

namespace sandstream::cluster {

class Etcd {
 public:
  Etcd(boost::asio::any_io_executor ex, std::vector<HostPort> endpoints,
       SteadyClock::duration timeout = std::chrono::seconds(2));

  // A new lease of `ttl_seconds`; its id.
  boost::asio::awaitable<Result<int64_t>> Grant(int64_t ttl_seconds);
  // Renews `lease`; false when etcd no longer has it (it expired).
  boost::asio::awaitable<Result<bool>> KeepAlive(int64_t lease);
  // Ends `lease` and takes away every key put under it.
  boost::asio::awaitable<Result<void>> Revoke(int64_t lease);
  // Puts `key` = `value`, under `lease` unless it is 0.
  boost::asio::awaitable<Result<void>> Put(const std::string& key, const std::string& value,
                                           int64_t lease = 0);
  boost::asio::awaitable<Result<void>> Delete(const std::string& key);
  // Every key under `prefix`, with its value, in key order.
  boost::asio::awaitable<Result<std::vector<std::pair<std::string, std::string>>>> Range(
      const std::string& prefix);

 private:
  // POSTs `body` to `path` on the first endpoint that answers; the answer's JSON text.
  boost::asio::awaitable<Result<std::string>> Post(std::string path, std::string body);

  boost::asio::any_io_executor ex_;
  std::vector<HostPort> endpoints_;
  SteadyClock::duration timeout_;
  size_t next_ = 0;  // the endpoint that answered last
};

// "http://a:2379,http://b:2379" as endpoints.
Result<std::vector<HostPort>> ParseEndpoints(std::string_view list);

}  // namespace sandstream::cluster
