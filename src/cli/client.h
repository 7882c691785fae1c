// The sandstream API (spec/README.md) as typed calls over HttpClient: one method per route the
// CLI uses. Bodies and answers stay Boost.JSON values; the CLI decides what to show.
#pragma once

#include <string>
#include <string_view>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "cli/http.h"

namespace sandstream::cli {

class Client {
 public:
  Client(Endpoint endpoint, std::string api_key);

  ClientResult<boost::json::object> CreateSandbox(const boost::json::object& request);
  ClientResult<boost::json::array> ListSandboxes();
  ClientResult<void> DeleteSandbox(std::string_view sandbox_id);
  // POST /v1/sandboxes/{id}/{step} (pause, resume): the sandbox after it.
  // POST .../pause or .../resume with `body` ({"mode": ...} for a pause).
  ClientResult<boost::json::object> SandboxStep(std::string_view sandbox_id, std::string_view step,
                                                const boost::json::object& body = {});

  ClientResult<boost::json::object> StartProcess(std::string_view sandbox_id,
                                                 const boost::json::object& request);
  ClientResult<boost::json::array> ListProcesses(std::string_view sandbox_id);
  ClientResult<boost::json::object> SignalProcess(std::string_view sandbox_id,
                                                  std::string_view process_id,
                                                  std::string_view signal);
  ClientResult<boost::json::object> KillProcess(std::string_view sandbox_id,
                                                std::string_view process_id);

  // Exposed ports: POST .../ports (the Port object), GET .../ports (its "ports"), DELETE
  // .../ports/{port}. WaitPort is GET .../ports/{port}/wait: it answers once something accepts
  // connections on the port, or with the server's `timeout` error after `seconds`.
  ClientResult<boost::json::object> ExposePort(std::string_view sandbox_id, int port);
  // A scoped token of the sandbox (POST .../tokens): {"id", "token", "scopes", "expires_at"...}.
  ClientResult<boost::json::object> CreateToken(std::string_view sandbox_id,
                                                const std::vector<std::string>& scopes,
                                                int64_t ttl_seconds);
  ClientResult<boost::json::array> ListPorts(std::string_view sandbox_id);
  ClientResult<void> ClosePort(std::string_view sandbox_id, int port);
  ClientResult<void> WaitPort(std::string_view sandbox_id, int port, double seconds);

  // POST .../exec/stream with base64 output, holding the command back rather than losing its
  // output (flow "wait"); with the same idempotency key and a last event id it resumes the
  // process the first call started.
  ClientResult<HttpResponse> StreamExec(std::string_view sandbox_id,
                                        const boost::json::object& request,
                                        const std::string& idempotency_key,
                                        const std::string& last_event_id, const BodySink& sink);
  // GET .../processes/{pid}/logs as SSE with base64 output; `flow` ("wait", "skip", or empty
  // for the server's default) paces a follow, resumes included.
  ClientResult<HttpResponse> StreamLogs(std::string_view sandbox_id, std::string_view process_id,
                                        bool follow, int tail, std::string_view flow,
                                        const std::string& last_event_id, const BodySink& sink);

  // Templates: POST /v1/templates?name= with the archive file as the body (streamed from the
  // file), GET /v1/templates (its "templates"), DELETE /v1/templates/{name}, and a snapshot of a
  // sandbox (POST .../snapshot).
  ClientResult<boost::json::object> ImportTemplate(std::string_view name, const std::string& file);
  // POST /v1/templates {"name", "image", "auth"?}: a pull from a registry (no auth when
  // `username` is empty).
  ClientResult<boost::json::object> PullTemplate(std::string_view name, std::string_view image,
                                                 std::string_view username,
                                                 std::string_view password);
  ClientResult<boost::json::array> ListTemplates();
  ClientResult<void> DeleteTemplate(std::string_view name);
  ClientResult<boost::json::object> Snapshot(std::string_view sandbox_id, std::string_view name,
                                             bool memory = false);
  // POST .../fork with `count`: {"sandboxes": [...]}. `memory` false: of its files, through a
  // snapshot template `name` ("" for a generated one).
  ClientResult<boost::json::object> Fork(std::string_view sandbox_id, int count, bool memory,
                                         std::string_view name);

  HttpClient& http() { return http_; }

 private:
  ClientResult<boost::json::value> Call(boost::beast::http::verb method, std::string target,
                                        const boost::json::object* body);
  ClientResult<boost::json::value> Call(HttpRequest request);

  HttpClient http_;
};

// "/v1/sandboxes/{id}" with the id percent-encoded as a path segment.
std::string SandboxPath(std::string_view sandbox_id);

}  // namespace sandstream::cli
