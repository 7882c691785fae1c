#include "api/cloudflare/routes.h"

namespace sandstream::api::cloudflare {

const std::vector<Route>& Routes() {
  using V = http::verb;
  constexpr bool kKey = false;  // every route needs a credential
  constexpr auto kCf = Dialect::kCloudflare;
  // Literal segments before {}: the first matching pattern wins.
  static const std::vector<Route> kRoutes = {
      {V::get, "/v1/sandboxes/{}/api/ping", Ping, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/api/version", Version, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/session/create", CreateSession, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/session/delete", DeleteSession, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/api/session/list", ListSessions, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/execute", Execute, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/execute/stream", ExecuteStream, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/process/start", StartProcess, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/api/process/list", ListProcesses, kKey, false, false, kCf},
      {V::delete_, "/v1/sandboxes/{}/api/process/kill-all", KillAllProcesses, kKey, false, false,
       kCf},
      {V::get, "/v1/sandboxes/{}/api/process/{}", GetProcess, kKey, false, false, kCf},
      {V::delete_, "/v1/sandboxes/{}/api/process/{}", KillProcess, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/api/process/{}/logs", ProcessLogs, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/api/process/{}/stream", StreamProcessLogs, kKey, false, false,
       kCf},
      {V::post, "/v1/sandboxes/{}/api/contexts", CreateCodeContext, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/api/contexts", ListCodeContexts, kKey, false, false, kCf},
      {V::delete_, "/v1/sandboxes/{}/api/contexts/{}", DeleteCodeContext, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/execute/code", ExecuteCode, kKey, false, false, kCf},
      // A whole file in a JSON body: the larger limit of stdin uploads (max_stdin_bytes).
      {V::post, "/v1/sandboxes/{}/api/write", WriteFile, kKey, true, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/read", ReadFile, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/read/stream", ReadFileStream, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/mkdir", Mkdir, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/delete", DeleteFile, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/rename", RenameFile, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/move", MoveFile, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/list-files", ListFiles, kKey, false, false, kCf},
      {V::post, "/v1/sandboxes/{}/api/exists", Exists, kKey, false, false, kCf},
      {V::get, "/v1/sandboxes/{}/ws/pty", PtySocket, kKey, false, false, kCf},
  };
  return kRoutes;
}

Need RouteNeed(Handler h) {
  for (Handler read :
       {Ping, Version, ListSessions, ListProcesses, GetProcess, ProcessLogs, StreamProcessLogs}) {
    if (h == read) return Need::kRead;
  }
  if (h == ReadFile || h == ReadFileStream || h == ListFiles || h == Exists) {
    return Need::kFilesRead;
  }
  if (h == PtySocket) return Need::kTerminal;
  if (h == WriteFile || h == Mkdir || h == DeleteFile || h == RenameFile || h == MoveFile) {
    return Need::kFilesWrite;
  }
  // Running, starting and killing commands; sessions.
  return Need::kExec;
}

bool Streams(Handler h) {
  return h == ExecuteStream || h == StreamProcessLogs || h == ReadFileStream ||
         h == ExecuteCode || h == PtySocket;
}

bool OwnsPath(std::string_view path) {
  constexpr std::string_view kPrefix = "/v1/sandboxes/";
  if (!path.starts_with(kPrefix)) return false;
  path.remove_prefix(kPrefix.size());
  const size_t slash = path.find('/');
  if (slash == 0 || slash == std::string_view::npos) return false;
  path.remove_prefix(slash);
  return path == "/api" || path.starts_with("/api/") || path.starts_with("/ws/");
}

}  // namespace sandstream::api::cloudflare
