// What sandstream asks of etcd, through its v3 API's HTTP/JSON gateway (POST /v3/...): leases,
// puts under a lease, a prefix's range, and transactions that write only when what was read
// has not changed since. Endpoints are tried in turn until one answers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "cluster/http_client.h"

namespace sandstream::cluster {

// A key as etcd keeps it: its value and the revision that last changed it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
};

// A prefix's keys, in key order, as of `revision` (the store's revision when read).
struct Listing {
  std::vector<KeyValue> kvs;
  int64_t revision = 0;
};

// A transaction's condition: `key` was last changed at `mod_revision` (0: the key is absent);
// with `exists`, only that the key is there.
struct Condition {
  std::string key;
  int64_t mod_revision = 0;
  bool exists = false;
};

// A transaction's write: put `value`, or without one delete `key` (every key it prefixes when
// `prefix`).
struct Write {
  std::string key;
  std::optional<std::string> value;
  bool prefix = false;
};

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
  boost::asio::awaitable<Result<Listing>> Range(const std::string& prefix);
  // One key, absent from the listing when etcd has none.
  boost::asio::awaitable<Result<Listing>> Get(const std::string& key);
  // The writes, all or none, if every condition holds: the store's revision after them, or 0
  // when a condition failed (nothing was written).
  boost::asio::awaitable<Result<int64_t>> Txn(std::vector<Condition> conditions,
                                              std::vector<Write> writes);

 private:
  // POSTs `body` to `path` on the first endpoint that answers; the answer's JSON text.
  boost::asio::awaitable<Result<std::string>> Post(std::string path, std::string body);
  boost::asio::awaitable<Result<Listing>> Read(std::string body);

  boost::asio::any_io_executor ex_;
  std::vector<HostPort> endpoints_;
  SteadyClock::duration timeout_;
  size_t next_ = 0;  // the endpoint that answered last
};

// "http://a:2379,http://b:2379" as endpoints.
Result<std::vector<HostPort>> ParseEndpoints(std::string_view list);

}  // namespace sandstream::cluster
