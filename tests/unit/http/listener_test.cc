// Unit tests of the accept side both HTTP fronts use (http/listener.h), a node's server and a
// gateway: the connection cap, a slot freed by a connection that ends, and idle connections
// cancelled at shutdown. Real sockets on loopback, the loop run by the test.
#include "http/listener.h"

#include <gtest/gtest.h>

#include <array>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "../process/test_loop.h"

namespace sandstream::http {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using unit::RunUntil;

struct Seen {
  int served = 0;
  int refused = 0;
  boost::system::error_code idle_ended;  // how a served connection's wait for a request ended
};

// A connection served waits for its next request, idle, until the client closes or the
// listener cancels it.
asio::awaitable<void> ServeOne(Listener& listener, Seen& seen, tcp::socket socket) {
  ++seen.served;
  boost::beast::tcp_stream stream(std::move(socket));
  std::array<char, 64> buffer;
  const auto idle = listener.Idle(stream);
  auto [ec, n] = co_await stream.async_read_some(asio::buffer(buffer), Tuple());
  listener.Busy(idle);
  (void)n;
  seen.idle_ended = ec;
}

asio::awaitable<void> RefuseOne(Seen& seen, tcp::socket socket) {
  ++seen.refused;
  boost::system::error_code ec;
  socket.close(ec);
  co_return;
}

// Not coroutines themselves: the listener may drop them while what they started still runs.
Listener::ConnectionTask Serve(Listener& listener, Seen& seen) {
  return [&listener, &seen](tcp::socket socket) {
    return ServeOne(listener, seen, std::move(socket));
  };
}

Listener::ConnectionTask Refuse(Seen& seen) {
  return [&seen](tcp::socket socket) { return RefuseOne(seen, std::move(socket)); };
}

class ListenerTest : public ::testing::Test {
 protected:
  // A listener of `max_connections` on a port of loopback, accepting.
  void Start(size_t max_connections) {
    listener_.emplace(io_.get_executor(), max_connections);
    const auto endpoint = listener_->Listen("127.0.0.1:0");
    ASSERT_TRUE(endpoint) << endpoint.error().message;
    endpoint_ = *endpoint;
    asio::co_spawn(io_, listener_->Run(Serve(*listener_, seen_), Refuse(seen_)),
                   [this](std::exception_ptr) { ran_ = true; });
  }
  tcp::socket Connect() {
    tcp::socket socket(io_);
    socket.connect(endpoint_);
    return socket;
  }

  asio::io_context io_;
  std::optional<Listener> listener_;
  tcp::endpoint endpoint_;
  Seen seen_;
  bool ran_ = false;  // Run has returned
};

TEST_F(ListenerTest, PastMaxConnectionsANewConnectionIsRefusedUntilASlotIsFree) {
  Start(1);
  tcp::socket first = Connect();
  ASSERT_TRUE(RunUntil(io_, [&] { return listener_->running() == 1; }));
  tcp::socket second = Connect();
  ASSERT_TRUE(RunUntil(io_, [&] { return seen_.refused == 1; }));
  EXPECT_EQ(seen_.served, 1);
  EXPECT_EQ(listener_->running(), 1u);
  // The first one leaving frees its slot for the next.
  first.close();
  ASSERT_TRUE(RunUntil(io_, [&] { return listener_->running() == 0; }));
  tcp::socket third = Connect();
  ASSERT_TRUE(RunUntil(io_, [&] { return listener_->running() == 1; }));
  EXPECT_EQ(seen_.served, 2);
  EXPECT_EQ(seen_.refused, 1);
  listener_->StopAccepting();
  EXPECT_TRUE(listener_->stopping());
  third.close();
  EXPECT_TRUE(RunUntil(io_, [&] { return ran_ && listener_->running() == 0; }));
}

TEST_F(ListenerTest, CancelIdleEndsTheWaitOfAConnectionBetweenRequests) {
  Start(8);
  tcp::socket client = Connect();
  ASSERT_TRUE(RunUntil(io_, [&] { return listener_->running() == 1; }));
  unit::RunFor(io_, std::chrono::milliseconds(50));
  listener_->StopAccepting();
  listener_->CancelIdle();
  ASSERT_TRUE(RunUntil(io_, [&] { return ran_ && listener_->running() == 0; }));
  EXPECT_EQ(seen_.idle_ended, asio::error::operation_aborted);
}

TEST_F(ListenerTest, ABadAddressIsRefused) {
  Listener listener(io_.get_executor(), 1);
  EXPECT_FALSE(listener.Listen("no-port"));
  EXPECT_FALSE(listener.Listen("not-an-address:80"));
}

}  // namespace
}  // namespace sandstream::http
