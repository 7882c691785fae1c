#include "cluster/http_client.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <sstream>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "base/timer.h"

namespace sandstream::cluster {
namespace asio = boost::asio;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::string HostPort::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

namespace {
Error BadAddress(std::string_view text, std::string_view what) {
  return Error{ErrorCode::kInvalidRequest, "'" + std::string(text) + "' " + std::string(what)};
}
}  // namespace

Result<HostPort> ParseHostPort(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  while (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find("://") != std::string_view::npos)
    return BadAddress(text, "is not http://host:port");
  HostPort out;
  size_t colon;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return BadAddress(text, "is not [address]:port");
    }
    out.host = std::string(rest.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return BadAddress(text, "is not host:port");
    }
    out.host = std::string(rest.substr(0, colon));
  }
  out.port = std::string(rest.substr(colon + 1));
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(out.port.data(), out.port.data() + out.port.size(), port);
  if (ec != std::errc() || end != out.port.data() + out.port.size() || port < 1 || port > 65535) {
    return BadAddress(text, "has no port from 1 to 65535");
  }
  return out;
}

asio::awaitable<Result<void>> Connect(tcp::socket& socket, const HostPort& to,
                                      SteadyClock::duration timeout) {
  tcp::resolver resolver(socket.get_executor());
  auto [rec, endpoints] =
      co_await resolver.async_resolve(to.host, to.port, tcp::resolver::numeric_service, kTuple);
  if (rec)
    co_return Error{ErrorCode::kNodeUnreachable, "resolve " + to.text() + ": " + rec.message()};
  if (endpoints.empty()) co_return Error{ErrorCode::kNodeUnreachable, to.text() + ": no address"};
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  Timer timer(socket.get_executor(), timeout);
  auto connected = co_await (socket.async_connect(endpoint, kTuple) || timer.async_wait(kTuple));
  if (connected.index() == 1) {
    co_return Error{ErrorCode::kNodeUnreachable, "connect to " + to.text() + ": no answer in time"};
  }
  const auto [cec] = std::get<0>(connected);
  if (cec)
    co_return Error{ErrorCode::kNodeUnreachable, "connect to " + to.text() + ": " + cec.message()};
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  co_return Ok{};
}

namespace {
// What is left of the time until `end` (none once it passed).
SteadyClock::duration Left(SteadyClock::time_point end) {
  return std::max(end - SteadyClock::now(), SteadyClock::duration::zero());
}
}  // namespace

struct NodeCall::State {
  explicit State(const asio::any_io_executor& ex) : socket(ex), deadline(ex) {
    parser.body_limit(boost::none);  // an answer may be a stream: the caller bounds what it keeps
  }
  tcp::socket socket;
  Timer deadline;
  uint64_t step = 0;  // which step the deadline is for: a handler of an earlier one does nothing
  bool expired = false;
  std::string_view late = "no answer in time";  // what a step that misses its deadline says
  boost::beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  std::vector<char> piece = std::vector<char>(64 * 1024);
};

NodeCall::NodeCall(asio::any_io_executor ex, HostPort to)
    : to_(std::move(to)), state_(std::make_shared<State>(ex)) {}

// Close cancels a timer, which throws only when the reactor itself has failed.
NodeCall::~NodeCall() {  // NOLINT(bugprone-exception-escape)
  Close();
}

void NodeCall::Close() {
  Disarm();
  boost::system::error_code ignored;
  state_->socket.close(ignored);
}

void NodeCall::Arm(SteadyClock::duration timeout, std::string_view late) {
  const uint64_t step = ++state_->step;
  state_->late = late;
  state_->deadline.expires_after(timeout);
  state_->deadline.async_wait([s = state_, step](const boost::system::error_code& ec) {
    // A handler already queued when its step ended runs as if the timer fired: the step tells.
    if (ec || s->step != step) return;
    s->expired = true;
    boost::system::error_code ignored;
    s->socket.close(ignored);
  });
}

void NodeCall::Disarm() {
  ++state_->step;
  state_->deadline.cancel();
}

// After the request went out, the error is kBadGateway: the other side may have acted on it.
Error NodeCall::Failed(std::string_view step, const boost::system::error_code& ec) const {
  return Error{ErrorCode::kBadGateway,
               std::string(step) + " " + to_.text() + ": " +
                   (state_->expired ? std::string(state_->late) : ec.message())};
}

asio::awaitable<Result<void>> NodeCall::Open(SteadyClock::duration timeout) {
  co_return co_await Connect(state_->socket, to_, timeout);
}

asio::awaitable<Result<void>> NodeCall::Write(std::vector<asio::const_buffer> bytes,
                                              SteadyClock::duration timeout) {
  Arm(timeout, "it took nothing more for too long");
  auto [ec, n] = co_await asio::async_write(state_->socket, bytes, kTuple);
  (void)n;
  Disarm();
  if (ec) co_return Failed("write to", ec);
  co_return Ok{};
}

asio::awaitable<Result<void>> NodeCall::ReadHead(SteadyClock::duration timeout) {
  Arm(timeout, "no answer in time");
  auto [ec, n] =
      co_await http::async_read_header(state_->socket, state_->buffer, state_->parser, kTuple);
  (void)n;
  Disarm();
  if (ec) co_return Failed("read from", ec);
  co_return Ok{};
}

const http::response_header<>& NodeCall::head() const {
  return state_->parser.get().base();
}

asio::awaitable<Result<std::string_view>> NodeCall::ReadSome(SteadyClock::duration timeout) {
  State& s = *state_;
  // A read may parse framing alone (a chunk's size line): read on until bytes or the end.
  while (!s.parser.is_done()) {
    http::buffer_body::value_type& body = s.parser.get().body();
    body.data = s.piece.data();
    body.size = s.piece.size();
    Arm(timeout, "its answer stopped coming");
    auto [ec, n] = co_await http::async_read_some(s.socket, s.buffer, s.parser, kTuple);
    (void)n;
    Disarm();
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return Failed("read from", ec);
    const size_t got = s.piece.size() - s.parser.get().body().size;
    if (got > 0) co_return std::string_view(s.piece.data(), got);
  }
  co_return std::string_view();
}

asio::awaitable<Result<http::response<http::string_body>>> NodeCall::ReadRest(
    SteadyClock::duration timeout, uint64_t limit) {
  const SteadyClock::time_point end = SteadyClock::now() + timeout;
  std::string body;
  for (;;) {
    Result<std::string_view> piece = co_await ReadSome(Left(end));
    if (!piece) co_return std::move(piece).error();
    if (piece->empty()) break;
    if (body.size() + piece->size() > limit) {
      co_return Error{ErrorCode::kBadGateway, "read from " + to_.text() + ": an answer over " +
                                                  std::to_string(limit) + " bytes"};
    }
    body.append(*piece);
  }
  http::response_header<> fields = head();
  http::response<http::string_body> out(std::move(fields));
  out.body() = std::move(body);
  co_return out;
}

asio::awaitable<Result<http::response<http::string_body>>> Call(
    asio::any_io_executor ex, const HostPort& to, http::request<http::string_body> req,
    SteadyClock::duration timeout, uint64_t body_limit, SteadyClock::duration connect_timeout) {
  // One deadline for the whole exchange: a peer that answers a little at a time does not
  // keep the call.
  const SteadyClock::time_point end = SteadyClock::now() + timeout;
  NodeCall call(ex, to);
  if (auto opened = co_await call.Open(std::min(timeout, connect_timeout)); !opened) {
    co_return std::move(opened).error();
  }
  req.set(http::field::host, to.text());
  req.keep_alive(false);
  req.prepare_payload();
  std::ostringstream head;
  head << req.base();
  const std::string text = head.str();
  std::vector<asio::const_buffer> bytes{asio::buffer(text), asio::buffer(req.body())};
  if (auto sent = co_await call.Write(std::move(bytes), Left(end)); !sent) {
    co_return std::move(sent).error();
  }
  if (auto answered = co_await call.ReadHead(Left(end)); !answered) {
    co_return std::move(answered).error();
  }
  co_return co_await call.ReadRest(Left(end), body_limit);
}

}  // namespace sandstream::cluster
