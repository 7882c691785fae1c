#include "cluster/etcd.h"

#include <charconv>

#include <boost/json.hpp>

#include "base/base64.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// etcd's JSON gives 64-bit numbers as strings.
int64_t Int64Field(const json::object& o, std::string_view name) {
  const json::value* v = o.if_contains(name);
  if (!v) return 0;
  if (v->is_int64()) return v->as_int64();
  if (!v->is_string()) return 0;
  int64_t out = 0;
  const json::string& s = v->as_string();
  std::from_chars(s.data(), s.data() + s.size(), out);
  return out;
}

Result<json::object> ParseObject(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) {
    return Error{ErrorCode::kBadGateway, "etcd answered something that is not a JSON object"};
  }
  return std::move(v.as_object());
}

// The key just past every key that starts with `prefix` (etcd's range_end for a prefix).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// The request bodies, built outside the coroutines (GCC 12 cannot keep a braced list of string
// literals alive across a co_await).
std::string LeaseBody(std::string_view field, int64_t value, bool as_string) {
  json::object o;
  if (as_string) {
    o[field] = std::to_string(value);
  } else {
    o[field] = value;
  }
  return json::serialize(o);
}

std::string KeyBody(const std::string& key, const std::string* range_end, const std::string* value,
                    int64_t lease) {
  json::object o;
  o["key"] = Base64(key);
  if (range_end) o["range_end"] = Base64(*range_end);
  if (value) o["value"] = Base64(*value);
  if (lease != 0) o["lease"] = std::to_string(lease);
  return json::serialize(o);
}

// The store's revision in an answer's header.
int64_t Revision(const json::object& answer) {
  const json::value* header = answer.if_contains("header");
  return header && header->is_object() ? Int64Field(header->as_object(), "revision") : 0;
}

std::string TxnBody(const std::vector<Condition>& conditions, const std::vector<Write>& writes) {
  json::array compare;
  for (const Condition& c : conditions) {
    json::object condition{{"key", Base64(c.key)}};
    if (c.exists) {
      condition["target"] = "VERSION";
      condition["result"] = "GREATER";
      condition["version"] = "0";
    } else {
      condition["target"] = "MOD";
      condition["result"] = "EQUAL";
      condition["mod_revision"] = std::to_string(c.mod_revision);
    }
    compare.push_back(std::move(condition));
  }
  json::array success;
  for (const Write& w : writes) {
    json::object op{{"key", Base64(w.key)}};
    json::object request;
    if (w.value) {
      op["value"] = Base64(*w.value);
      request["request_put"] = std::move(op);
    } else {
      if (w.prefix) op["range_end"] = Base64(PrefixEnd(w.key));
      request["request_delete_range"] = std::move(op);
    }
    success.push_back(std::move(request));
  }
  json::object body;
  body["compare"] = std::move(compare);
  body["success"] = std::move(success);
  return json::serialize(body);
}

}  // namespace

Result<std::vector<HostPort>> ParseEndpoints(std::string_view list) {
  std::vector<HostPort> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    auto hp = ParseHostPort(item);
    if (!hp) return std::move(hp).error();
    out.push_back(std::move(*hp));
  }
  return out;
}

Etcd::Etcd(asio::any_io_executor ex, std::vector<HostPort> endpoints, SteadyClock::duration timeout)
    : ex_(std::move(ex)), endpoints_(std::move(endpoints)), timeout_(timeout) {}

asio::awaitable<Result<std::string>> Etcd::Post(std::string path, std::string body) {
  if (endpoints_.empty()) co_return Error{ErrorCode::kBadGateway, "no etcd endpoint configured"};
  std::string failures;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t at = (next_ + i) % endpoints_.size();
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    auto answer = co_await Call(ex_, endpoints_[at], std::move(req), timeout_, 64u << 20);
    if (!answer) {
      if (!failures.empty()) failures += "; ";
      failures += answer.error().message;
      continue;
    }
    if (answer->result_int() != 200) {
      co_return Error{ErrorCode::kBadGateway, "etcd " + endpoints_[at].text() + " answered " +
                                                  std::to_string(answer->result_int()) + " to " +
                                                  path + ": " + answer->body().substr(0, 200)};
    }
    next_ = at;
    co_return std::move(answer->body());
  }
  co_return Error{ErrorCode::kBadGateway, "etcd unavailable: " + failures};
}

asio::awaitable<Result<int64_t>> Etcd::Grant(int64_t ttl_seconds) {
  auto text = co_await Post("/v3/lease/grant", LeaseBody("TTL", ttl_seconds, false));
  if (!text) co_return std::move(text).error();
  auto o = ParseObject(*text);
  if (!o) co_return std::move(o).error();
  const int64_t id = Int64Field(*o, "ID");
  if (id == 0) co_return Error{ErrorCode::kBadGateway, "etcd granted no lease: " + *text};
  co_return id;
}

asio::awaitable<Result<bool>> Etcd::KeepAlive(int64_t lease) {
  auto text = co_await Post("/v3/lease/keepalive", LeaseBody("ID", lease, true));
  if (!text) co_return std::move(text).error();
  auto o = ParseObject(*text);
  if (!o) co_return std::move(o).error();
  const json::value* result = o->if_contains("result");
  // A lease etcd no longer has comes back without a TTL.
  co_return result && result->is_object() && Int64Field(result->as_object(), "TTL") > 0;
}

asio::awaitable<Result<void>> Etcd::Revoke(int64_t lease) {
  auto text = co_await Post("/v3/lease/revoke", LeaseBody("ID", lease, true));
  if (!text) co_return std::move(text).error();
  co_return Ok{};
}

asio::awaitable<Result<void>> Etcd::Put(const std::string& key, const std::string& value,
                                        int64_t lease) {
  auto text = co_await Post("/v3/kv/put", KeyBody(key, nullptr, &value, lease));
  if (!text) co_return std::move(text).error();
  co_return Ok{};
}

asio::awaitable<Result<void>> Etcd::Delete(const std::string& key) {
  auto text = co_await Post("/v3/kv/deleterange", KeyBody(key, nullptr, nullptr, 0));
  if (!text) co_return std::move(text).error();
  co_return Ok{};
}

asio::awaitable<Result<Listing>> Etcd::Range(const std::string& prefix) {
  const std::string end = PrefixEnd(prefix);
  co_return co_await Read(KeyBody(prefix, &end, nullptr, 0));
}

asio::awaitable<Result<Listing>> Etcd::Get(const std::string& key) {
  co_return co_await Read(KeyBody(key, nullptr, nullptr, 0));
}

asio::awaitable<Result<Listing>> Etcd::Read(std::string body) {
  auto text = co_await Post("/v3/kv/range", std::move(body));
  if (!text) co_return std::move(text).error();
  auto o = ParseObject(*text);
  if (!o) co_return std::move(o).error();
  Listing out;
  out.revision = Revision(*o);
  const json::value* kvs = o->if_contains("kvs");
  if (!kvs || !kvs->is_array()) co_return out;
  for (const json::value& kv : kvs->as_array()) {
    if (!kv.is_object()) continue;
    const json::value* k = kv.as_object().if_contains("key");
    const json::value* v = kv.as_object().if_contains("value");
    if (!k || !k->is_string()) continue;
    auto key = DecodeBase64(k->as_string());
    auto value =
        (v && v->is_string()) ? DecodeBase64(v->as_string()) : std::optional<std::string>("");
    if (key && value) {
      out.kvs.push_back(
          {std::move(*key), std::move(*value), Int64Field(kv.as_object(), "mod_revision")});
    }
  }
  co_return out;
}

asio::awaitable<Result<int64_t>> Etcd::Txn(std::vector<Condition> conditions,
                                           std::vector<Write> writes) {
  auto text = co_await Post("/v3/kv/txn", TxnBody(conditions, writes));
  if (!text) co_return std::move(text).error();
  auto o = ParseObject(*text);
  if (!o) co_return std::move(o).error();
  const json::value* succeeded = o->if_contains("succeeded");
  if (!succeeded || !succeeded->is_bool() || !succeeded->as_bool()) co_return int64_t{0};
  co_return Revision(*o);
}

}  // namespace sandstream::cluster
