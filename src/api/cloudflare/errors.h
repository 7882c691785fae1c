// Errors on the routes of Cloudflare's SandboxClient, in the flat shape its package reads:
// {code, message, context, httpStatus, timestamp}. The package throws `message` and picks its
// error class by `code`; the HTTP status stays the one sandstream gives the same error.
#pragma once

#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "api/http.h"
#include "base/error.h"

namespace sandstream::api::cloudflare {

// What a failed call was about: the same sandstream code is FILE_NOT_FOUND on a file,
// PROCESS_NOT_FOUND on a process. kAny for everything else (a missing sandbox included).
enum class Subject { kAny, kFile, kProcess, kSession, kContext };

// The flat body; `about` (a path, a process, session or context id) goes into its context.
boost::json::object ErrorJson(const Error& error, Subject subject, std::string_view about);

// ReplyError (http.h) answers with this, as kAny, on every route of the kCloudflare dialect;
// handlers that know what the error is about say so here.
boost::asio::awaitable<void> Fail(Context& ctx, const Error& error, Subject subject,
                                  std::string_view about = {});

}  // namespace sandstream::api::cloudflare
