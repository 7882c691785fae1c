// Reading request bodies and parameters into validated domain requests. Every problem comes
// back as an Error naming the field; nothing here touches the service's state.
#pragma once

#include <optional>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "api/http.h"
#include "api/sse.h"
#include "base/result.h"
#include "process/cursor.h"
#include "process/process.h"
#include "service/contexts.h"
#include "service/service.h"
#include "service/sessions.h"

namespace sandstream::api {

// The body as JSON of any kind (an empty body is an empty object): kUnsupportedMediaType for a
// body labelled other than JSON, kInvalidJson for one that does not parse.
Result<boost::json::value> ParseBodyValue(const Context& ctx);
// The body as a JSON object; an empty body is an empty object.
Result<boost::json::object> ParseBody(const Context& ctx);

// A command request (spec/README.md, "Running commands") with the sandbox's defaults applied.
struct CommandRequest {
  CommandSpec spec;
  std::map<std::string, std::string> env;
  sse::Format format = sse::Format::kPandastack;
  sse::Encoding encoding = sse::Encoding::kUtf8;
  Flow flow = Flow::kWait;  // how the client that reads the command paces it
};

enum class CommandKind { kExec, kBackground };
Result<CommandRequest> ParseCommand(const Context& ctx, const boost::json::object& body,
                                    const SandboxEntry& sb, CommandKind kind);

// "utf8" (or "utf-8") or "base64".
Result<sse::Encoding> ParseEncoding(std::string_view text);
// format/encoding from the query (GET streams), defaulting to pandastack/utf8.
Result<sse::Format> FormatFromQuery(const Context& ctx);
Result<sse::Encoding> EncodingFromQuery(const Context& ctx);
// ?timeout_seconds=: a number in (0, max], `fallback` when absent.
Result<double> TimeoutFromQuery(const Context& ctx, double fallback, double max);
// The request target's query without the parameter `name` ("?a=1&b=2", or ""), as sent.
std::string QueryWithout(std::string_view target, std::string_view name);

Result<SandboxRequest> ParseSandboxRequest(const boost::json::object& body);
// `volumes` of a create ([{"name", "path", "read_only"}]; `field` names it in errors): the
// service finds each volume and checks each path.
Result<std::vector<SandboxVolume>> ParseVolumeMounts(const boost::json::value& v,
                                                     std::string_view field);
// PATCH /v1/sandboxes/{id}/network: the body is a `network` as at create, which must give
// egress ("egress", {"egress": {...}}): kConflict for one without (a sandbox's network mode is
// fixed at create).
Result<net::EgressPolicy> ParseEgressUpdate(const boost::json::value& body);
// The body of POST .../pause: `mode` (freeze, the default, or checkpoint).
Result<PauseMode> ParsePauseRequest(const boost::json::object& body);
// The body of PATCH /v1/sandboxes/{id}: auto_pause, on_timeout, auto_resume (any of them).
Result<Service::LifecycleSettings> ParseLifecycleUpdate(const boost::json::object& body);
Result<SessionRequest> ParseSessionRequest(const boost::json::object& body);
Result<ContextRequest> ParseContextRequest(const boost::json::object& body);

// A template pulled from a registry: {"name"?, "image", "auth"?: {"username", "password"?}}.
struct PullRequest {
  std::string name;  // "" when the body has none (the query may give it)
  image::Reference image;
  image::Credentials credentials;  // empty: no auth
};
Result<PullRequest> ParsePullRequest(const boost::json::object& body);

// A cell to run in a code context: `code`, and `timeout_seconds` with exec's default.
struct CellRequest {
  std::string code;
  double timeout_seconds = 0;
  std::string idempotency_key;
};
Result<CellRequest> ParseCellRequest(const Context& ctx, const boost::json::object& body);

}  // namespace sandstream::api
