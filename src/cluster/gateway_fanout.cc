// What the gateway asks of every node up at once: calls whose answers it merges (CallEvery,
// List, Merged), and a template change on every node (Everywhere), with an image archive's body
// sent to each as it arrives and every node's pull progress merged into one event stream.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>

#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "base/sse_parser.h"
#include "base/timer.h"
#include "cluster/gateway.h"
#include "cluster/gateway_http.h"
#include "http/headers.h"
#include "http/relay.h"

namespace sandstream::cluster {

namespace {

// A node's progress event is a line of JSON: one larger than this ends that node's stream.
constexpr size_t kMaxEventBytes = 1u << 20;

}  // namespace

asio::awaitable<std::vector<Gateway::NodeAnswer>> Gateway::CallEvery(
    http::request<http::string_body> call, SteadyClock::duration timeout) {
  std::vector<NodeAnswer> answers;
  std::vector<HostPort> addresses;
  for (const Member* m : members_.All()) {
    if (!m->up) continue;
    answers.push_back({m->record.id});
    addresses.push_back(m->address);
  }
  TaskGroup calls(ex_);
  for (size_t i = 0; i < answers.size(); ++i) {
    calls.Spawn(
        [](NodeAnswer& into, asio::any_io_executor ex, HostPort to,
           http::request<http::string_body> request, SteadyClock::duration within,
           SteadyClock::duration connect_within) -> asio::awaitable<void> {
          into.answer =
              co_await Call(ex, to, std::move(request), within, 64u << 20, connect_within);
        }(answers[i], ex_, addresses[i], call, timeout, options_.connect_timeout),
        "node call");
  }
  co_await calls.Join();
  co_return answers;
}

asio::awaitable<void> Gateway::List(beast::tcp_stream& client, const http::request_header<>& req,
                                    const GatewayRoute& route) {
  const std::string peer = PeerAddress(client.socket());
  std::vector<std::string> unreachable;
  for (const Member* m : members_.All()) {
    if (!m->up) unreachable.push_back(m->record.id);
  }
  // Named: GCC 12 destroys a temporary that lives across a co_await twice.
  http::request<http::string_body> call = NodeRequest(req, std::string(), peer);
  std::vector<NodeAnswer> parts = co_await CallEvery(std::move(call), kListTimeout);
  const bool templates = route.kind == GatewayRoute::kTemplates;
  const char* field = templates                              ? "templates"
                      : route.kind == GatewayRoute::kVolumes ? "volumes"
                                                             : "sandboxes";
  std::set<std::string, std::less<>> named;  // templates already in the list
  json::array merged;
  for (NodeAnswer& part : parts) {
    if (!part.answer) {
      unreachable.push_back(part.node);
      continue;
    }
    auto& answer = *part.answer;
    // A refusal (the credential) is every node's: the first one is the answer.
    if (answer.result_int() != 200) {
      co_return co_await Answer(client, req.version(), answer.result(), std::move(answer.body()),
                                &answer.base());
    }
    boost::system::error_code ec;
    json::value body = json::parse(answer.body(), ec);
    json::array* items = nullptr;
    if (!ec && route.e2b && body.is_array()) items = &body.as_array();
    if (!ec && !route.e2b && body.is_object()) {
      if (json::value* s = body.as_object().if_contains(field); s && s->is_array()) {
        items = &s->as_array();
      }
    }
    if (!items) {
      unreachable.push_back(part.node);
      continue;
    }
    for (json::value& item : *items) {
      // A template every node has is listed once.
      if (templates && item.is_object()) {
        const json::value* name = item.as_object().if_contains("name");
        if (name && name->is_string() && !named.emplace(name->as_string()).second) continue;
      }
      merged.push_back(std::move(item));
    }
  }
  std::sort(unreachable.begin(), unreachable.end());
  http::response<http::string_body> res{http::status::ok, req.version()};
  res.set(http::field::server, "sandstreamd");
  res.set(http::field::content_type, "application/json");
  std::string missing;
  for (const std::string& node : unreachable) missing += (missing.empty() ? "" : ",") + node;
  // Sandboxes on a node that cannot be reached are not in the list: the answer says so.
  if (!missing.empty()) res.set("X-Sandstream-Unreachable-Nodes", missing);
  if (route.e2b) {
    res.body() = json::serialize(merged);
  } else {
    json::array nodes;
    for (const std::string& node : unreachable) nodes.emplace_back(node);
    json::object out;
    out[field] = std::move(merged);
    out["unreachable_nodes"] = std::move(nodes);
    res.body() = json::serialize(out);
  }
  co_await Answer(client, req.version(), http::status::ok, std::move(res.body()), &res.base());
}

// One node's part of a request the gateway sends to every node up.
struct Leg {
  std::string node;
  std::unique_ptr<NodeCall> call;
  std::string head = "";         // the request's head as this node gets it
  std::string write_error = "";  // why it took no more of the body (its answer may say why)
  std::string failed = "";       // why it has no answer
  std::optional<http::response<http::string_body>> answer = std::nullopt;
  std::string last_event = "";  // of a stream: "template" or "error", and its data
  std::string last_data = "";
  bool sending() const { return failed.empty() && write_error.empty(); }
  bool streaming() const {
    return failed.empty() && !answer && call->head().result_int() / 100 == 2 &&
           call->head()[http::field::content_type].starts_with("text/event-stream");
  }
};

namespace {

// Runs `step(leg)` for every leg still going, at once, and waits for them all.
template <class Step>
asio::awaitable<void> EveryLeg(asio::any_io_executor ex, std::vector<Leg>& legs, Step step) {
  TaskGroup group(ex);
  for (Leg& leg : legs) {
    if (leg.failed.empty()) group.Spawn(step(leg), "node call");
  }
  co_await group.Join();
}

asio::awaitable<void> OpenLeg(Leg& leg, SteadyClock::duration timeout) {
  auto opened = co_await leg.call->Open(timeout);
  if (!opened) leg.failed = opened.error().message;
}

asio::awaitable<void> WriteLeg(Leg& leg, std::vector<asio::const_buffer> bytes,
                               SteadyClock::duration timeout) {
  if (!leg.sending()) co_return;
  auto sent = co_await leg.call->Write(std::move(bytes), timeout);
  if (!sent) leg.write_error = sent.error().message;
}

// A node that stopped taking the body may have answered why (a 413, a 400) before it closed.
asio::awaitable<void> ReadLegHead(Leg& leg, SteadyClock::duration timeout) {
  auto head = co_await leg.call->ReadHead(timeout);
  if (!head) leg.failed = leg.write_error.empty() ? head.error().message : leg.write_error;
}

asio::awaitable<void> ReadLegAnswer(Leg& leg, SteadyClock::duration timeout) {
  if (leg.answer) co_return;
  auto answer = co_await leg.call->ReadRest(timeout, 16u << 20);
  if (answer) {
    leg.answer = std::move(*answer);
  } else {
    leg.failed = answer.error().message;
  }
}

// What a pull's stream said last, as the answer a node gives without one (an error event's
// status does not reach the client: the stream's last event says it).
http::response<http::string_body> AnswerOfEvent(const Leg& leg) {
  const bool made = leg.last_event == "template";
  http::response<http::string_body> out{
      made ? http::status::created : http::status::internal_server_error, 11};
  out.set(http::field::content_type, "application/json");
  out.body() = leg.last_data;
  return out;
}

// Follows one node's pull as events: its progress goes to the client (through `send`) tagged
// with the node, its last event (the template, or the error) is kept for the merged one.
template <class Send>
asio::awaitable<void> FollowLeg(Leg& leg, Send& send, SteadyClock::duration timeout) {
  if (!leg.streaming()) co_return co_await ReadLegAnswer(leg, timeout);
  SseParser parser;
  size_t pending = 0;  // bytes read since the last whole event
  for (;;) {
    Result<std::string_view> piece = co_await leg.call->ReadSome(timeout);
    if (!piece) {
      leg.failed = piece.error().message;
      co_return;
    }
    if (piece->empty()) break;
    std::vector<SseEvent> got = parser.Feed(*piece);
    pending = got.empty() ? pending + piece->size() : 0;
    if (pending > kMaxEventBytes) {
      leg.failed = "its stream sent over " + std::to_string(kMaxEventBytes) +
                   " bytes without an event's end";
      co_return;
    }
    if (got.empty()) {
      std::string keepalive = ":\n\n";  // the node's keep-alive, passed on
      co_await send(std::move(keepalive));
    }
    for (SseEvent& event : got) {
      if (event.type == "template" || event.type == "error") {
        leg.last_event = std::move(event.type);
        leg.last_data = std::move(event.data);
        continue;
      }
      boost::system::error_code ec;
      json::value data = json::parse(event.data, ec);
      if (ec || !data.is_object()) continue;
      data.as_object()["node"] = leg.node;
      std::string text = "event: " + event.type + "\ndata: " + json::serialize(data) + "\n\n";
      co_await send(std::move(text));
    }
  }
  if (leg.last_event.empty()) leg.failed = "its stream ended before the pull did";
}

// Each leg's head: `call`'s, with the leg's node as its Host.
void AddressTo(std::vector<Leg>& legs, http::request<http::string_body>& call) {
  for (Leg& leg : legs) {
    call.set(http::field::host, leg.call->to().text());
    std::ostringstream text;
    text << call.base();
    leg.head = text.str();
  }
}

// What a leg came to: the node's answer, the last event of its stream, or why neither.
Result<http::response<http::string_body>> OutcomeOf(Leg& leg) {
  if (leg.answer) return std::move(*leg.answer);
  if (!leg.last_event.empty()) return AnswerOfEvent(leg);
  return Error{ErrorCode::kBadGateway, leg.failed};
}

constexpr std::string_view kEventStreamHead =
    "HTTP/1.1 200 OK\r\nServer: sandstreamd\r\nContent-Type: text/event-stream\r\n"
    "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n";

}  // namespace

asio::awaitable<void> Gateway::Everywhere(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                          http::request_parser<http::empty_body>& header_parser,
                                          const GatewayRoute& route) {
  const http::request_header<>& head = header_parser.get();
  const unsigned version = head.version();
  const bool pull = head.method() == http::verb::post;
  // An image archive goes to every node as it arrives; a pull's progress comes from every node.
  const bool archive = pull && !sandstream::http::IsJsonType(head[http::field::content_type]);
  const bool events =
      pull && head[http::field::accept].find("text/event-stream") != std::string_view::npos;
  const std::string peer = PeerAddress(client.socket());
  if (!archive && !events) {
    std::optional<http::request<http::string_body>> whole =
        co_await ReadWhole(client, buffer, header_parser, route);
    if (!whole) co_return;
    http::request<http::string_body> call = NodeRequest(*whole, whole->body(), peer);
    std::vector<NodeAnswer> answers = co_await CallEvery(std::move(call), options_.node_timeout);
    http::response<http::string_body> res = Merged(pull, answers);
    co_return co_await Answer(client, version, res.result(), std::move(res.body()), &res.base());
  }

  std::vector<Leg> legs;
  for (const Member* m : members_.All()) {
    if (m->up) legs.push_back({m->record.id, std::make_unique<NodeCall>(ex_, m->address)});
  }
  const SteadyClock::duration connect_timeout = options_.connect_timeout;
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return OpenLeg(leg, connect_timeout); });
  if (std::none_of(legs.begin(), legs.end(), [](const Leg& l) { return l.failed.empty(); })) {
    std::string why;
    for (const Leg& leg : legs) why += (why.empty() ? "" : "; ") + leg.node + ": " + leg.failed;
    const Error error{ErrorCode::kUnavailable,
                      legs.empty() ? "no node is up" : "no node could be reached: " + why};
    co_return co_await Refuse(client, version, error, false);
  }
  if (archive) {
    if (!co_await SendEverywhere(client, buffer, header_parser, legs)) co_return;
  } else {
    std::optional<http::request<http::string_body>> whole =
        co_await ReadWhole(client, buffer, header_parser, route);
    if (!whole) co_return;
    http::request<http::string_body> call = NodeRequest(*whole, whole->body(), peer);
    call.keep_alive(false);
    call.prepare_payload();
    AddressTo(legs, call);
    const SteadyClock::duration within = options_.write_timeout;
    co_await EveryLeg(ex_, legs, [&](Leg& leg) {
      return WriteLeg(leg, {asio::buffer(leg.head), asio::buffer(call.body())}, within);
    });
  }
  const SteadyClock::duration timeout = options_.node_timeout;
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return ReadLegHead(leg, timeout); });
  if (events && std::any_of(legs.begin(), legs.end(), [](const Leg& l) { return l.streaming(); })) {
    co_return co_await MergeEvents(client, legs);
  }
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return ReadLegAnswer(leg, timeout); });
  std::vector<NodeAnswer> answers;
  answers.reserve(legs.size());
  for (Leg& leg : legs) answers.push_back({leg.node, OutcomeOf(leg)});
  http::response<http::string_body> res = Merged(pull, answers);
  co_await Answer(client, version, res.result(), std::move(res.body()), &res.base());
}

asio::awaitable<bool> Gateway::SendEverywhere(beast::tcp_stream& client, beast::flat_buffer& buffer,
                                              http::request_parser<http::empty_body>& header_parser,
                                              std::vector<Leg>& legs) {
  const http::request_header<>& head = header_parser.get();
  const unsigned version = head.version();
  const bool go_on = beast::iequals(head[http::field::expect], "100-continue");
  // Each node gets the body as it comes: its length when the client said it, else in chunks.
  const boost::optional<uint64_t> length = header_parser.content_length();
  http::request<http::string_body> call =
      NodeRequest(head, std::string(), PeerAddress(client.socket()));
  call.keep_alive(false);
  if (length) {
    call.content_length(*length);
  } else {
    call.chunked(true);
  }
  AddressTo(legs, call);
  const SteadyClock::duration within = options_.write_timeout;
  co_await EveryLeg(ex_, legs,
                    [&](Leg& leg) { return WriteLeg(leg, {asio::buffer(leg.head)}, within); });
  auto sending = [&legs] {
    return std::any_of(legs.begin(), legs.end(), [](const Leg& l) { return l.sending(); });
  };
  // No node took the head: the answer is theirs (the body is drained when it is given).
  if (go_on && sending()) {
    http::response<http::empty_body> next{http::status::continue_, version};
    auto [ec, sent] = co_await http::async_write(client, next, kTuple);
    (void)sent;
    if (ec) co_return false;
  }
  http::request_parser<http::buffer_body> parser(std::move(header_parser));
  parser.body_limit(boost::none);  // each node holds the archive to its own limit
  std::vector<char> piece(64 * 1024);
  while (!parser.is_done() && sending()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    client.expires_after(kBodyReadTimeout);
    auto [ec, n] = co_await http::async_read_some(client, buffer, parser, kTuple);
    (void)n;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      // The client left, or its body broke off: no node gets a whole archive.
      for (Leg& leg : legs) leg.call->Close();
      if (ec != http::error::end_of_stream && ec != asio::error::eof &&
          ec != beast::error::timeout && ec != asio::error::connection_reset) {
        const Error error{ErrorCode::kInvalidRequest, "the request's body: " + ec.message()};
        co_await Refuse(client, version, error, false);
      }
      co_return false;
    }
    const size_t got = piece.size() - parser.get().body().size;
    if (got == 0) continue;
    std::string before, after;
    if (!length) {
      char size[24];
      before.assign(size, static_cast<size_t>(std::snprintf(size, sizeof size, "%zx\r\n", got)));
      after = "\r\n";
    }
    co_await EveryLeg(ex_, legs, [&](Leg& leg) {
      return WriteLeg(leg,
                      {asio::buffer(before), asio::buffer(piece.data(), got), asio::buffer(after)},
                      within);
    });
    counts_.to_node += got * legs.size();
  }
  if (!length) {
    static constexpr std::string_view kLastChunk = "0\r\n\r\n";
    co_await EveryLeg(ex_, legs,
                      [&](Leg& leg) { return WriteLeg(leg, {asio::buffer(kLastChunk)}, within); });
  }
  co_return true;
}

asio::awaitable<void> Gateway::MergeEvents(beast::tcp_stream& client, std::vector<Leg>& legs) {
  client.expires_never();
  TurnQueue turn(ex_);
  bool gone = false;
  auto send = [&](std::string text) -> asio::awaitable<void> {
    co_await turn.Acquire();
    if (!gone) {
      gone = !co_await sandstream::http::WriteWithin(client.socket(), asio::buffer(text),
                                                     options_.write_timeout);
      counts_.to_client += text.size();
      // Nobody to tell: the nodes' pulls go on without the gateway.
      if (gone) {
        for (Leg& leg : legs) leg.call->Close();
      }
    }
    turn.Release();
  };
  std::string start(kEventStreamHead);
  co_await send(std::move(start));
  const SteadyClock::duration timeout = options_.node_timeout;
  co_await EveryLeg(ex_, legs, [&](Leg& leg) { return FollowLeg(leg, send, timeout); });
  if (gone) co_return;
  std::vector<NodeAnswer> answers;
  answers.reserve(legs.size());
  for (Leg& leg : legs) answers.push_back({leg.node, OutcomeOf(leg)});
  http::response<http::string_body> res = Merged(true, answers);
  const char* last = res.result_int() / 100 == 2 ? "template" : "error";
  std::string text = "event: " + std::string(last) + "\ndata: " + res.body() + "\n\n";
  co_await send(std::move(text));
}

http::response<http::string_body> Gateway::Merged(bool pull, std::vector<NodeAnswer>& answers) {
  if (answers.empty()) return Refusal(Error{ErrorCode::kUnavailable, "no node is up"}, false);
  // What each node said: done, or why not.
  std::vector<std::string> done;
  json::object failed;
  const NodeAnswer* first_done = nullptr;
  const NodeAnswer* first_failed = nullptr;  // the first refusal that is not a 404
  const NodeAnswer* first_missing = nullptr;
  for (const NodeAnswer& a : answers) {
    if (!a.answer) {
      failed[a.node] = a.answer.error().message;
      continue;
    }
    const int status = a.answer->result_int();
    if (status / 100 == 2) {
      done.push_back(a.node);
      if (!first_done) first_done = &a;
      continue;
    }
    if (status == 404 && !pull) {
      if (!first_missing) first_missing = &a;
      continue;  // not there to delete
    }
    const std::optional<std::string> message = ErrorMessageOf(a.answer->body());
    failed[a.node] =
        message ? *message : std::to_string(status) + " " + a.answer->body().substr(0, 200);
    if (!first_failed) first_failed = &a;
  }
  std::string done_list;
  for (const std::string& node : done) done_list += (done_list.empty() ? "" : ", ") + node;
  if (!pull && first_failed) {
    // A delete refused somewhere (in use there): that answer, saying where it did go.
    http::response<http::string_body> res = *first_failed->answer;
    if (!done.empty()) res.set("X-Sandstream-Done-Nodes", done_list);
    return res;
  }
  if (!first_done) {
    // Nowhere: the first node's refusal (or, for a delete, its 404), or why none answered.
    const NodeAnswer* say = first_failed ? first_failed : first_missing;
    if (say) return *say->answer;
    return Refusal(
        Error{ErrorCode::kUnavailable, "no node could be reached: " + json::serialize(failed)},
        false);
  }
  http::response<http::string_body> res = *first_done->answer;
  if (pull) {
    // The first node's template, with where it is and where it is not.
    boost::system::error_code ec;
    json::value body = json::parse(res.body(), ec);
    if (!ec && body.is_object()) {
      json::array nodes;
      for (const std::string& node : done) nodes.emplace_back(node);
      body.as_object()["nodes"] = std::move(nodes);
      if (!failed.empty()) body.as_object()["failed_nodes"] = failed;
      res.body() = json::serialize(body);
    }
  } else if (!failed.empty()) {
    res.set("X-Sandstream-Failed-Nodes", json::serialize(failed));
  }
  return res;
}

}  // namespace sandstream::cluster
