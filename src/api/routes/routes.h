// Route handlers, one file per resource in this folder (the table: routes.cc). Each reads the
// Context and answers exactly once.
#pragma once

#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "api/http.h"

namespace sandstream::api {

using Handler = boost::asio::awaitable<void> (*)(Context&);

struct Route {
  http::verb method;
  std::string_view pattern;  // "/v1/sandboxes/{}/exec": each {} captures one segment
  Handler handler;
  bool open = false;         // no API key needed
  bool raw_body = false;     // allows a larger, non-JSON body (stdin)
  bool stream_body = false;  // the handler reads the body itself, up to max_file_bytes
  Dialect dialect = Dialect::kSandstream;  // whose wire: how its errors are written (http.h)
};

// What a credential must be for a route (service/access.h): the admin's key; a tenant's key
// (or the admin's); or, besides those, a scoped token of the route's sandbox with this scope.
enum class Need { kAdmin, kTenant, kRead, kExec, kTerminal, kFilesRead, kFilesWrite, kPort };
Need RouteNeed(const Route& route);

const std::vector<Route>& AllRoutes();
// Every request for an exposed port (http/proxy_target.h, MatchProxy): any method, body streamed.
const Route& ProxyRoute();
// Whether a request on `route` for a paused sandbox resumes it first (Service::Wake), and
// counts as activity for its auto_pause while it is answered: all but those that read or
// change the sandbox's record (get, patch, delete, pause, resume, its journal, tokens,
// snapshots of its files).
bool WakesSandbox(const Route& route);

// system.cc
boost::asio::awaitable<void> GetHealth(Context& ctx);
boost::asio::awaitable<void> GetMetrics(Context& ctx);
// access.cc
boost::asio::awaitable<void> CreateTenant(Context& ctx);
boost::asio::awaitable<void> ListTenants(Context& ctx);
boost::asio::awaitable<void> GetTenant(Context& ctx);
boost::asio::awaitable<void> UpdateTenant(Context& ctx);
boost::asio::awaitable<void> DeleteTenant(Context& ctx);
boost::asio::awaitable<void> CreateKey(Context& ctx);
boost::asio::awaitable<void> ListKeys(Context& ctx);
boost::asio::awaitable<void> RevokeKey(Context& ctx);
boost::asio::awaitable<void> GetUsage(Context& ctx);
boost::asio::awaitable<void> CreateToken(Context& ctx);
boost::asio::awaitable<void> ListTokens(Context& ctx);
boost::asio::awaitable<void> RevokeToken(Context& ctx);
// volumes.cc
boost::asio::awaitable<void> CreateVolume(Context& ctx);
boost::asio::awaitable<void> ListVolumes(Context& ctx);
boost::asio::awaitable<void> GetVolume(Context& ctx);
boost::asio::awaitable<void> DeleteVolume(Context& ctx);
// sandboxes.cc
boost::asio::awaitable<void> CreateSandbox(Context& ctx);
boost::asio::awaitable<void> ListSandboxes(Context& ctx);
boost::asio::awaitable<void> GetSandbox(Context& ctx);
// GET /v1/sandboxes/{id}/metrics?start=&end=: its CPU, memory and disk samples.
boost::asio::awaitable<void> SandboxMetrics(Context& ctx);
// PATCH /v1/sandboxes/{id}/network: new egress rules for a sandbox made with egress.
boost::asio::awaitable<void> UpdateNetwork(Context& ctx);
boost::asio::awaitable<void> DeleteSandbox(Context& ctx);
boost::asio::awaitable<void> UpdateSandbox(Context& ctx);
boost::asio::awaitable<void> PauseSandbox(Context& ctx);
boost::asio::awaitable<void> ResumeSandbox(Context& ctx);
boost::asio::awaitable<void> SandboxLogs(Context& ctx);
boost::asio::awaitable<void> SandboxEvents(Context& ctx);
// templates.cc
boost::asio::awaitable<void> CreateTemplate(Context& ctx);
boost::asio::awaitable<void> ListTemplates(Context& ctx);
boost::asio::awaitable<void> GetTemplate(Context& ctx);
boost::asio::awaitable<void> DeleteTemplate(Context& ctx);
boost::asio::awaitable<void> SnapshotSandbox(Context& ctx);
boost::asio::awaitable<void> ForkSandbox(Context& ctx);
// exec.cc
boost::asio::awaitable<void> Exec(Context& ctx);
boost::asio::awaitable<void> ExecStream(Context& ctx);
// processes.cc
boost::asio::awaitable<void> StartProcess(Context& ctx);
boost::asio::awaitable<void> ListProcesses(Context& ctx);
boost::asio::awaitable<void> GetProcess(Context& ctx);
boost::asio::awaitable<void> KillProcess(Context& ctx);
boost::asio::awaitable<void> ProcessLogs(Context& ctx);
boost::asio::awaitable<void> ProcessStdin(Context& ctx);
boost::asio::awaitable<void> SignalProcess(Context& ctx);
boost::asio::awaitable<void> WaitProcess(Context& ctx);
// terminals.cc
boost::asio::awaitable<void> ExecPty(Context& ctx);
boost::asio::awaitable<void> ExecWs(Context& ctx);
// console.cc
boost::asio::awaitable<void> GetConsoleFile(Context& ctx);
// ports.cc
boost::asio::awaitable<void> ExposePort(Context& ctx);
boost::asio::awaitable<void> ListPorts(Context& ctx);
boost::asio::awaitable<void> GetPort(Context& ctx);
boost::asio::awaitable<void> ClosePort(Context& ctx);
boost::asio::awaitable<void> WaitPort(Context& ctx);
boost::asio::awaitable<void> ProxyPort(Context& ctx);
// The domain under which a sandbox's ports answer as {port}-{id}.{domain}: preview_domain and
// the port clients reach the daemon on ("localhost:8080").
std::string PreviewDomain(const Context& ctx);
// files.cc
boost::asio::awaitable<void> FilesList(Context& ctx);
boost::asio::awaitable<void> FilesRead(Context& ctx);
boost::asio::awaitable<void> FilesWrite(Context& ctx);
boost::asio::awaitable<void> FilesStat(Context& ctx);
boost::asio::awaitable<void> FilesMkdir(Context& ctx);
boost::asio::awaitable<void> FilesDelete(Context& ctx);
boost::asio::awaitable<void> FilesMove(Context& ctx);
boost::asio::awaitable<void> FilesWatch(Context& ctx);
// The same on a volume's files (no sandbox; relative paths from its top; no watch).
boost::asio::awaitable<void> VolumeFilesList(Context& ctx);
boost::asio::awaitable<void> VolumeFilesDelete(Context& ctx);
boost::asio::awaitable<void> VolumeFilesRead(Context& ctx);
boost::asio::awaitable<void> VolumeFilesWrite(Context& ctx);
boost::asio::awaitable<void> VolumeFilesStat(Context& ctx);
boost::asio::awaitable<void> VolumeFilesMkdir(Context& ctx);
boost::asio::awaitable<void> VolumeFilesMove(Context& ctx);
// sessions.cc
boost::asio::awaitable<void> CreateSession(Context& ctx);
boost::asio::awaitable<void> ListSessions(Context& ctx);
boost::asio::awaitable<void> GetSession(Context& ctx);
boost::asio::awaitable<void> DeleteSession(Context& ctx);
// contexts.cc
boost::asio::awaitable<void> CreateContext(Context& ctx);
boost::asio::awaitable<void> ListContexts(Context& ctx);
boost::asio::awaitable<void> GetContext(Context& ctx);
boost::asio::awaitable<void> DeleteContext(Context& ctx);
boost::asio::awaitable<void> RunCode(Context& ctx);
boost::asio::awaitable<void> GetRun(Context& ctx);
boost::asio::awaitable<void> RestartContext(Context& ctx);

}  // namespace sandstream::api
