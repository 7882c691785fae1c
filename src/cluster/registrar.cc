#include "cluster/registrar.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include "base/log.h"
#include "base/timer.h"

namespace sandstream::cluster {
namespace asio = boost::asio;

Registrar::Registrar(asio::any_io_executor ex, Etcd& etcd, std::string key,
                     std::function<NodeRecord()> record, SteadyClock::duration interval,
                     int64_t ttl_seconds)
    : ex_(std::move(ex)),
      etcd_(etcd),
      key_(std::move(key)),
      record_(std::move(record)),
      interval_(interval),
      ttl_seconds_(ttl_seconds) {}

asio::awaitable<Result<void>> Registrar::Renew() {
  // Leave() may come while this waits on etcd: from then on nothing is registered again.
  if (lease_ != 0) {
    auto alive = co_await etcd_.KeepAlive(lease_);
    if (!alive) co_return std::move(alive).error();
    if (leaving_) co_return Ok{};
    if (!*alive) lease_ = 0;  // it ran out while etcd was away: a new one
  }
  if (lease_ == 0) {
    auto granted = co_await etcd_.Grant(ttl_seconds_);
    if (!granted) co_return std::move(granted).error();
    if (leaving_) {
      (void)co_await etcd_.Revoke(*granted);
      co_return Ok{};
    }
    lease_ = *granted;
  }
  co_return co_await etcd_.Put(key_, boost::json::serialize(record_().Json()), lease_);
}

asio::awaitable<void> Registrar::Run() {
  Timer tick(ex_);
  while (!leaving_) {
    auto renewed = co_await Renew();
    if (leaving_) co_return;
    if (!renewed && !failing_) {
      log::Warn("etcd: cannot renew this node's registration; retrying",
                {{"key", key_}, {"error", renewed.error().message}});
    } else if (renewed && failing_) {
      log::Info("etcd: registered again", {{"key", key_}});
    }
    failing_ = !renewed;
    tick.expires_after(interval_);
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
  }
}

asio::awaitable<void> Registrar::Leave() {
  leaving_ = true;
  Result<void> gone = Ok{};
  if (lease_ != 0) {
    gone = co_await etcd_.Revoke(lease_);
  } else {
    gone = co_await etcd_.Delete(key_);
  }
  if (!gone) {
    log::Warn("etcd: could not take this node's record away; it lapses with its lease",
              {{"key", key_}, {"error", gone.error().message}});
  }
}

}  // namespace sandstream::cluster
