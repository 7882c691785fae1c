#include "api/routes/routes.h"

#include "api/cloudflare/routes.h"
#include "api/e2b/routes.h"

namespace sandstream::api {

const std::vector<Route>& AllRoutes() {
  using V = http::verb;
  static const std::vector<Route> kRoutes = [] {
    std::vector<Route> routes = {
        {V::get, "/healthz", GetHealth, true},
        {V::get, "/metrics", GetMetrics},
        {V::post, "/v1/sandboxes", CreateSandbox},
        {V::get, "/v1/sandboxes", ListSandboxes},
        {V::get, "/v1/sandboxes/{}", GetSandbox},
        {V::delete_, "/v1/sandboxes/{}", DeleteSandbox},
        {V::patch, "/v1/sandboxes/{}", UpdateSandbox},
        {V::get, "/v1/sandboxes/{}/metrics", SandboxMetrics},
        {V::patch, "/v1/sandboxes/{}/network", UpdateNetwork},
        {V::post, "/v1/sandboxes/{}/pause", PauseSandbox},
        {V::post, "/v1/sandboxes/{}/resume", ResumeSandbox},
        {V::get, "/v1/sandboxes/{}/logs", SandboxLogs},
        {V::get, "/v1/sandboxes/{}/events", SandboxEvents},
        {V::post, "/v1/sandboxes/{}/snapshot", SnapshotSandbox},
        {V::post, "/v1/sandboxes/{}/fork", ForkSandbox},
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
        {V::post, "/v1/sandboxes/{}/tokens", CreateToken},
        {V::get, "/v1/sandboxes/{}/tokens", ListTokens},
        {V::delete_, "/v1/sandboxes/{}/tokens/{}", RevokeToken},
        {V::post, "/v1/templates", CreateTemplate, false, false, true},
        {V::get, "/v1/templates", ListTemplates},
        {V::get, "/v1/templates/{}", GetTemplate},
        {V::delete_, "/v1/templates/{}", DeleteTemplate},
        {V::post, "/v1/volumes", CreateVolume},
        {V::get, "/v1/volumes", ListVolumes},
        {V::get, "/v1/volumes/{}", GetVolume},
        {V::delete_, "/v1/volumes/{}", DeleteVolume},
        {V::get, "/v1/volumes/{}/files", VolumeFilesList},
        {V::delete_, "/v1/volumes/{}/files", VolumeFilesDelete},
        {V::get, "/v1/volumes/{}/files/content", VolumeFilesRead},
        {V::put, "/v1/volumes/{}/files/content", VolumeFilesWrite, false, false, true},
        {V::post, "/v1/volumes/{}/files/content", VolumeFilesWrite, false, false, true},
        {V::get, "/v1/volumes/{}/files/stat", VolumeFilesStat},
        {V::post, "/v1/volumes/{}/files/mkdir", VolumeFilesMkdir},
        {V::post, "/v1/volumes/{}/files/move", VolumeFilesMove},
        {V::get, "/v1/usage", GetUsage},
        {V::post, "/v1/admin/tenants", CreateTenant},
        {V::get, "/v1/admin/tenants", ListTenants},
        {V::get, "/v1/admin/tenants/{}", GetTenant},
        {V::patch, "/v1/admin/tenants/{}", UpdateTenant},
        {V::delete_, "/v1/admin/tenants/{}", DeleteTenant},
        {V::post, "/v1/admin/tenants/{}/keys", CreateKey},
        {V::get, "/v1/admin/tenants/{}/keys", ListKeys},
        {V::delete_, "/v1/admin/tenants/{}/keys/{}", RevokeKey},
        {V::get, "/v1/admin/e2b/signed-url", e2b::FindSignedSandbox},
    };
    // E2B's control plane and envd at the root: before the console's /{} (GET /health).
    const auto& e2b = e2b::Routes();
    routes.insert(routes.end(), e2b.begin(), e2b.end());
    routes.insert(routes.end(), {
                                    {V::get, "/", GetConsoleFile, true},
                                    {V::get, "/{}", GetConsoleFile, true},
                                    {V::get, "/assets/{}", GetConsoleFile, true},
                                });
    // Under /v1/sandboxes/{id}/api and /ws: no pattern above matches theirs.
    const auto& cloudflare = cloudflare::Routes();
    routes.insert(routes.end(), cloudflare.begin(), cloudflare.end());
    return routes;
  }();
  return kRoutes;
}

Need RouteNeed(const Route& route) {
  if (route.dialect == Dialect::kCloudflare) return cloudflare::RouteNeed(route.handler);
  if (route.dialect == Dialect::kE2b || route.dialect == Dialect::kConnect) {
    return e2b::RouteNeed(route.handler);
  }
  const Handler h = route.handler;
  if (h == GetMetrics || route.pattern.starts_with("/v1/admin/")) return Need::kAdmin;
  if (h == ProxyPort) return Need::kPort;
  for (Handler read : {GetSandbox, SandboxMetrics, SandboxLogs, SandboxEvents, ListProcesses,
                       GetProcess, ProcessLogs, WaitProcess, ListSessions, GetSession, ListContexts,
                       GetContext, GetRun, ListPorts, GetPort, WaitPort}) {
    if (h == read) return Need::kRead;
  }
  for (Handler exec :
       {Exec, ExecStream, ExecWs, StartProcess, KillProcess, ProcessStdin, SignalProcess,
        CreateSession, DeleteSession, CreateContext, DeleteContext, RunCode, RestartContext}) {
    if (h == exec) return Need::kExec;
  }
  if (h == ExecPty) return Need::kTerminal;
  if (h == FilesList || h == FilesRead || h == FilesStat || h == FilesWatch) {
    return Need::kFilesRead;
  }
  if (h == FilesWrite || h == FilesDelete || h == FilesMkdir || h == FilesMove) {
    return Need::kFilesWrite;
  }
  // Creating, listing and deleting sandboxes, exposing and closing ports, tokens, usage,
  // templates.
  return Need::kTenant;
}

bool WakesSandbox(const Route& route) {
  if (route.dialect == Dialect::kE2b || route.dialect == Dialect::kConnect) {
    return e2b::WakesSandbox(route.handler);
  }
  const Handler h = route.handler;
  for (Handler keeps :
       {GetSandbox, SandboxMetrics, DeleteSandbox, UpdateSandbox, PauseSandbox, ResumeSandbox,
        SandboxLogs, SandboxEvents, CreateToken, ListTokens, RevokeToken, SnapshotSandbox}) {
    if (h == keeps) return false;
  }
  return true;
}

const Route& ProxyRoute() {
  static const Route kProxy{
      http::verb::unknown, "/v1/sandboxes/{}/ports/{}/...", ProxyPort, false, false, true};
  return kProxy;
}

}  // namespace sandstream::api
