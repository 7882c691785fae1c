// Route handlers, one file per resource. Each reads the Context and answers exactly once.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string_view>
#include <vector>

#include "api/http.h"

namespace sandstream::api {

using Handler = boost::asio::awaitable<void> (*)(Context&);

struct Route {
  http::verb method;
  std::string_view pattern;  // "/v1/sandboxes/{}/exec": each {} captures one segment
  Handler handler;
  bool open = false;          // no API key needed
  bool raw_body = false;      // allows a larger, non-JSON body (stdin)
};

const std::vector<Route>& AllRoutes();

// routes_system.cc
boost::asio::awaitable<void> GetHealth(Context& ctx);
boost::asio::awaitable<void> GetMetrics(Context& ctx);
// routes_sandboxes.cc
boost::asio::awaitable<void> CreateSandbox(Context& ctx);
boost::asio::awaitable<void> ListSandboxes(Context& ctx);
boost::asio::awaitable<void> GetSandbox(Context& ctx);
boost::asio::awaitable<void> DeleteSandbox(Context& ctx);
boost::asio::awaitable<void> SandboxLogs(Context& ctx);
boost::asio::awaitable<void> SandboxEvents(Context& ctx);
// routes_exec.cc
boost::asio::awaitable<void> Exec(Context& ctx);
boost::asio::awaitable<void> ExecStream(Context& ctx);
// routes_processes.cc
boost::asio::awaitable<void> StartProcess(Context& ctx);
boost::asio::awaitable<void> ListProcesses(Context& ctx);
boost::asio::awaitable<void> GetProcess(Context& ctx);
boost::asio::awaitable<void> KillProcess(Context& ctx);
boost::asio::awaitable<void> ProcessLogs(Context& ctx);
boost::asio::awaitable<void> ProcessStdin(Context& ctx);
boost::asio::awaitable<void> SignalProcess(Context& ctx);
boost::asio::awaitable<void> WaitProcess(Context& ctx);

}  // namespace sandstream::api
