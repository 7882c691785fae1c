// Synchronous HTTP/1.1 over TCP; see http.h.
#include "cli/http.h"

#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "base/version.h"
#include "cli/interrupt.h"

namespace sandstream::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr size_t kMaxBufferedBody = 64 << 20;

// A blocking socket whose reads first wait, with ppoll, for data, the read timeout or a signal:
// Asio's synchronous reads cannot time out, and SO_RCVTIMEO is invisible to them.
class PolledSocket {
 public:
  PolledSocket(tcp::socket& socket, std::chrono::milliseconds timeout,
               const InterruptHandler& on_interrupt)
      : socket_(socket), timeout_(timeout), on_interrupt_(on_interrupt) {}

  int signal() const { return signal_; }

  template <typename Buffers>
  size_t read_some(const Buffers& buffers) {
    error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  template <typename Buffers>
  size_t read_some(const Buffers& buffers, error_code& ec) {
    if (!WaitReadable(ec)) return 0;
    return socket_.read_some(buffers, ec);
  }

  template <typename Buffers>
  size_t write_some(const Buffers& buffers) {
    return socket_.write_some(buffers);
  }

  template <typename Buffers>
  size_t write_some(const Buffers& buffers, error_code& ec) {
    return socket_.write_some(buffers, ec);
  }

 private:
  bool WaitReadable(error_code& ec) {
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      if (int sig = TakePendingSignal(); sig != 0 && !Continue(sig, ec)) return false;
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        ec = asio::error::timed_out;
        return false;
      }
      timespec ts{static_cast<time_t>(left.count() / 1'000'000'000),
                  static_cast<long>(left.count() % 1'000'000'000)};
      pollfd pfd{socket_.native_handle(), POLLIN, 0};
      int n = ppoll(&pfd, 1, &ts, WaitMask());
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) {
        ec = error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  bool Continue(int sig, error_code& ec) {
    if (on_interrupt_ && on_interrupt_(sig)) return true;
    signal_ = sig;
    ec = asio::error::interrupted;
    return false;
  }

  tcp::socket& socket_;
  std::chrono::milliseconds timeout_;
  const InterruptHandler& on_interrupt_;
  int signal_ = 0;
};

ClientError TransportError(std::string_view step, const error_code& ec, bool connected) {
  ClientError error;
  error.kind = ClientError::Kind::kTransport;
  error.message = std::string(step) + ": " + ec.message();
  error.connected = connected;
  return error;
}

}  // namespace

ClientResult<Endpoint> ParseEndpoint(std::string_view url) {
  auto parsed = boost::urls::parse_uri(url);
  ClientError error;
  error.kind = ClientError::Kind::kProtocol;
  if (!parsed) {
    error.message = "invalid server URL '" + std::string(url) + "'";
    return error;
  }
  if (parsed->scheme() != "http") {
    error.message = "server URL '" + std::string(url) + "': only http:// is supported";
    return error;
  }
  Endpoint endpoint;
  endpoint.host = parsed->host_address();  // an IPv6 address comes without its brackets
  if (endpoint.host.empty()) {
    error.message = "server URL '" + std::string(url) + "' has no host";
    return error;
  }
  endpoint.port = parsed->has_port() ? std::string(parsed->port()) : "80";
  endpoint.base_path = parsed->encoded_path();
  while (endpoint.base_path.ends_with('/')) endpoint.base_path.pop_back();
  return endpoint;
}

HttpClient::HttpClient(Endpoint endpoint, std::string api_key)
    : endpoint_(std::move(endpoint)), api_key_(std::move(api_key)) {}

ClientResult<HttpResponse> HttpClient::Send(const HttpRequest& request) {
  return Exchange(request, nullptr);
}

ClientResult<HttpResponse> HttpClient::Stream(const HttpRequest& request, const BodySink& sink) {
  return Exchange(request, &sink);
}

ClientResult<HttpResponse> HttpClient::Exchange(const HttpRequest& request, const BodySink* sink) {
  asio::io_context io;
  tcp::resolver resolver(io);
  error_code ec;
  auto addresses = resolver.resolve(endpoint_.host, endpoint_.port, ec);
  if (ec) return TransportError("resolve " + endpoint_.host, ec, false);
  tcp::socket socket(io);
  asio::connect(socket, addresses, ec);
  if (ec) return TransportError("connect " + endpoint_.host + ":" + endpoint_.port, ec, false);
  socket.set_option(tcp::no_delay(true), ec);

  http::request<http::string_body> req{request.method, endpoint_.base_path + request.target, 11};
  std::string host =
      endpoint_.host.find(':') != std::string::npos ? "[" + endpoint_.host + "]" : endpoint_.host;
  req.set(http::field::host, host + ":" + endpoint_.port);
  req.set(http::field::user_agent, std::string("sandstream-cli/") + kVersion);
  req.set(http::field::connection, "close");
  if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
  for (const auto& [name, value] : request.headers) req.set(name, value);
  if (!request.body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = request.body;
  }
  req.prepare_payload();

  PolledSocket stream(socket, read_timeout_, on_interrupt_);
  if (request.body_file.empty()) {
    http::write(stream, req, ec);
  } else {
    http::request<http::file_body> upload(std::move(req.base()));
    upload.body().open(request.body_file.c_str(), beast::file_mode::scan, ec);
    if (ec) {
      ClientError error;
      error.kind = ClientError::Kind::kTransport;
      error.message = request.body_file + ": " + ec.message();
      return error;
    }
    upload.prepare_payload();
    http::write(stream, upload, ec);
  }
  if (ec) return TransportError("send request", ec, true);

  auto failed = [&](std::string_view step) -> ClientError {
    if (ec == asio::error::interrupted) {
      ClientError error;
      error.kind = ClientError::Kind::kInterrupted;
      error.signal = stream.signal();
      error.message = "interrupted";
      return error;
    }
    return TransportError(step, ec, true);
  };

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  http::read_header(stream, buffer, parser, ec);
  if (ec) return failed("read response");

  HttpResponse response;
  response.status = parser.get().result_int();
  bool streaming = sink != nullptr && response.status / 100 == 2;
  char piece[64 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = piece;
    parser.get().body().size = sizeof piece;
    http::read_some(stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return failed("read response");
    std::string_view got(piece, sizeof piece - parser.get().body().size);
    if (got.empty()) continue;
    if (streaming) {
      if (!(*sink)(got)) break;
    } else if (response.body.size() + got.size() > kMaxBufferedBody) {
      ClientError error;
      error.kind = ClientError::Kind::kProtocol;
      error.message = "response body over " + std::to_string(kMaxBufferedBody) + " bytes";
      return error;
    } else {
      response.body.append(got);
    }
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  return response;
}

ClientError ApiError(const HttpResponse& response) {
  ClientError error;
  error.kind = ClientError::Kind::kApi;
  error.status = static_cast<int>(response.status);
  error_code ec;
  json::value body = json::parse(response.body, ec);
  if (!ec && body.is_object()) {
    const json::value* inner = body.as_object().if_contains("error");
    if (inner != nullptr && inner->is_object()) {
      const json::object& e = inner->as_object();
      const json::value* code = e.if_contains("code");
      const json::value* message = e.if_contains("message");
      if (code != nullptr && code->is_string()) {
        error.code = code->as_string();
        if (message != nullptr && message->is_string()) error.message = message->as_string();
        return error;
      }
    }
  }
  error.code = "http_" + std::to_string(response.status);
  std::string_view text = response.body;
  text = text.substr(0, 200);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  error.message =
      text.empty() ? std::string(http::obsolete_reason(static_cast<http::status>(response.status)))
                   : std::string(text);
  return error;
}

}  // namespace sandstream::cli
