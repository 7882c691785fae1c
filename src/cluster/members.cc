#include "cluster/members.h"

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/async.h"
#include "base/log.h"
#include "base/timer.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {
// A fixed node that has not answered /healthz for this long is down.
constexpr auto kHealthTimeout = std::chrono::seconds(2);
}  // namespace

Members::Members(asio::any_io_executor ex, Options options)
    : ex_(std::move(ex)), options_(std::move(options)), rng_(std::random_device{}()) {}

asio::awaitable<void> Members::Run() {
  if (!options_.etcd) {
    for (const HostPort& node : options_.nodes) Spawn(ex_, PollNode(node), "node poll");
  }
  Timer tick(ex_);
  while (!stopping_) {
    if (options_.etcd) co_await RefreshFromEtcd();
    tick.expires_after(options_.interval);
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
  }
}

void Members::Saw(NodeRecord record, HostPort address) {
  Member& m = members_[record.id];
  if (!m.up && !m.record.id.empty()) log::Info("node up", {{"node", record.id}});
  // A node rewrites its record on every renewal, mostly unchanged: what this gateway placed
  // there stays counted until the record shows something new.
  if (m.record != record) m.pending = 0;
  m.record = std::move(record);
  m.address = std::move(address);
  m.up = true;
  m.why_down.clear();
  m.seen = SteadyNow();
}

asio::awaitable<void> Members::PollNode(HostPort address) {
  Timer tick(ex_);
  std::string id;  // what the node said it is, once it has
  while (!stopping_) {
    http::request<http::string_body> req{http::verb::get, "/healthz", 11};
    req.set(http::field::authorization, "Bearer " + options_.api_key);
    auto answer = co_await Call(ex_, address, std::move(req), kHealthTimeout, 1u << 20);
    std::string why;
    if (!answer) {
      why = answer.error().message;
    } else if (answer->result_int() != 200) {
      why = "GET /healthz answered " + std::to_string(answer->result_int());
    } else {
      boost::system::error_code ec;
      json::value v = json::parse(answer->body(), ec);
      const json::value* node = !ec && v.is_object() ? v.as_object().if_contains("node") : nullptr;
      // A node tells its whole record (its address among it) to the admin key alone.
      const bool whole = node && node->is_object() && node->as_object().contains("address");
      Result<NodeRecord> record = Error{ErrorCode::kInvalidRequest, "no node"};
      if (whole) record = NodeRecord::FromJson(json::serialize(*node));
      if (node && !whole) {
        why = address.text() +
              " tells this gateway no node record: the gateway's api_key is not its admin key";
      } else if (!record) {
        why = address.text() + " is not a cluster node (its /healthz names no node id)";
      } else {
        id = record->id;
        Saw(std::move(*record), address);
      }
    }
    if (!why.empty()) {
      if (Member* m = id.empty() ? nullptr : &members_[id]; m && m->up) {
        m->up = false;
        m->why_down = why;
        log::Warn("node down", {{"node", id}, {"error", why}});
      } else if (id.empty()) {
        log::Debug("node not answering", {{"address", address.text()}, {"error", why}});
      }
    }
    tick.expires_after(options_.interval);
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
  }
}

asio::awaitable<void> Members::RefreshFromEtcd() {
  auto kvs = co_await options_.etcd->Range(NodesPrefix(options_.prefix));
  if (!kvs) {
    if (!unavailable_) log::Warn("etcd unavailable", {{"error", kvs.error().message}});
    unavailable_ =
        Error{ErrorCode::kUnavailable, "membership cannot be read: " + kvs.error().message};
    co_return;
  }
  if (unavailable_) log::Info("etcd available again");
  unavailable_.reset();
  std::vector<std::string> present;
  for (auto& [key, value, revision] : kvs->kvs) {
    (void)revision;
    auto record = NodeRecord::FromJson(value);
    if (!record) {
      log::Warn("unreadable node record in etcd", {{"key", key}});
      continue;
    }
    auto address = ParseHostPort(record->address);
    if (!address) {
      log::Warn("node record with a bad address", {{"key", key}, {"address", record->address}});
      continue;
    }
    present.push_back(record->id);
    Saw(std::move(*record), std::move(*address));
  }
  for (auto& [id, m] : members_) {
    if (!m.up || std::find(present.begin(), present.end(), id) != present.end()) continue;
    m.up = false;
    m.why_down = "its registration in etcd lapsed (the node stopped refreshing it)";
    log::Warn("node down", {{"node", id}, {"error", m.why_down}});
  }
}

const Member* Members::Find(std::string_view node_id) const {
  auto it = members_.find(node_id);
  return it == members_.end() ? nullptr : &it->second;
}

std::vector<const Member*> Members::All() const {
  std::vector<const Member*> out;
  for (const auto& [id, m] : members_) out.push_back(&m);
  return out;
}

Result<std::vector<std::string>> Members::Candidates(std::string_view template_name) {
  if (unavailable_) {
    return Error{ErrorCode::kUnavailable, "cannot place a new sandbox: " + unavailable_->message};
  }
  std::vector<Member*> open;
  for (auto& [id, m] : members_) {
    if (m.up && m.record.HasRoom()) open.push_back(&m);
  }
  if (!template_name.empty()) {
    std::vector<Member*> with;
    for (Member* m : open) {
      if (m->record.HasTemplate(template_name)) with.push_back(m);
    }
    if (!with.empty()) open = std::move(with);
  }
  if (open.empty()) {
    return Error{ErrorCode::kUnavailable, members_.empty()
                                              ? "no node has joined the cluster"
                                              : "no node is up with room for a sandbox"};
  }
  const auto lighter = [](const Member* a, const Member* b) {
    return a->record.Load(a->pending) < b->record.Load(b->pending);
  };
  // Two at random, the less loaded first: both to the front.
  std::shuffle(open.begin(), open.end(), rng_);
  if (open.size() >= 2 && lighter(open[1], open[0])) std::swap(open[0], open[1]);
  if (open.size() > 2) std::sort(open.begin() + 2, open.end(), lighter);
  std::vector<std::string> out;
  for (const Member* m : open) out.push_back(m->record.id);
  return out;
}

void Members::Placed(std::string_view node_id) {
  auto it = members_.find(node_id);
  if (it != members_.end()) ++it->second.pending;
}

}  // namespace sandstream::cluster
