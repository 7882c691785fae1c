#include "cli/shell.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <deque>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include "base/async.h"
#include "cli/client.h"

namespace sandstream::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;
using asio::ip::tcp;

constexpr int kExitError = 2;
constexpr int kExitUnknown = 255;

struct Size {
  int rows = 24;
  int cols = 80;
};

std::optional<Size> LocalSize() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO}) {
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      return Size{ws.ws_row, ws.ws_col};
    }
  }
  return std::nullopt;
}

// Raw mode on the local terminal for as long as it lives; restored however the shell ends.
class RawMode {
 public:
  RawMode() {
    if (!::isatty(STDIN_FILENO) || ::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    ::cfmakeraw(&raw);
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawMode() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

bool WriteOut(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(STDOUT_FILENO, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string Encode(std::string_view text) {
  return boost::urls::encode(text, boost::urls::unreserved_chars);
}

class Session {
 public:
  Session(asio::io_context& io, const Endpoint& endpoint, std::string api_key)
      : io_(io), endpoint_(endpoint), api_key_(std::move(api_key)), ws_(io), signals_(io) {}

  int Run(const ShellOptions& options) {
    asio::co_spawn(io_, Main(options), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
    io_.run();
    return status_;
  }

 private:
  asio::awaitable<void> Main(ShellOptions options) {
    const Size size = LocalSize().value_or(Size{});
    std::string target = endpoint_.base_path + SandboxPath(options.sandbox_id) +
                         "/exec/pty?rows=" + std::to_string(size.rows) +
                         "&cols=" + std::to_string(size.cols);
    if (!options.cmd.empty()) target += "&cmd=" + Encode(options.cmd);
    if (!options.terminal_id.empty()) target += "&terminal_id=" + Encode(options.terminal_id);
    if (!co_await Connect(target)) co_return;

    RawMode raw;
    signals_.add(SIGWINCH);
    asio::co_spawn(io_, ForwardResizes(), asio::detached);
    asio::co_spawn(io_, ForwardInput(), asio::detached);
    co_await ReadOutput();
    closed_ = true;
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    if (input_) input_->cancel(ignored);
  }

  asio::awaitable<bool> Connect(const std::string& target) {
    tcp::resolver resolver(io_);
    auto [resolve_ec, addresses] =
        co_await resolver.async_resolve(endpoint_.host, endpoint_.port, Tuple());
    if (resolve_ec) co_return Fail("resolve " + endpoint_.host + ": " + resolve_ec.message());
    auto [connect_ec, ep] = co_await asio::async_connect(ws_.next_layer(), addresses, Tuple());
    (void)ep;
    if (connect_ec) {
      co_return Fail("connect " + endpoint_.host + ":" + endpoint_.port + ": " +
                     connect_ec.message());
    }
    ws_.set_option(
        websocket::stream_base::decorator([key = api_key_](websocket::request_type& req) {
          if (!key.empty()) req.set(beast::http::field::authorization, "Bearer " + key);
        }));
    websocket::response_type res;
    auto [hs_ec] = co_await ws_.async_handshake(res, endpoint_.host, target, Tuple());
    if (hs_ec) {
      if (res.result_int() != 0 && res.result_int() != 101) co_return ApiFailure(res);
      co_return Fail("WebSocket handshake: " + hs_ec.message());
    }
    co_return true;
  }

  bool Fail(const std::string& message) {
    std::fprintf(stderr, "sandstream: %s\n", message.c_str());
    status_ = kExitError;
    return false;
  }

  bool ApiFailure(const websocket::response_type& res) {
    HttpResponse response;
    response.status = res.result_int();
    response.body = res.body();
    const ClientError error = ApiError(response);
    std::fprintf(stderr, "sandstream: %s: %s\n", error.code.c_str(), error.message.c_str());
    status_ = kExitError;
    return false;
  }

  void Send(std::string data, bool binary) {
    if (closed_) return;
    outbox_.push_back({std::move(data), binary});
    if (!writing_) {
      writing_ = true;
      asio::co_spawn(io_, WriteLoop(), asio::detached);
    }
  }

  asio::awaitable<void> WriteLoop() {
    while (!outbox_.empty() && !closed_) {
      auto [data, binary] = std::move(outbox_.front());
      outbox_.pop_front();
      ws_.binary(binary);
      auto [ec, n] = co_await ws_.async_write(asio::buffer(data), Tuple());
      (void)n;
      if (ec) break;
    }
    writing_ = false;
  }

  asio::awaitable<void> ForwardInput() {
    input_.emplace(io_, ::dup(STDIN_FILENO));
    std::string buf(16 * 1024, '\0');
    for (;;) {
      auto [ec, n] = co_await input_->async_read_some(asio::buffer(buf), Tuple());
      if (n > 0) Send(buf.substr(0, n), true);
      if (ec) {
        // End of local input: the terminal's end-of-file character, as a typed Ctrl-D.
        if (ec == asio::error::eof) Send("\x04", true);
        co_return;
      }
    }
  }

  asio::awaitable<void> ForwardResizes() {
    for (;;) {
      auto [ec, sig] = co_await signals_.async_wait(Tuple());
      (void)sig;
      if (ec || closed_) co_return;
      if (auto size = LocalSize()) {
        Send(json::serialize(
                 json::object{{"type", "resize"}, {"rows", size->rows}, {"cols", size->cols}}),
             false);
      }
    }
  }

  asio::awaitable<void> ReadOutput() {
    beast::flat_buffer buffer;
    bool exited = false;
    for (;;) {
      buffer.clear();
      auto [ec, n] = co_await ws_.async_read(buffer, Tuple());
      (void)n;
      if (ec) break;
      std::string data = beast::buffers_to_string(buffer.data());
      if (ws_.got_binary()) {
        if (!WriteOut(data)) break;
        continue;
      }
      boost::system::error_code parse_ec;
      json::value v = json::parse(data, parse_ec);
      if (parse_ec || !v.is_object()) continue;
      const auto& o = v.as_object();
      if (o.contains("type") && o.at("type") == "exit" && o.contains("exit_code")) {
        exited = true;
        status_ = static_cast<int>(o.at("exit_code").to_number<int64_t>());
      } else if (o.contains("type") && o.at("type") == "error") {
        pending_error_ = "sandstream: " + json::value_to<std::string>(o.at("code")) + ": " +
                         json::value_to<std::string>(o.at("message"));
      }
    }
    if (!exited) {
      if (pending_error_.empty())
        pending_error_ = "sandstream: the terminal's connection ended without its exit";
      status_ = kExitUnknown;
    }
    if (!pending_error_.empty()) error_to_print_ = pending_error_;
  }

 public:
  std::string error_to_print_;

 private:
  asio::io_context& io_;
  Endpoint endpoint_;
  std::string api_key_;
  websocket::stream<tcp::socket> ws_;
  asio::signal_set signals_;
  std::optional<asio::posix::stream_descriptor> input_;
  std::deque<std::pair<std::string, bool>> outbox_;
  bool writing_ = false;
  bool closed_ = false;
  std::string pending_error_;
  int status_ = 0;
};

}  // namespace

int RunShell(const Endpoint& endpoint, const std::string& api_key, const ShellOptions& options) {
  // Asio makes stdin non-blocking, and that flag belongs to the terminal, not to this process.
  const int stdin_flags = ::fcntl(STDIN_FILENO, F_GETFL);
  asio::io_context io;
  Session session(io, endpoint, api_key);
  const int status = session.Run(options);
  if (stdin_flags >= 0) ::fcntl(STDIN_FILENO, F_SETFL, stdin_flags);
  // After the terminal is restored, so the message starts on a line of its own.
  if (!session.error_to_print_.empty()) {
    std::fprintf(stderr, "\r\n%s\n", session.error_to_print_.c_str());
  }
  return status;
}

}  // namespace sandstream::cli
