// Running an exec request's command in a session (the request's `session` field).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <memory>

#include "api/http.h"
#include "api/request.h"
#include "base/result.h"
#include "process/process.h"
#include "service/service.h"

namespace sandstream::api {

// Waits for the session's earlier commands, then starts this one. `req` is the parsed command
// request; its env and cwd, when the body sets them, apply to this command only.
boost::asio::awaitable<Result<std::shared_ptr<Process>>> StartInSession(
    Context& ctx, const SandboxEntry& sb, const boost::json::object& body, CommandRequest& req);

}  // namespace sandstream::api
