#include "http/relay.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <string>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>

#include "base/timer.h"
#include "http/headers.h"
#include "platform/fd.h"

namespace sandstream::http {
namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr size_t kRelayPipeBytes = 1024 * 1024;  // what one direction of a relay holds in flight
// A client that has stopped sending (closed, or half-closed) waits at most this long for the
// response to begin: an upstream that never answers must not keep the relay, and its
// descriptors, once nobody waits for it.
constexpr std::chrono::seconds kClientGoneGrace{5};
// A response's head is read in pieces of this size (its body is relayed by Pump).
constexpr size_t kRelayChunk = 16 * 1024;
// What an answer relayed on the API's own origin (a port's path form) is given: its document
// runs in an opaque origin, so it reaches no storage, cookie or service worker of the API's
// and console's origin, while its scripts, forms and popups (sandboxed too) still work. Added
// to whatever policy the upstream sent: a browser enforces every policy it gets.
constexpr std::string_view kOpaqueOriginPolicy =
    "Content-Security-Policy: sandbox allow-scripts allow-forms allow-popups allow-modals "
    "allow-downloads\r\n";

}  // namespace

asio::awaitable<bool> WriteWithin(tcp::socket& to, asio::const_buffer data,
                                  SteadyClock::duration timeout) {
  Timer timer(to.get_executor());
  while (data.size() > 0) {
    timer.expires_after(timeout);
    auto result = co_await (to.async_write_some(data, asio::as_tuple(asio::use_awaitable)) ||
                            timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (result.index() == 1) co_return false;
    auto [ec, n] = std::get<0>(result);
    if (ec) co_return false;
    data += n;
  }
  co_return true;
}

asio::awaitable<bool> Pump(tcp::socket& from, tcp::socket& to, SteadyClock::duration write_timeout,
                           uint64_t& bytes, uint64_t limit, bool pass_eof) {
  auto pipe = MakePipe();
  if (!pipe) co_return false;
  const UniqueFd& out = pipe->read;
  const UniqueFd& in = pipe->write;
  GrowPipe(in.get(), static_cast<int>(kRelayPipeBytes));  // a smaller pipe works too
  boost::system::error_code ec;
  from.native_non_blocking(true, ec);
  if (!ec) to.native_non_blocking(true, ec);
  if (ec) co_return false;
  constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
  Timer timer(to.get_executor());
  for (uint64_t left_to_move = limit; left_to_move > 0;) {
    const ssize_t got = ::splice(from.native_handle(), nullptr, in.get(), nullptr,
                                 std::min<uint64_t>(kRelayPipeBytes, left_to_move), kFlags);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
      auto [waited] =
          co_await from.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
      if (waited) co_return false;
      continue;
    }
    if (got < 0) co_return false;
    if (got == 0) {
      if (pass_eof) to.shutdown(tcp::socket::shutdown_send, ec);
      co_return limit == UINT64_MAX;  // short of a limit, the bytes owed never came
    }
    left_to_move -= static_cast<uint64_t>(got);
    for (size_t left = static_cast<size_t>(got); left > 0;) {
      const ssize_t put = ::splice(out.get(), nullptr, to.native_handle(), nullptr, left, kFlags);
      if (put < 0 && (errno == EAGAIN || errno == EINTR)) {
        timer.expires_after(write_timeout);
        auto result =
            co_await (to.async_wait(tcp::socket::wait_write, asio::as_tuple(asio::use_awaitable)) ||
                      timer.async_wait(asio::as_tuple(asio::use_awaitable)));
        if (result.index() == 1 || std::get<0>(std::get<0>(result))) co_return false;
        continue;
      }
      if (put <= 0) co_return false;
      left -= static_cast<size_t>(put);
      bytes += static_cast<uint64_t>(put);
    }
    // One pipeful per turn: a producer and a reader that are both always ready would otherwise
    // keep this loop, and the I/O thread with it, to themselves.
    co_await asio::post(to.get_executor(), asio::use_awaitable);
  }
  co_return true;
}

namespace {

struct Relay {
  tcp::socket& client;
  tcp::socket& upstream;
  SteadyClock::duration write_timeout;
  Timer grace;  // kClientGoneGrace, cancelled when the answer ends
  uint64_t up = 0;
  uint64_t down = 0;
  int status = 0;         // the upstream's final status; 0 while none came
  bool answered = false;  // the upstream's side has ended
  bool keep = false;      // the client keeps the connection, if the response's framing allows
  bool opaque = false;    // the answer gets an opaque origin (kOpaqueOriginPolicy)
  std::optional<uint64_t> body = std::nullopt;  // it does: the body's length (no `close` said)
};

// The length of a response's body when its head says it (Content-Length; none for 204 and
// 304), so that a client may keep the connection: a body in chunks or up to the connection's
// end would leave it waiting, were the upstream to stop short, for bytes that never come.
std::optional<uint64_t> BodyLength(int status, std::string_view head) {
  if (status == 204 || status == 304) return 0;
  std::optional<uint64_t> length;
  while (!head.empty()) {
    const size_t eol = head.find("\r\n");
    const std::string_view line = head.substr(0, eol);
    head.remove_prefix(eol == std::string_view::npos ? head.size() : eol + 2);
    if (beast::iequals(line.substr(0, 18), "transfer-encoding:")) return std::nullopt;
    if (!beast::iequals(line.substr(0, 15), "content-length:")) continue;
    std::string_view value = line.substr(15);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    uint64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size() || (length && *length != n)) {
      return std::nullopt;
    }
    length = n;
  }
  return length;
}

// Passes the upstream's response header on, saying `Connection: close` (the client must not
// send another request on this connection: it would reach the upstream unchecked) unless it
// switches protocols, or the client keeps the connection and the framing ends the body;
// interim (1xx) headers go as they are. Returns what was read past the final header, or
// nullopt if the upstream sent no whole header.
asio::awaitable<std::optional<std::string>> ForwardHead(Relay& r) {
  std::string buf;
  std::array<char, kRelayChunk> chunk;
  for (;;) {
    const size_t end = buf.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (buf.size() > kHeaderLimit) co_return std::nullopt;
      auto [ec, n] = co_await r.upstream.async_read_some(asio::buffer(chunk),
                                                         asio::as_tuple(asio::use_awaitable));
      buf.append(chunk.data(), n);
      if (ec && n == 0) co_return std::nullopt;
      continue;
    }
    int status = 0;
    if (buf.starts_with("HTTP/1.") && end >= 12) {
      std::from_chars(buf.data() + 9, buf.data() + 12, status);
    }
    if (status < 100) co_return std::nullopt;
    std::string head;
    if (status >= 200 || status == 101) {
      std::string_view lines(buf.data(), end + 2);
      while (!lines.empty()) {
        const size_t eol = lines.find("\r\n");
        const std::string_view line = lines.substr(0, eol + 2);
        lines.remove_prefix(line.size());
        const bool hop = beast::iequals(line.substr(0, 11), "connection:") ||
                         beast::iequals(line.substr(0, 11), "keep-alive:");
        // It would let a worker the answer registers control every page of the origin.
        const bool widens =
            r.opaque && beast::iequals(line.substr(0, 23), "service-worker-allowed:");
        if ((!hop || status == 101) && !widens) head += line;
      }
      if (r.opaque && status != 101) head += kOpaqueOriginPolicy;
      if (r.keep && status != 101) r.body = BodyLength(status, std::string_view(buf.data(), end));
      if (status != 101 && !r.body) head += "Connection: close\r\n";
      head += "\r\n";
    } else {
      head = buf.substr(0, end + 4);
    }
    if (!co_await WriteWithin(r.client, asio::buffer(head), r.write_timeout))
      co_return std::nullopt;
    r.down += head.size();
    buf.erase(0, end + 4);
    if (status >= 200 || status == 101) {
      r.status = status;
      co_return buf;
    }
  }
}

// The upstream's answer to the client. Unless the connection was upgraded, the exchange ends
// with it: the client's side is cut off too.
asio::awaitable<void> Downstream(Relay& r) {
  bool clean = false;
  std::optional<std::string> rest = co_await ForwardHead(r);
  if (rest && co_await WriteWithin(r.client, asio::buffer(*rest), r.write_timeout)) {
    r.down += rest->size();
    clean = co_await Pump(r.upstream, r.client, r.write_timeout, r.down);
  }
  r.answered = true;
  r.grace.cancel();
  if (!clean || r.status != 101) {
    boost::system::error_code ignored;
    r.client.cancel(ignored);
    r.upstream.close(ignored);
  }
}

asio::awaitable<void> Upstream(Relay& r) {
  const bool clean = co_await Pump(r.client, r.upstream, r.write_timeout, r.up);
  boost::system::error_code ignored;
  if (clean && !r.answered && r.status == 0) {
    r.grace.expires_after(kClientGoneGrace);
    auto [ec] = co_await r.grace.async_wait(asio::as_tuple(asio::use_awaitable));
    (void)ec;
    if (r.answered || r.status != 0) co_return;
  } else if (clean) {
    co_return;
  }
  r.upstream.close(ignored);
  r.client.cancel(ignored);
}

}  // namespace

namespace {

// Returns once the client has gone (EOF, or an error) while it waits for an answer; a client
// that sends more (its next request) is waited for no longer, and this never returns.
asio::awaitable<void> ClientGone(tcp::socket& client) {
  for (;;) {
    auto [ec] =
        co_await client.async_wait(tcp::socket::wait_read, asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    char byte;
    const ssize_t n = ::recv(client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) break;
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) co_return;
  }
  Timer never(client.get_executor());
  never.expires_at(Timer::time_point::max());
  auto [ignored] = co_await never.async_wait(asio::as_tuple(asio::use_awaitable));
  (void)ignored;
}

// The answer on a kept connection: its head, then its body, to the length its head said and not
// a byte past it. True when all of it went and nothing more came: bytes past the length (a
// sandbox's port server may send a second response) would reach the client as the answer to
// its next request, so they are never relayed, and the client's connection ends instead.
asio::awaitable<bool> KeptDownstream(Relay& r) {
  std::optional<std::string> rest = co_await ForwardHead(r);
  if (!rest) co_return false;
  if (!r.body) {
    // Framed by the upstream's close (the head said `Connection: close`): all of it.
    if (co_await WriteWithin(r.client, asio::buffer(*rest), r.write_timeout)) {
      r.down += rest->size();
      co_await Pump(r.upstream, r.client, r.write_timeout, r.down);
    }
    co_return false;
  }
  const bool over = rest->size() > *r.body;
  if (over) rest->resize(*r.body);
  if (!co_await WriteWithin(r.client, asio::buffer(*rest), r.write_timeout)) co_return false;
  r.down += rest->size();
  if (over) co_return false;
  if (rest->size() < *r.body &&
      !co_await Pump(r.upstream, r.client, r.write_timeout, r.down, *r.body - rest->size(),
                     /*pass_eof=*/false)) {
    co_return false;
  }
  // The answer is whole; the upstream's connection is dropped by the caller, with whatever it
  // sends later. What it has sent already says the exchange went wrong.
  char byte;
  co_return ::recv(r.upstream.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

}  // namespace

asio::awaitable<Exchanged> RelayKeptExchange(tcp::socket& client, tcp::socket& upstream,
                                             uint64_t body, SteadyClock::duration write_timeout) {
  Relay relay{client, upstream, write_timeout, Timer(client.get_executor())};
  relay.keep = true;
  Exchanged out;
  if (body > 0 &&
      !co_await Pump(client, upstream, write_timeout, relay.up, body, /*pass_eof=*/false)) {
    out.up = relay.up;
    co_return out;
  }
  auto answered = co_await (KeptDownstream(relay) || ClientGone(client));
  out = Exchanged{relay.status, relay.up, relay.down};
  out.kept = answered.index() == 0 && std::get<0>(answered);
  co_return out;
}

asio::awaitable<Exchanged> RelayExchange(tcp::socket& client, tcp::socket& upstream,
                                         SteadyClock::duration write_timeout, bool opaque) {
  Relay relay{client, upstream, write_timeout, Timer(client.get_executor())};
  relay.opaque = opaque;
  co_await (Downstream(relay) && Upstream(relay));
  co_return Exchanged{relay.status, relay.up, relay.down};
}

}  // namespace sandstream::http
