// Bytes between two sockets, for the exposed ports' relay (routes_ports.cc): a write bounded by
// a timeout, and one direction of a relay, spliced.
#pragma once

#include <cstdint>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "base/clock.h"

namespace sandstream::api {

// All of `data` to `to`, or false once a write made no progress for `timeout`.
boost::asio::awaitable<bool> WriteWithin(boost::asio::ip::tcp::socket& to,
                                         boost::asio::const_buffer data,
                                         SteadyClock::duration timeout);

// One direction of a relay: `from` to `to` as the bytes come, until `from` ends. True when it
// ended cleanly (EOF), which is passed on (`to` stops sending). The bytes go through a pipe
// with splice(2), never through this process's memory. Both sockets are made non-blocking at
// the descriptor (splice honours O_NONBLOCK on a socket, not SPLICE_F_NONBLOCK). A write that
// makes no progress for `write_timeout` ends it (false); `bytes` counts what reached `to`.
// It moves at most one pipeful (1 MiB) per turn of the event loop.
boost::asio::awaitable<bool> Pump(boost::asio::ip::tcp::socket& from,
                                  boost::asio::ip::tcp::socket& to,
                                  SteadyClock::duration write_timeout, uint64_t& bytes);

}  // namespace sandstream::api
