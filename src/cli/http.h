// A synchronous HTTP/1.1 client over TCP (Boost.Beast) for the sandstream API: one connection
// per request, bodies read as they arrive, waits bounded by a read timeout and interruptible by
// the signals of interrupt.h. Plain http:// only.
#pragma once

#include <boost/beast/http/verb.hpp>
#include <boost/system/result.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandstream::cli {

struct ClientError {
  enum class Kind {
    kApi,          // the server answered with an error
    kTransport,    // could not connect, or the connection failed or timed out
    kInterrupted,  // a signal arrived while waiting (see `signal`)
    kProtocol,     // the server's answer made no sense
  };
  Kind kind = Kind::kTransport;
  int status = 0;    // kApi: the HTTP status
  std::string code;  // kApi: the error code of spec/errors.md
  std::string message;
  int signal = 0;          // kInterrupted
  bool connected = false;  // kTransport: whether the request reached the server at all
};

template <typename T>
using ClientResult = boost::system::result<T, ClientError>;

// Where the server is: from a URL like http://127.0.0.1:8080 or http://host/prefix.
struct Endpoint {
  std::string host;
  std::string port;
  std::string base_path;  // prefix of every target, without a trailing '/'
};

ClientResult<Endpoint> ParseEndpoint(std::string_view url);

struct HttpRequest {
  boost::beast::http::verb method = boost::beast::http::verb::get;
  std::string target;  // below the endpoint's base path, with its query
  std::string body;    // sent as JSON when non-empty
  std::string body_file;  // else this file, streamed as it is read (its type in `headers`)
  std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpResponse {
  unsigned status = 0;
  std::string body;
};

// A signal arrived while waiting for the server: return true to keep waiting, false to give up
// with a kInterrupted error.
using InterruptHandler = std::function<bool(int signal)>;

// Receives a streamed body as it arrives; returns false to stop reading.
using BodySink = std::function<bool(std::string_view piece)>;

class HttpClient {
 public:
  HttpClient(Endpoint endpoint, std::string api_key);

  // Sends a request and reads the whole response, whatever its status.
  ClientResult<HttpResponse> Send(const HttpRequest& request);

  // Sends a request; a 2xx body is handed to `sink` piece by piece as it arrives (the returned
  // body is then empty), any other status is read whole and returned.
  ClientResult<HttpResponse> Stream(const HttpRequest& request, const BodySink& sink);

  void set_read_timeout(std::chrono::milliseconds timeout) { read_timeout_ = timeout; }
  void set_interrupt_handler(InterruptHandler handler) { on_interrupt_ = std::move(handler); }
  const Endpoint& endpoint() const { return endpoint_; }

 private:
  ClientResult<HttpResponse> Exchange(const HttpRequest& request, const BodySink* sink);

  Endpoint endpoint_;
  std::string api_key_;
  std::chrono::milliseconds read_timeout_{std::chrono::minutes(2)};
  InterruptHandler on_interrupt_;
};

// The server's error for a non-2xx response: its {"error": {"code", "message"}}, or a
// description of the status when the body is not that.
ClientError ApiError(const HttpResponse& response);

}  // namespace sandstream::cli
