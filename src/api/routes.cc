#include "api/routes.h"

namespace sandstream::api {

const std::vector<Route>& AllRoutes() {
  using V = http::verb;
  static const std::vector<Route> kRoutes = {
      {V::get, "/healthz", GetHealth, true},
      {V::get, "/metrics", GetMetrics},
      {V::post, "/v1/sandboxes", CreateSandbox},
      {V::get, "/v1/sandboxes", ListSandboxes},
      {V::get, "/v1/sandboxes/{}", GetSandbox},
      {V::delete_, "/v1/sandboxes/{}", DeleteSandbox},
      {V::get, "/v1/sandboxes/{}/logs", SandboxLogs},
      {V::get, "/v1/sandboxes/{}/events", SandboxEvents},
      {V::post, "/v1/sandboxes/{}/exec", Exec},
      {V::post, "/v1/sandboxes/{}/exec/stream", ExecStream},
      {V::post, "/v1/sandboxes/{}/processes", StartProcess},
      {V::get, "/v1/sandboxes/{}/processes", ListProcesses},
      {V::get, "/v1/sandboxes/{}/processes/{}", GetProcess},
      {V::delete_, "/v1/sandboxes/{}/processes/{}", KillProcess},
      {V::get, "/v1/sandboxes/{}/processes/{}/logs", ProcessLogs},
      {V::post, "/v1/sandboxes/{}/processes/{}/stdin", ProcessStdin, false, true},
      {V::post, "/v1/sandboxes/{}/processes/{}/signal", SignalProcess},
      {V::get, "/v1/sandboxes/{}/processes/{}/wait", WaitProcess},
  };
  return kRoutes;
}

}  // namespace sandstream::api
