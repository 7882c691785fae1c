// A route handler's Context for the API fuzz targets: a real Server and Service over a runtime
// that creates nothing and a store in memory, a socket never opened, and one sandbox entry. The
// parsers under test read the request and the service's options, never the network.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "api/http.h"
#include "api/server.h"
#include "service/service.h"
#include "service/store.h"

namespace sandstream::fuzz {

namespace http = boost::beast::http;

// The key every request must carry (Authorization: Bearer fuzz-key), as with a real daemon.
inline constexpr const char* kApiKey = "fuzz-key";

class NoRuntime : public sandbox::Runtime {
 public:
  std::string_view name() const override { return "none"; }
  sandbox::Op<Result<std::unique_ptr<sandbox::Sandbox>>> Create(sandbox::SandboxSpec) override {
    co_return Error{ErrorCode::kInternal, "the fuzz runtime creates no sandboxes"};
  }
  void CleanupLeftovers(const std::vector<std::string>&) override {}
};

// Built once per process and never destroyed: a fuzz target runs until the process exits.
struct ApiWorld {
  ApiWorld()
      : store(OpenStore()),
        service(io.get_executor(), runtime, *store, Options()),
        server(io.get_executor(), service, api::ServerOptions{.api_key = kApiKey}),
        stream(io),
        sandbox(io.get_executor()) {
    sandbox.id = "sb_fuzz";
    sandbox.template_name = "base";
    sandbox.cwd = "/workspace";
    sandbox.env = {{"HOME", "/home/user"}, {"LANG", "C.UTF-8"}};
  }

  static std::unique_ptr<Store> OpenStore() {
    auto store = Store::Open(":memory:");
    if (!store) std::abort();
    return std::move(*store);
  }
  static ServiceOptions Options() {
    ServiceOptions o;
    o.base_env = {"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm"};
    return o;
  }

  // A Context for `req` with `query`, as the session builds it.
  api::Context MakeContext(http::request<http::string_body>& req,
                           std::map<std::string, std::string, std::less<>> query = {}) {
    return api::Context{.server = server,
                        .service = service,
                        .req = req,
                        .stream = stream,
                        .request_id = "req-fuzz",
                        .params = {"sb_fuzz"},
                        .query = std::move(query)};
  }

  boost::asio::io_context io;
  NoRuntime runtime;
  std::unique_ptr<Store> store;
  Service service;
  api::Server server;
  boost::beast::tcp_stream stream;
  SandboxEntry sandbox;
};

inline ApiWorld& World() {
  static ApiWorld* const world = new ApiWorld();
  return *world;
}

}  // namespace sandstream::fuzz
