// What E2B's SDKs (the `e2b` packages) call, served by sandstream (docs/e2b.md): the control
// plane at the daemon's root (/v2/sandboxes, /sandboxes/{id}, with X-API-KEY), and envd, the
// agent E2B runs in every sandbox, also at the root: its Connect RPCs (/process.Process/*,
// /filesystem.Filesystem/*) and its HTTP routes (/files, /health), and the code interpreter's
// (/execute, /contexts), for the sandbox the E2b-Sandbox-Id header names and with that
// sandbox's access token. Thin adapters over the
// service calls, streams and errors of sandstream's own routes.
#pragma once

#include <string_view>
#include <vector>

#include "api/routes/routes.h"
#include "api/server.h"
#include "base/result.h"
#include "sandbox/files.h"
#include "service/service.h"

namespace sandstream::api::e2b {

const std::vector<Route>& Routes();
// The scope a credential needs for one of Routes()' control-plane handlers (envd's routes
// admit their callers themselves, by the sandbox's access token).
Need RouteNeed(Handler handler);
// Whether a request on one of Routes()' handlers resumes its paused sandbox first: envd's
// (processes, files), not the control plane's (which pause, resume and read the record).
bool WakesSandbox(Handler handler);
// The dialect of a request no route matched: E2B's paths hear "no such route" in its shape.
std::optional<Dialect> DialectOf(std::string_view path);

// Whether the router admits callers of `route` from the request's head (AdmitEnvdHead): every
// envd route but /files with a signed URL (`signed_url`: ?signature= is given), whose handler
// judges the signature before it reads any body.
bool AdmitsFromHead(const Route& route, bool signed_url);
// For the router, before any of the body is read: the refusal of an envd request whose head
// does not show a live access token (X-Access-Token) of the sandbox E2b-Sandbox-Id names, a
// 401 whether or not that sandbox exists (400 with no E2b-Sandbox-Id). `unknown_key`: the
// token names a key this node does not know (yet). A volume's files (/volumecontent/{id}/...)
// need the Bearer token of that volume instead.
std::optional<Error> AdmitEnvdHead(const Route& route, const http::request_header<>& head,
                                   bool signed_url, const ServerOptions& options,
                                   bool* unknown_key);
// The holder (kAdminHolder, a key's id) of `token` if it is volume `volume_id`'s token, handed
// to the admin or to a key that is live, of `tenant` when one is named (volumes.cc).
std::optional<std::string> VolumeHolder(const ServerOptions& options, std::string_view volume_id,
                                        std::string_view token,
                                        std::optional<std::string_view> tenant = {});
Error VolumeUnauthorized();
// How an envd call is answered: by one response, or by a stream (EnvdSandbox).
enum class EnvdCall { kRequest, kStream };
// The sandbox an envd request is for, with its caller admitted: X-Access-Token must be a live
// access token of the sandbox E2b-Sandbox-Id names (a 401 otherwise, whether or not it
// exists); a sandbox that is gone is then SandboxGone, as E2B's edge answers. Sets
// ctx.principal to a token of that sandbox, standing on the key it was handed to. A call
// answered by a stream (kStream, or a Connect streaming RPC) counts against the tenant's
// streams.
Result<const SandboxEntry*> EnvdSandbox(Context& ctx, EnvdCall call = EnvdCall::kRequest);
// The sandbox of a /files request: with ?signature= a signed URL's (the SDKs' download_url,
// upload_url: `operation` "read" or "write", expired ones refused), whichever sandbox's token
// made it, with no header needed; else EnvdSandbox's.
boost::asio::awaitable<Result<const SandboxEntry*>> FilesSandbox(Context& ctx,
                                                                 std::string_view operation);
// GET /v1/admin/e2b/signed-url (the admin's; what a gateway asks each node): the sandbox here
// whose token made a signed URL (its query as the URL's, plus `operation`), or 404.
boost::asio::awaitable<void> FindSignedSandbox(Context& ctx);
// The sandbox user an envd call acts as: `Authorization: Basic base64("user:")` on RPCs, the
// `username` query on /files (a signed URL's only from its query); "user" when neither is
// given, "root" the other one there is.
Result<bool> ActsAsRoot(const Context& ctx);

// The sandbox's files as the user an envd call acts as (ActsAsRoot), and that user's home,
// from which envd takes relative paths.
// Holds no SandboxEntry: a call that waits may outlive the sandbox's entry.
struct EnvdFiles {
  std::string sandbox_id;
  std::shared_ptr<sandbox::Sandbox> runtime;
  sandbox::SandboxFs fs;
  std::string home;

  std::string Resolve(std::string_view path) const;
};
Result<EnvdFiles> OpenFiles(Context& ctx, const SandboxEntry& sb);
// A file call's error as envd gives it: the kernel's refusals (EACCES, EPERM), which
// sandstream's own routes answer as invalid_request, are permission_denied (403) here.
// (A full disk, ENOSPC and its kin, is answered by the upload route itself: 507.)
Error Refusal(Error e);

// control.cc: the control plane.
boost::asio::awaitable<void> CreateSandbox(Context& ctx);
boost::asio::awaitable<void> ListSandboxes(Context& ctx);
boost::asio::awaitable<void> GetSandbox(Context& ctx);
boost::asio::awaitable<void> KillSandbox(Context& ctx);
boost::asio::awaitable<void> ConnectSandbox(Context& ctx);
boost::asio::awaitable<void> PauseSandbox(Context& ctx);
boost::asio::awaitable<void> ResumeSandbox(Context& ctx);
boost::asio::awaitable<void> SetTimeout(Context& ctx);
// PUT /sandboxes/{id}/network: E2B's allowOut and denyOut as the sandbox's egress rules.
boost::asio::awaitable<void> UpdateNetwork(Context& ctx);
// GET /sandboxes/{id}/metrics?start=&end= (Unix seconds): its samples, as SandboxMetric.
boost::asio::awaitable<void> SandboxMetrics(Context& ctx);
// GET /sandboxes/metrics?sandbox_ids=a,b: each one's latest sample.
boost::asio::awaitable<void> SandboxesMetrics(Context& ctx);
// POST /sandboxes/{id}/fork {count, timeout}: forks with memory (Service::ForkSandbox).
boost::asio::awaitable<void> ForkSandbox(Context& ctx);
// POST /sandboxes/{id}/snapshots {name}, GET /snapshots?sandboxID=&name=&limit=, and
// DELETE /templates/{id}: memory snapshots, which are templates (Sandbox.create takes them).
boost::asio::awaitable<void> CreateSnapshot(Context& ctx);
boost::asio::awaitable<void> ListSnapshots(Context& ctx);
boost::asio::awaitable<void> DeleteTemplate(Context& ctx);
boost::asio::awaitable<void> NotSupported(Context& ctx);

// volumes.cc: /volumes (the control plane's) and /volumecontent/{id}/... (a volume's token).
boost::asio::awaitable<void> CreateVolume(Context& ctx);
boost::asio::awaitable<void> ListVolumes(Context& ctx);
boost::asio::awaitable<void> GetVolume(Context& ctx);
boost::asio::awaitable<void> DestroyVolume(Context& ctx);
boost::asio::awaitable<void> VolumeListDir(Context& ctx);
boost::asio::awaitable<void> VolumeMakeDir(Context& ctx);
boost::asio::awaitable<void> VolumeStat(Context& ctx);
boost::asio::awaitable<void> VolumeUpdateMetadata(Context& ctx);
boost::asio::awaitable<void> VolumeRemove(Context& ctx);
boost::asio::awaitable<void> VolumeReadFile(Context& ctx);
boost::asio::awaitable<void> VolumeWriteFile(Context& ctx);
// process.cc: process.Process/{method}.
boost::asio::awaitable<void> ProcessRpc(Context& ctx);
// process.Process/StreamInput: a client stream, read as it comes.
boost::asio::awaitable<void> StreamInput(Context& ctx);
// filesystem.cc: filesystem.Filesystem/{method}.
boost::asio::awaitable<void> FilesystemRpc(Context& ctx);
// files.cc: envd's HTTP routes.
boost::asio::awaitable<void> Health(Context& ctx);
boost::asio::awaitable<void> ReadFile(Context& ctx);
boost::asio::awaitable<void> WriteFiles(Context& ctx);
// interpreter.cc: the code interpreter's routes (/execute, /contexts).
boost::asio::awaitable<void> ExecuteCode(Context& ctx);
boost::asio::awaitable<void> ListCodeContexts(Context& ctx);
boost::asio::awaitable<void> CreateCodeContext(Context& ctx);
boost::asio::awaitable<void> RemoveCodeContext(Context& ctx);
boost::asio::awaitable<void> RestartCodeContext(Context& ctx);

}  // namespace sandstream::api::e2b
