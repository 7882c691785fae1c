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
      {V::get, "/v1/sandboxes/{}/files", FilesList},
      {V::delete_, "/v1/sandboxes/{}/files", FilesDelete},
      {V::get, "/v1/sandboxes/{}/files/content", FilesRead},
      {V::put, "/v1/sandboxes/{}/files/content", FilesWrite, false, false, true},
      {V::post, "/v1/sandboxes/{}/files/content", FilesWrite, false, false, true},
      {V::get, "/v1/sandboxes/{}/files/stat", FilesStat},
      {V::post, "/v1/sandboxes/{}/files/mkdir", FilesMkdir},
      {V::post, "/v1/sandboxes/{}/files/move", FilesMove},
      {V::get, "/v1/sandboxes/{}/files/watch", FilesWatch},
      {V::post, "/v1/sandboxes/{}/sessions", CreateSession},
      {V::get, "/v1/sandboxes/{}/sessions", ListSessions},
      {V::get, "/v1/sandboxes/{}/sessions/{}", GetSession},
      {V::delete_, "/v1/sandboxes/{}/sessions/{}", DeleteSession},
      {V::post, "/v1/sandboxes/{}/contexts", CreateContext},
      {V::get, "/v1/sandboxes/{}/contexts", ListContexts},
      {V::get, "/v1/sandboxes/{}/contexts/{}", GetContext},
      {V::delete_, "/v1/sandboxes/{}/contexts/{}", DeleteContext},
      {V::post, "/v1/sandboxes/{}/contexts/{}/run", RunCode},
      {V::get, "/v1/sandboxes/{}/contexts/{}/runs/{}", GetRun},
      {V::post, "/v1/sandboxes/{}/contexts/{}/restart", RestartContext},
      {V::get, "/v1/sandboxes/{}/exec/pty", ExecPty},
      {V::get, "/v1/sandboxes/{}/exec/ws", ExecWs},
      {V::post, "/v1/sandboxes/{}/ports", ExposePort},
      {V::get, "/v1/sandboxes/{}/ports", ListPorts},
      {V::get, "/v1/sandboxes/{}/ports/{}", GetPort},
      {V::delete_, "/v1/sandboxes/{}/ports/{}", ClosePort},
      {V::get, "/v1/sandboxes/{}/ports/{}/wait", WaitPort},
      {V::get, "/", GetConsoleFile, true},
      {V::get, "/{}", GetConsoleFile, true},
      {V::get, "/assets/{}", GetConsoleFile, true},
  };
  return kRoutes;
}

const Route& ProxyRoute() {
  static const Route kProxy{http::verb::unknown, "/v1/sandboxes/{}/ports/{}/...", ProxyPort,
                            false, false, true};
  return kProxy;
}

}  // namespace sandstream::api
