// The container API that Cloudflare's SandboxClient (@cloudflare/sandbox) speaks, served under
// /v1/sandboxes/{id} so that the sandbox's URL is the client's baseUrl (docs/cloudflare.md).
// Thin adapters: each handler translates one call onto the service calls, streams and errors
// of sandstream's own routes, and decides nothing of its own about processes or files.
#pragma once

#include <string_view>
#include <vector>

#include "api/routes/routes.h"

namespace sandstream::api::cloudflare {

const std::vector<Route>& Routes();
// The scope a token needs for one of Routes()' handlers.
Need RouteNeed(Handler handler);
// Whether the handler answers with a stream (counted against a tenant's stream quota).
bool Streams(Handler handler);
// Whether `path` lies in this API (/v1/sandboxes/{id}/api/..., /v1/sandboxes/{id}/ws/...):
// its refusals are written in its error shape even when no route matches.
bool OwnsPath(std::string_view path);

// utility.cc
boost::asio::awaitable<void> Ping(Context& ctx);
boost::asio::awaitable<void> Version(Context& ctx);
boost::asio::awaitable<void> CreateSession(Context& ctx);
boost::asio::awaitable<void> DeleteSession(Context& ctx);
boost::asio::awaitable<void> ListSessions(Context& ctx);
// commands.cc
boost::asio::awaitable<void> Execute(Context& ctx);
boost::asio::awaitable<void> ExecuteStream(Context& ctx);
// processes.cc
boost::asio::awaitable<void> StartProcess(Context& ctx);
boost::asio::awaitable<void> ListProcesses(Context& ctx);
boost::asio::awaitable<void> GetProcess(Context& ctx);
boost::asio::awaitable<void> KillProcess(Context& ctx);
boost::asio::awaitable<void> KillAllProcesses(Context& ctx);
boost::asio::awaitable<void> ProcessLogs(Context& ctx);
boost::asio::awaitable<void> StreamProcessLogs(Context& ctx);
// interpreter.cc
boost::asio::awaitable<void> CreateCodeContext(Context& ctx);
boost::asio::awaitable<void> ListCodeContexts(Context& ctx);
boost::asio::awaitable<void> DeleteCodeContext(Context& ctx);
boost::asio::awaitable<void> ExecuteCode(Context& ctx);
// files.cc
boost::asio::awaitable<void> WriteFile(Context& ctx);
boost::asio::awaitable<void> ReadFile(Context& ctx);
boost::asio::awaitable<void> ReadFileStream(Context& ctx);
boost::asio::awaitable<void> Mkdir(Context& ctx);
boost::asio::awaitable<void> DeleteFile(Context& ctx);
boost::asio::awaitable<void> RenameFile(Context& ctx);
boost::asio::awaitable<void> MoveFile(Context& ctx);
boost::asio::awaitable<void> ListFiles(Context& ctx);
boost::asio::awaitable<void> Exists(Context& ctx);
// terminal.cc
boost::asio::awaitable<void> PtySocket(Context& ctx);

}  // namespace sandstream::api::cloudflare
