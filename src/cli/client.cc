// The sandstream API as typed calls; see client.h.
#include "cli/client.h"

#include <cstdio>

#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

namespace sandstream::cli {
namespace {

namespace json = boost::json;
using boost::beast::http::verb;

std::string Segment(std::string_view text) {
  return boost::urls::encode(text, boost::urls::unreserved_chars);
}

ClientError Unexpected(std::string what) {
  ClientError error;
  error.kind = ClientError::Kind::kProtocol;
  error.message = "unexpected response: " + std::move(what);
  return error;
}

ClientResult<json::object> AsObject(ClientResult<json::value> value) {
  if (!value) return value.error();
  if (!value->is_object()) return Unexpected("expected a JSON object");
  return std::move(value->as_object());
}

ClientResult<json::array> ArrayField(ClientResult<json::value> value, std::string_view key) {
  if (!value) return value.error();
  json::value* field = value->is_object() ? value->as_object().if_contains(key) : nullptr;
  if (field == nullptr || !field->is_array()) {
    return Unexpected("expected {\"" + std::string(key) + "\": [...]}");
  }
  return std::move(field->as_array());
}

std::string ProcessPath(std::string_view sandbox_id, std::string_view process_id) {
  return SandboxPath(sandbox_id) + "/processes/" + Segment(process_id);
}

}  // namespace

std::string SandboxPath(std::string_view sandbox_id) {
  return "/v1/sandboxes/" + Segment(sandbox_id);
}

Client::Client(Endpoint endpoint, std::string api_key)
    : http_(std::move(endpoint), std::move(api_key)) {}

ClientResult<json::value> Client::Call(verb method, std::string target, const json::object* body) {
  HttpRequest request;
  request.method = method;
  request.target = std::move(target);
  if (body != nullptr) request.body = json::serialize(*body);
  return Call(std::move(request));
}

ClientResult<json::value> Client::Call(HttpRequest request) {
  request.headers.emplace_back("Accept", "application/json");
  ClientResult<HttpResponse> response = http_.Send(request);
  if (!response) return response.error();
  if (response->status / 100 != 2) return ApiError(*response);
  if (response->body.empty()) return json::value();
  boost::system::error_code ec;
  json::value parsed = json::parse(response->body, ec);
  if (ec) return Unexpected("invalid JSON: " + ec.message());
  return parsed;
}

ClientResult<json::object> Client::CreateSandbox(const json::object& request) {
  return AsObject(Call(verb::post, "/v1/sandboxes", &request));
}

ClientResult<json::array> Client::ListSandboxes() {
  return ArrayField(Call(verb::get, "/v1/sandboxes", nullptr), "sandboxes");
}

ClientResult<void> Client::DeleteSandbox(std::string_view sandbox_id) {
  ClientResult<json::value> result = Call(verb::delete_, SandboxPath(sandbox_id), nullptr);
  if (!result) return result.error();
  return {};
}

ClientResult<json::object> Client::SandboxStep(std::string_view sandbox_id, std::string_view step,
                                               const json::object& body) {
  return AsObject(Call(verb::post, SandboxPath(sandbox_id) + "/" + std::string(step), &body));
}

ClientResult<json::object> Client::StartProcess(std::string_view sandbox_id,
                                                const json::object& request) {
  return AsObject(Call(verb::post, SandboxPath(sandbox_id) + "/processes", &request));
}

ClientResult<json::array> Client::ListProcesses(std::string_view sandbox_id) {
  return ArrayField(Call(verb::get, SandboxPath(sandbox_id) + "/processes", nullptr), "processes");
}

ClientResult<json::object> Client::SignalProcess(std::string_view sandbox_id,
                                                 std::string_view process_id,
                                                 std::string_view signal) {
  json::object body{{"signal", signal}};
  return AsObject(Call(verb::post, ProcessPath(sandbox_id, process_id) + "/signal", &body));
}

ClientResult<json::object> Client::KillProcess(std::string_view sandbox_id,
                                               std::string_view process_id) {
  return AsObject(Call(verb::delete_, ProcessPath(sandbox_id, process_id), nullptr));
}

ClientResult<json::object> Client::ImportTemplate(std::string_view name, const std::string& file) {
  HttpRequest request;
  request.method = verb::post;
  request.target = "/v1/templates?name=" + Segment(name);
  request.body_file = file;
  request.headers.emplace_back("Content-Type", "application/x-tar");
  return AsObject(Call(std::move(request)));
}

ClientResult<json::object> Client::PullTemplate(std::string_view name, std::string_view image,
                                                std::string_view username,
                                                std::string_view password) {
  json::object body{{"name", name}, {"image", image}};
  if (!username.empty()) body["auth"] = {{"username", username}, {"password", password}};
  return AsObject(Call(verb::post, "/v1/templates", &body));
}

ClientResult<json::array> Client::ListTemplates() {
  return ArrayField(Call(verb::get, "/v1/templates", nullptr), "templates");
}

ClientResult<void> Client::DeleteTemplate(std::string_view name) {
  ClientResult<json::value> result = Call(verb::delete_, "/v1/templates/" + Segment(name), nullptr);
  if (!result) return result.error();
  return {};
}

ClientResult<json::object> Client::Snapshot(std::string_view sandbox_id, std::string_view name,
                                            bool memory) {
  json::object body{{"name", name}, {"memory", memory}};
  return AsObject(Call(verb::post, SandboxPath(sandbox_id) + "/snapshot", &body));
}

ClientResult<json::object> Client::Fork(std::string_view sandbox_id, int count, bool memory,
                                        std::string_view name) {
  json::object body{{"count", count}, {"memory", memory}};
  if (!name.empty()) body["name"] = name;
  return AsObject(Call(verb::post, SandboxPath(sandbox_id) + "/fork", &body));
}

ClientResult<json::object> Client::ExposePort(std::string_view sandbox_id, int port) {
  json::object body{{"port", port}};
  return AsObject(Call(verb::post, SandboxPath(sandbox_id) + "/ports", &body));
}

ClientResult<json::object> Client::CreateToken(std::string_view sandbox_id,
                                               const std::vector<std::string>& scopes,
                                               int64_t ttl_seconds) {
  json::array names;
  for (const auto& s : scopes) names.emplace_back(s);
  json::object body{{"scopes", std::move(names)}, {"ttl_seconds", ttl_seconds}};
  return AsObject(Call(verb::post, SandboxPath(sandbox_id) + "/tokens", &body));
}

ClientResult<json::array> Client::ListPorts(std::string_view sandbox_id) {
  return ArrayField(Call(verb::get, SandboxPath(sandbox_id) + "/ports", nullptr), "ports");
}

ClientResult<void> Client::ClosePort(std::string_view sandbox_id, int port) {
  ClientResult<json::value> result =
      Call(verb::delete_, SandboxPath(sandbox_id) + "/ports/" + std::to_string(port), nullptr);
  if (!result) return result.error();
  return {};
}

ClientResult<void> Client::WaitPort(std::string_view sandbox_id, int port, double seconds) {
  char query[64];
  std::snprintf(query, sizeof query, "/wait?timeout_seconds=%g", seconds);
  ClientResult<json::value> result =
      Call(verb::get, SandboxPath(sandbox_id) + "/ports/" + std::to_string(port) + query, nullptr);
  if (!result) return result.error();
  return {};
}

ClientResult<HttpResponse> Client::StreamExec(std::string_view sandbox_id,
                                              const json::object& request,
                                              const std::string& idempotency_key,
                                              const std::string& last_event_id,
                                              const BodySink& sink) {
  json::object body = request;
  body["encoding"] = "base64";
  body["format"] = "pandastack";
  body["flow"] = "wait";
  HttpRequest http_request;
  http_request.method = verb::post;
  http_request.target = SandboxPath(sandbox_id) + "/exec/stream";
  http_request.body = json::serialize(body);
  http_request.headers.emplace_back("Accept", "text/event-stream");
  http_request.headers.emplace_back("Idempotency-Key", idempotency_key);
  if (!last_event_id.empty()) http_request.headers.emplace_back("Last-Event-ID", last_event_id);
  return http_.Stream(http_request, sink);
}

ClientResult<HttpResponse> Client::StreamLogs(std::string_view sandbox_id,
                                              std::string_view process_id, bool follow, int tail,
                                              std::string_view flow,
                                              const std::string& last_event_id,
                                              const BodySink& sink) {
  std::string target =
      ProcessPath(sandbox_id, process_id) + "/logs?encoding=base64&format=pandastack";
  if (follow) target += "&follow=1";
  if (follow && !flow.empty()) target += "&flow=" + std::string(flow);
  // `tail` picks where a first read starts; a resumed one continues after its last event.
  if (tail >= 0 && last_event_id.empty()) target += "&tail=" + std::to_string(tail);
  HttpRequest http_request;
  http_request.target = std::move(target);
  http_request.headers.emplace_back("Accept", "text/event-stream");
  if (!last_event_id.empty()) http_request.headers.emplace_back("Last-Event-ID", last_event_id);
  return http_.Stream(http_request, sink);
}

}  // namespace sandstream::cli
