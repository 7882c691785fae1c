// The accept side of an HTTP front, for the API server and for a gateway: the listening socket,
// the accept loop with its cap on the connections served at once, the task group they run in,
// and the connections waiting for their next request, which shutdown ends at once.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "base/result.h"

namespace sandstream::http {

class Listener {
 public:
  // Serves one accepted connection, or answers one past max_connections; it owns the socket.
  using ConnectionTask = std::function<boost::asio::awaitable<void>(boost::asio::ip::tcp::socket)>;

  Listener(boost::asio::any_io_executor ex, size_t max_connections);

  // Opens, binds and listens on `listen` ("host:port", "[v6]:port"; port 0 picks one): the
  // bound endpoint.
  Result<boost::asio::ip::tcp::endpoint> Listen(const std::string& listen);
  // Accepts connections until StopAccepting: each one becomes `serve(socket)` while fewer than
  // max_connections run; past that, `refuse(socket)` answers it (a few hundred at once; past
  // those it is closed unanswered). A failed accept (out of descriptors) is retried every
  // 100 ms; it is logged once, and so is reaching max_connections, until it passes.
  boost::asio::awaitable<void> Run(ConnectionTask serve, ConnectionTask refuse);
  // Closes the listening socket: Run returns, and stopping() is true from now on.
  void StopAccepting();
  bool stopping() const { return stopping_; }
  // Cancels the read of every connection waiting for its next request (Idle, Busy).
  void CancelIdle();

  // `stream` waits for its next request until Busy(the iterator returned): CancelIdle reaches
  // it meanwhile.
  std::list<boost::beast::tcp_stream*>::iterator Idle(boost::beast::tcp_stream& stream) {
    return idle_.insert(idle_.end(), &stream);
  }
  void Busy(std::list<boost::beast::tcp_stream*>::iterator idle) { idle_.erase(idle); }

  size_t max_connections() const { return max_connections_; }
  // The connections being served (refusals aside).
  size_t running() const { return sessions_.running(); }
  // Until every connection served has ended, for at most `within`; false if some remain.
  boost::asio::awaitable<bool> Join(SteadyClock::duration within) { return sessions_.Join(within); }

 private:
  boost::asio::ip::tcp::acceptor acceptor_;
  size_t max_connections_;
  std::list<boost::beast::tcp_stream*> idle_;
  bool stopping_ = false;
  TaskGroup sessions_;
};

}  // namespace sandstream::http
