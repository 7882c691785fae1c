// The JSON of Cloudflare's container API that its handlers share: the success envelope, the
// request fields, and sessions named by the caller (created on first use, as the container
// does). Translation only: nothing here runs or stores anything but through the service.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "api/http.h"
#include "base/result.h"
#include "service/service.h"

namespace sandstream::api::cloudflare {

// `body` with "success" and "timestamp", answered 200.
boost::asio::awaitable<void> ReplyOk(Context& ctx, boost::json::object body, bool success = true);

// A string field of a request; absent or null is nullopt, anything else not a string an error.
Result<std::optional<std::string>> StringField(const boost::json::object& body,
                                               std::string_view key);
// The same, required and not empty.
Result<std::string> RequiredString(const boost::json::object& body, std::string_view key);

// The sandstream command body (spec/README.md, "Running commands") for a Cloudflare
// ExecuteRequest or StartProcessRequest: command, env, cwd, timeoutMs, processId.
Result<boost::json::object> CommandBody(const boost::json::object& request);

// Makes sure the sandbox has session `id`, creating it (the sandbox's env and cwd) if not.
boost::asio::awaitable<Result<void>> EnsureSession(Context& ctx, const SandboxEntry& sb,
                                                   std::string id);

}  // namespace sandstream::api::cloudflare
