// Unit tests of WebSocket over a loopback connection, both ends on the test's event loop: the
// upgrade, messages both ways in order, a message past the limit (1009), a client that reads
// nothing while the daemon queues for it (1008), and shutdown ("going away" after an error); on
// the test's clock, a client that takes nothing of a write is cut off after the write timeout.
#include "api/websocket.h"

#include <gtest/gtest.h>

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <string>
#include <vector>

#include "server_harness.h"

namespace sandstream::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;
using unit::RunFor;
using unit::RunUntil;
using namespace std::chrono_literals;

// What the daemon's end saw.
struct ServerSide {
  bool accepted = false;
  std::vector<WebSocket::Message> received;
  int status = 0;
  bool done = false;
};
using Behaviour = asio::awaitable<void> (*)(WebSocket&, ServerSide&);

// What the client saw: its messages (data, binary) and how the connection ended.
struct ClientSide {
  std::vector<std::pair<std::string, bool>> messages;
  websocket::close_reason close;
  boost::system::error_code end;
  bool done = false;
};
using ClientStream = websocket::stream<beast::tcp_stream>;

// Accepts one connection, reads its upgrade request, and runs `behave` on it as a route would.
// `send_buffer`, if given, is the connection's SO_SNDBUF.
asio::awaitable<void> ServeOne(tcp::acceptor& acceptor, Server& server, Service& service,
                               Behaviour behave, ServerSide& side, int send_buffer = 0) {
  beast::tcp_stream stream(co_await acceptor.async_accept(asio::use_awaitable));
  if (send_buffer > 0) stream.socket().set_option(asio::socket_base::send_buffer_size(send_buffer));
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  co_await http::async_read(stream, buffer, req, asio::use_awaitable);
  Context ctx{server, service, req, stream, "req-ws", {}, {}, {}};
  {
    WebSocket ws(ctx);
    side.accepted = co_await ws.Accept();
    if (side.accepted) co_await behave(ws, side);
    co_await ws.Finish();
  }
  side.status = ctx.status;
  side.done = true;
}

asio::awaitable<void> ReadUntilClosed(WebSocket& ws, ServerSide& side) {
  for (;;) {
    std::optional<WebSocket::Message> m = co_await ws.Read();
    if (!m) break;
    side.received.push_back(std::move(*m));
  }
}

asio::awaitable<void> Echo(WebSocket& ws, ServerSide& side) {
  for (;;) {
    std::optional<WebSocket::Message> m = co_await ws.Read();
    if (!m) break;
    ws.Send("echo:" + m->data, false);
    ws.Send(m->data, true);
    side.received.push_back(std::move(*m));
  }
}

// Queues far more than a client may leave unread, without giving the writer a turn.
asio::awaitable<void> Flood(WebSocket& ws, ServerSide& side) {
  for (int i = 0; i < 200; ++i) ws.Send(std::string(8192, 'x'), false);
  co_await ReadUntilClosed(ws, side);
}

// Sends far more than a client's socket buffers hold, then reads until the connection ends.
asio::awaitable<void> SendOneMebibyte(WebSocket& ws, ServerSide& side) {
  ws.Send(std::string(1u << 20, 'x'), true);
  co_await ReadUntilClosed(ws, side);
}

asio::awaitable<void> Connect(ClientStream& ws, tcp::endpoint ep) {
  co_await beast::get_lowest_layer(ws).async_connect(ep, asio::use_awaitable);
  co_await ws.async_handshake("127.0.0.1", "/ws", asio::use_awaitable);
}

// Reads until the connection ends, keeping every message.
asio::awaitable<void> ReadAll(ClientStream& ws, ClientSide& side) {
  for (;;) {
    beast::flat_buffer buffer;
    auto [ec, n] = co_await ws.async_read(buffer, asio::as_tuple(asio::use_awaitable));
    (void)n;
    if (ec) {
      side.end = ec;
      side.close = ws.reason();
      break;
    }
    side.messages.emplace_back(beast::buffers_to_string(buffer.data()), ws.got_binary());
  }
  side.done = true;
}

asio::awaitable<void> ListenOnly(ClientStream& ws, tcp::endpoint ep, ClientSide& side) {
  co_await Connect(ws, ep);
  co_await ReadAll(ws, side);
}

asio::awaitable<void> SayHiThenClose(ClientStream& ws, tcp::endpoint ep, ClientSide& side) {
  co_await Connect(ws, ep);
  ws.text(true);
  co_await ws.async_write(asio::buffer(std::string_view("hi")), asio::use_awaitable);
  co_await ws.async_write(asio::buffer(std::string_view("there")), asio::use_awaitable);
  for (int i = 0; i < 4; ++i) {
    beast::flat_buffer buffer;
    co_await ws.async_read(buffer, asio::use_awaitable);
    side.messages.emplace_back(beast::buffers_to_string(buffer.data()), ws.got_binary());
  }
  const websocket::close_reason normal(websocket::close_code::normal);
  co_await ws.async_close(normal, asio::use_awaitable);
  side.done = true;
}

// Connects with a receive buffer of a few KiB, then reads nothing.
asio::awaitable<void> ConnectAndStall(ClientStream& ws, tcp::endpoint ep, ClientSide& side) {
  tcp::socket& socket = beast::get_lowest_layer(ws).socket();
  socket.open(tcp::v4());
  socket.set_option(asio::socket_base::receive_buffer_size(4096));
  co_await Connect(ws, ep);
  side.done = true;
}

asio::awaitable<void> SendTooMuch(ClientStream& ws, tcp::endpoint ep, ClientSide& side) {
  co_await Connect(ws, ep);
  const std::string big(WebSocket::kMaxMessage + 1, 'b');
  auto [ec, n] = co_await ws.async_write(asio::buffer(big), asio::as_tuple(asio::use_awaitable));
  (void)ec;
  (void)n;
  co_await ReadAll(ws, side);
}

class WebSocketTest : public ::testing::Test, public unit::ServerHarness {
 protected:
  WebSocketTest() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    MakeServer();
  }

  // Runs the daemon's end with `behave` and the client's with `client` until both are done.
  template <class Client>
  void Exchange(Behaviour behave, Client client, std::function<void()> once_accepted = {}) {
    asio::co_spawn(io_, ServeOne(acceptor_, *server_, *service_, behave, server_side_),
                   [](std::exception_ptr) {});
    asio::co_spawn(io_, client(client_ws_, acceptor_.local_endpoint(), client_side_),
                   [this](std::exception_ptr e) {
                     client_side_.done = true;
                     client_error_ = e;
                   });
    if (once_accepted) {
      ASSERT_TRUE(RunUntil(io_, [&] { return server_side_.accepted; }, 10s));
      once_accepted();
    }
    ASSERT_TRUE(RunUntil(io_, [&] { return server_side_.done && client_side_.done; }, 15s))
        << "server done " << server_side_.done << ", client done " << client_side_.done;
    if (client_error_) std::rethrow_exception(client_error_);
  }

  tcp::acceptor acceptor_;
  ClientStream client_ws_{io_};
  ServerSide server_side_;
  ClientSide client_side_;
  std::exception_ptr client_error_;
};

TEST_F(WebSocketTest, MessagesGoBothWaysInOrder) {
  Exchange(Echo, SayHiThenClose);
  EXPECT_TRUE(server_side_.accepted);
  EXPECT_EQ(server_side_.status, 101);
  ASSERT_EQ(server_side_.received.size(), 2u);
  EXPECT_EQ(server_side_.received[0].data, "hi");
  EXPECT_FALSE(server_side_.received[0].binary);
  EXPECT_EQ(server_side_.received[1].data, "there");
  using M = std::pair<std::string, bool>;
  EXPECT_EQ(client_side_.messages, (std::vector<M>{{"echo:hi", false}, {"hi", true},
                                                   {"echo:there", false}, {"there", true}}));
  EXPECT_EQ(service_->metrics().streams_open, 0) << "the stream was not counted out";
}

TEST_F(WebSocketTest, AMessagePastTheLimitClosesTheConnectionWith1009) {
  Exchange(ReadUntilClosed, SendTooMuch);
  EXPECT_TRUE(server_side_.received.empty());
  EXPECT_EQ(client_side_.close.code, websocket::close_code::too_big);
}

TEST_F(WebSocketTest, AClientThatReadsNothingLosesTheQueueAndIsClosedWith1008) {
  Exchange(Flood, ListenOnly);
  // The write already in flight when the queue overflowed goes out; the queue does not.
  EXPECT_LE(client_side_.messages.size(), 1u) << "the queue was sent after all";
  EXPECT_EQ(client_side_.close.code, websocket::close_code::policy_error);
  EXPECT_EQ(std::string(client_side_.close.reason.data(), client_side_.close.reason.size()),
            "too many unread messages");
}

TEST_F(WebSocketTest, ShutdownSendsAnErrorThenGoingAway) {
  Exchange(ReadUntilClosed, ListenOnly, [&] { server_->EndStreams(); });
  ASSERT_EQ(client_side_.messages.size(), 1u);
  EXPECT_NE(client_side_.messages[0].first.find("\"code\":\"shutting_down\""), std::string::npos)
      << client_side_.messages[0].first;
  EXPECT_EQ(client_side_.close.code, websocket::close_code::going_away);
  EXPECT_EQ(client_side_.end, websocket::error::closed);
}

class WebSocketClockTest : public WebSocketTest {
 protected:
  sandstream::testing::ManualTime clock_;
};

TEST_F(WebSocketClockTest, AClientThatTakesNothingIsCutOffAfterTheWriteTimeout) {
  ASSERT_EQ(server_->options().write_timeout, std::chrono::seconds(60));
  asio::co_spawn(io_, ServeOne(acceptor_, *server_, *service_, SendOneMebibyte, server_side_, 4096),
                 [](std::exception_ptr) {});
  asio::co_spawn(io_, ConnectAndStall(client_ws_, acceptor_.local_endpoint(), client_side_),
                 [this](std::exception_ptr e) {
                   client_side_.done = true;
                   client_error_ = e;
                 });
  ASSERT_TRUE(RunUntil(io_, [&] { return server_side_.accepted && client_side_.done; }, 10s));
  if (client_error_) std::rethrow_exception(client_error_);
  RunFor(io_, 300ms);  // the write goes as far as the buffers let it, and sticks
  clock_.Advance(59s);
  RunFor(io_, 200ms);
  EXPECT_FALSE(server_side_.done) << "cut off before the write timeout";
  clock_.Advance(2s);
  EXPECT_TRUE(RunUntil(io_, [&] { return server_side_.done; }, 5s))
      << "a write the client takes nothing of outlived the write timeout";
  EXPECT_TRUE(server_side_.received.empty());
}

}  // namespace
}  // namespace sandstream::api
