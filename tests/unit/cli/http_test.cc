// Unit tests of the CLI's HTTP client against a scripted server on loopback: a chunked body (as
// sandstreamd sends SSE to HTTP/1.1) is decoded however it is cut and ends at its last chunk, a
// close-delimited one (HTTP/1.0) ends with the connection, and a 204 ends at its header.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/http.h"

namespace sandstream::cli {
namespace {

// Accepts one connection, reads the request head, writes `pieces` one write each, then closes;
// with `hold_open` it first waits for the client to close, so a client that waits for the end
// of the connection instead of the end of the body times out.
class OneShotServer {
 public:
  OneShotServer(std::vector<std::string> pieces, bool hold_open) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, pieces = std::move(pieces), hold_open] {
      const int conn = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) return;
      const int one = 1;
      setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      char buf[4096];
      while (request_.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = read(conn, buf, sizeof buf);
        if (n <= 0) break;
        request_.append(buf, static_cast<size_t>(n));
      }
      for (const std::string& piece : pieces) {
        if (write(conn, piece.data(), piece.size()) != static_cast<ssize_t>(piece.size())) break;
        // Separate reads on the other side: the pieces are the cuts under test.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (hold_open) {
        while (read(conn, buf, sizeof buf) > 0) {
        }
      }
      close(conn);
    });
  }
  ~OneShotServer() {
    if (thread_.joinable()) thread_.join();
    close(listener_);
  }
  OneShotServer(const OneShotServer&) = delete;
  OneShotServer& operator=(const OneShotServer&) = delete;

  Endpoint endpoint() const { return Endpoint{"127.0.0.1", std::to_string(port_), ""}; }
  // The request head the server read; valid once the exchange is over.
  const std::string& request() {
    thread_.join();
    return request_;
  }

 private:
  int listener_ = -1;
  unsigned short port_ = 0;
  std::thread thread_;
  std::string request_;
};

struct Streamed {
  ClientResult<HttpResponse> response;
  std::string body;
};

Streamed Stream(const OneShotServer& server) {
  HttpClient client(server.endpoint(), "key");
  client.set_read_timeout(std::chrono::seconds(5));
  HttpRequest request;
  request.target = "/v1/sandboxes/sb_1/processes/p/logs?follow=1";
  Streamed out;
  out.response = client.Stream(request, [&](std::string_view piece) {
    out.body.append(piece);
    return true;
  });
  return out;
}

constexpr std::string_view kEvents =
    "id: 1\nevent: start\ndata: {\"process_id\":\"p\"}\n\n"
    "id: 2\nevent: stdout\ndata: {\"chunk\":\"aGk=\"}\n\n";

TEST(HttpClientTest, DecodesAChunkedBodyCutAnywhereAndEndsAtItsLastChunk) {
  const std::string first(kEvents.substr(0, 30));
  const std::string second(kEvents.substr(30));
  const auto hex = [](size_t n) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%zx", n);
    return std::string(buf);
  };
  const std::string body = hex(first.size()) + ";ext=1\r\n" + first + "\r\n" + hex(second.size()) +
                           "\r\n" + second + "\r\n0\r\n\r\n";
  std::vector<std::string> pieces = {
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"};
  // Cuts inside a size line, inside data, and between a chunk's data and its CRLF.
  for (size_t at = 0; at < body.size(); at += 7) pieces.push_back(body.substr(at, 7));
  OneShotServer server(pieces, /*hold_open=*/true);
  Streamed got = Stream(server);
  ASSERT_TRUE(got.response.has_value()) << got.response.error().message;
  EXPECT_EQ(got.response->status, 200u);
  EXPECT_EQ(got.body, kEvents);
  EXPECT_NE(server.request().find("GET /v1/sandboxes/sb_1/processes/p/logs?follow=1 HTTP/1.1"),
            std::string::npos);
}

TEST(HttpClientTest, ReadsACloseDelimitedBodyToTheClose) {
  OneShotServer server({"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
                        std::string(kEvents.substr(0, 20)), std::string(kEvents.substr(20))},
                       /*hold_open=*/false);
  Streamed got = Stream(server);
  ASSERT_TRUE(got.response.has_value()) << got.response.error().message;
  EXPECT_EQ(got.response->status, 200u);
  EXPECT_EQ(got.body, kEvents);
}

TEST(HttpClientTest, A204EndsAtItsHeader) {
  OneShotServer server({"HTTP/1.1 204 No Content\r\n\r\n"}, /*hold_open=*/true);
  Streamed got = Stream(server);
  ASSERT_TRUE(got.response.has_value()) << got.response.error().message;
  EXPECT_EQ(got.response->status, 204u);
  EXPECT_EQ(got.body, "");
}

}  // namespace
}  // namespace sandstream::cli
