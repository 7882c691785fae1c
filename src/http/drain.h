// Reading and dropping what a client still sends before its connection closes: closing with
// unread bytes resets it, and the reset can destroy the answer before the client reads it. For
// the API server and for a gateway.
#pragma once

#include <chrono>
#include <cstddef>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "base/clock.h"

namespace sandstream::http {

// A body that will not be read is drained for at most this long, and at most kDrainBytes,
// before the connection closes.
inline constexpr auto kDrainTime = std::chrono::seconds(5);
inline constexpr size_t kDrainBytes = 256u << 20;
// A connection past max_connections is answered and drained this briefly.
inline constexpr auto kRefuseDrainTime = std::chrono::seconds(1);

// Finishes sending, then reads and drops what the client still sends, within those bounds.
boost::asio::awaitable<void> Drain(boost::beast::tcp_stream& stream, SteadyClock::duration time);

}  // namespace sandstream::http
