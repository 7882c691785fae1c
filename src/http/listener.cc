#include "http/listener.h"

#include <chrono>
#include <cstdlib>
#include <memory>

#include "base/log.h"
#include "base/timer.h"

namespace sandstream::http {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Past this many connections being refused at once, one is closed without an answer.
constexpr size_t kMaxRefusing = 256;
// EMFILE and the like leave the connection in the backlog, ready again at once: retrying
// without a pause would spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

Result<tcp::endpoint> OpenAcceptor(tcp::acceptor& acceptor, const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos)
    return Error{ErrorCode::kInvalidRequest, "listen: expected host:port"};
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Error{ErrorCode::kInvalidRequest, "listen: bad address '" + host + "'"};
  const int port = std::atoi(listen.c_str() + colon + 1);
  tcp::endpoint ep(address, static_cast<unsigned short>(port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error{ErrorCode::kInternal, "listen " + listen + ": " + ec.message()};
  return acceptor.local_endpoint();
}

}  // namespace

Listener::Listener(asio::any_io_executor ex, size_t max_connections)
    : acceptor_(ex), max_connections_(max_connections), sessions_(ex) {}

Result<tcp::endpoint> Listener::Listen(const std::string& listen) {
  return OpenAcceptor(acceptor_, listen);
}

void Listener::StopAccepting() {
  stopping_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void Listener::CancelIdle() {
  for (boost::beast::tcp_stream* idle : idle_) idle->cancel();
}

asio::awaitable<void> Listener::Run(ConnectionTask serve, ConnectionTask refuse) {
  const asio::any_io_executor ex = acceptor_.get_executor();
  Timer backoff(ex);
  // Connections being refused; shared with the refusals, which may outlive this loop.
  auto refusing = std::make_shared<size_t>(0);
  bool starved = false;  // accept is failing (out of descriptors): logged once per episode
  bool full = false;     // at max_connections: logged once per episode
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(Tuple());
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) co_return;
      if (!starved) log::Warn("accept failed, retrying every 100 ms", {{"error", ec.message()}});
      starved = true;
      backoff.expires_after(kAcceptBackoff);
      auto [timer_ec] = co_await backoff.async_wait(Tuple());
      (void)timer_ec;
      continue;
    }
    if (starved) log::Info("accept works again");
    starved = false;
    if (sessions_.running() >= max_connections_) {
      if (!full) {
        log::Warn("max_connections reached, refusing new connections",
                  {{"max_connections", std::to_string(max_connections_)}});
      }
      full = true;
      // Answering costs a descriptor for a moment; past a few at once, close at once.
      if (*refusing >= kMaxRefusing) continue;
      ++*refusing;
      Spawn(ex, refuse(std::move(socket)), "refusal", [refusing] { --*refusing; });
      continue;
    }
    full = false;
    socket.set_option(tcp::no_delay(true), ec);
    sessions_.Spawn(serve(std::move(socket)), "session");
  }
}

}  // namespace sandstream::http
