// What the HTTP front's tests share: a Service on the directory runtime with a Store in a
// temporary directory, a Server on a loopback port, and a blocking client run on a thread of its
// own (with socket timeouts) while the test's thread runs the server's event loop.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "../process/test_loop.h"
#include "api/server.h"
#include "service/service.h"
#include "service/store.h"

namespace sandstream::unit {

using boost::asio::ip::tcp;

// Runs `f` on a thread of its own while this thread runs `io`; returns what `f` returned.
template <class F>
auto OnThread(asio::io_context& io, F f) -> decltype(f()) {
  auto result = std::async(std::launch::async, std::move(f));
  const bool done = RunUntil(io, [&] {
    return result.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  if (!done) throw std::runtime_error("the client thread timed out");
  return result.get();
}

// A plain blocking socket: every read and write gives up after 5 s.
class RawClient {
 public:
  struct Response {
    int status = 0;
    std::string head;  // status line and fields
    std::string body;
  };

  explicit RawClient(const tcp::endpoint& ep) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(ep.port());
    addr.sin_addr.s_addr = htonl(ep.address().to_v4().to_uint());
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads until `needle` has arrived (true), or the connection ended or went quiet (false).
  bool ReadUntil(std::string_view needle) {
    while (received_.find(needle) == std::string::npos) {
      if (!ReadSome()) return false;
    }
    return true;
  }

  // One response with a Content-Length body (or none).
  std::optional<Response> ReadResponse() {
    if (!ReadUntil("\r\n\r\n")) return std::nullopt;
    const size_t end = received_.find("\r\n\r\n") + 4;
    Response r;
    r.head = received_.substr(0, end);
    if (r.head.size() < 12 || !r.head.starts_with("HTTP/1.")) return std::nullopt;
    r.status = std::stoi(r.head.substr(9, 3));
    size_t length = 0;
    if (auto cl = Field(r.head, "content-length")) length = std::stoul(*cl);
    while (received_.size() < end + length) {
      if (!ReadSome()) return std::nullopt;
    }
    r.body = received_.substr(end, length);
    received_.erase(0, end + length);
    return r;
  }

  // True when the server closed the connection with nothing more to read.
  bool ReadEof() {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return received_.empty();
      if (n < 0) return false;
      received_.append(buf, static_cast<size_t>(n));
    }
  }

  // Takes what has arrived by now, without waiting: for a test whose thread runs the server.
  void Poll() {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return;
      received_.append(buf, static_cast<size_t>(n));
    }
  }

  const std::string& received() const { return received_; }

  // The value of header field `name` (lower case) in `head`.
  static std::optional<std::string> Field(const std::string& head, const std::string& name) {
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t at = lower.find("\r\n" + name + ":");
    if (at == std::string::npos) return std::nullopt;
    const size_t from = head.find_first_not_of(' ', at + name.size() + 3);
    return head.substr(from, head.find("\r\n", from) - from);
  }

 private:
  bool ReadSome() {
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    received_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

// A service on the directory runtime and, once Serve() is called, a server in front of it.
class ServerHarness {
 public:
  static constexpr const char* kKey = "test-key";

  ServerHarness() : runtime_(dir_.path() + "/sandboxes") {
    IgnoreSigpipe();
    auto store = Store::Open(dir_.path() + "/state.db");
    if (!store) throw std::runtime_error("store: " + store.error().message);
    store_ = std::move(*store);
    ServiceOptions options;
    options.images_dir = dir_.path() + "/images";
    options.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"};
    options.kill_grace = std::chrono::milliseconds(200);
    options.teardown_on_exit = true;
    service_ = std::make_unique<Service>(io_.get_executor(), runtime_, *store_, options);
  }

  ~ServerHarness() {
    if (server_) {
      server_->StopAccepting();
      server_->EndStreams();
      server_->CloseConnections();
      (void)RunUntil(io_, [&] { return server_->open_sessions() == 0 && run_ended_; },
                     std::chrono::seconds(5));
      RunFor(io_, std::chrono::milliseconds(50));  // connections being refused end too
    }
    try {
      RunTask(io_, service_->Shutdown(), std::chrono::seconds(5));
    } catch (const std::exception&) {
    }
    server_.reset();
    service_.reset();
  }

  static api::ServerOptions Options() {
    api::ServerOptions options;
    options.api_key = kKey;
    return options;
  }

  // Listens on a loopback port and accepts.
  void Serve(api::ServerOptions options = Options()) {
    server_ = std::make_unique<api::Server>(io_.get_executor(), *service_, options);
    auto ep = server_->Listen("127.0.0.1:0");
    if (!ep) throw std::runtime_error("listen: " + ep.error().message);
    endpoint_ = *ep;
    asio::co_spawn(io_, server_->Run(), [this](std::exception_ptr) { run_ended_ = true; });
  }

  // A server that is not listening: for sessions the test accepts itself.
  void MakeServer(api::ServerOptions options = Options()) {
    server_ = std::make_unique<api::Server>(io_.get_executor(), *service_, options);
    run_ended_ = true;
  }

  const SandboxEntry* NewSandbox() {
    auto sb = RunTask(io_, service_->CreateSandbox(SandboxRequest()));
    if (!sb) throw std::runtime_error("sandbox: " + sb.error().message);
    return *sb;
  }

 protected:
  asio::io_context io_;  // first: what runs on it ends before it does
  TempDir dir_;
  sandbox::DirectoryRuntime runtime_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<api::Server> server_;
  tcp::endpoint endpoint_;
  bool run_ended_ = false;
};

}  // namespace sandstream::unit
