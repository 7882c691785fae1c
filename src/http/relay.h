// Bytes between two sockets, for the exposed ports' relay (api/routes/ports.cc) and a gateway's
// (cluster/gateway.cc): a write bounded by a timeout, one direction of a relay, spliced, and
// one HTTP exchange relayed both ways.
#pragma once

#include <cstdint>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/clock.h"

namespace sandstream::http {

// All of `data` to `to`, or false once a write made no progress for `timeout`.
boost::asio::awaitable<bool> WriteWithin(boost::asio::ip::tcp::socket& to,
                                         boost::asio::const_buffer data,
                                         SteadyClock::duration timeout);

// What one relayed exchange moved.
struct Exchanged {
  int status = 0;     // the upstream's final status (101: switched protocols); 0 if none came
  uint64_t up = 0;    // bytes from the client to the upstream, past what was sent before
  uint64_t down = 0;  // bytes from the upstream to the client, its head included
  bool kept = false;  // RelayKeptExchange: the client may send its next request
};
// One HTTP exchange whose request head has gone to `upstream` already: the response's head is
// passed on saying `Connection: close` unless it switches protocols (interim 1xx heads as they
// are), then both directions as they come (Pump). A client that has stopped sending waits at most
// a few seconds for the answer to begin. Unless the protocol was switched, both sides are cut off
// when the answer ends; the caller closes them. `opaque` (an answer served on the API's own
// origin): the head gets `Content-Security-Policy: sandbox ...` added and loses
// `Service-Worker-Allowed`, so its document runs in an opaque origin.
boost::asio::awaitable<Exchanged> RelayExchange(boost::asio::ip::tcp::socket& client,
                                                boost::asio::ip::tcp::socket& upstream,
                                                SteadyClock::duration write_timeout,
                                                bool opaque = false);

// One HTTP exchange on a connection the client keeps (a gateway's; the upstream answers once
// and closes): the request's head, and what was read of its body, have gone to `upstream`, and
// `body` more bytes of it come from `client`, no more (a next request may follow them). The
// response's head is passed on without `Connection: close` when it says its length (or has no
// body), then its body, to that length and never past it; the client's side stays open then
// (`kept`) unless the upstream sent more than it said. A client that leaves while it waits
// ends it.
boost::asio::awaitable<Exchanged> RelayKeptExchange(boost::asio::ip::tcp::socket& client,
                                                    boost::asio::ip::tcp::socket& upstream,
                                                    uint64_t body,
                                                    SteadyClock::duration write_timeout);

// One direction of a relay: `from` to `to` as the bytes come, until `from` ends, or after
// `limit` bytes. True when it ended cleanly (EOF, or the limit), an EOF passed on (`to` stops
// sending) when `pass_eof`. The bytes go through a pipe with splice(2), never through this
// process's memory. Both sockets are made non-blocking at the descriptor (splice honours
// O_NONBLOCK on a socket, not SPLICE_F_NONBLOCK). A write that makes no progress for
// `write_timeout` ends it (false); `bytes` counts what reached `to`. It moves at most one
// pipeful (1 MiB) per turn of the event loop.
boost::asio::awaitable<bool> Pump(boost::asio::ip::tcp::socket& from,
                                  boost::asio::ip::tcp::socket& to,
                                  SteadyClock::duration write_timeout, uint64_t& bytes,
                                  uint64_t limit = UINT64_MAX, bool pass_eof = true);

}  // namespace sandstream::http
