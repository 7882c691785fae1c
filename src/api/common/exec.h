// Running a command the way exec and exec/stream do, for every route that runs one: the
// request's session, defaults and limits apply the same whoever's wire asked.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "api/http.h"
#include "api/request.h"
#include "base/result.h"
#include "process/process.h"

namespace sandstream::api {

struct Started {
  std::shared_ptr<Process> process;
  CommandRequest request;
};

// Starts the command of an exec request `body` (spec/README.md, "Running commands") in the
// route's sandbox, in the request's session when it names one.
boost::asio::awaitable<Result<Started>> StartCommand(Context& ctx, const boost::json::object& body);

// A command's output once it has ended: every byte, up to exec_output_limit_bytes a stream.
struct Collected {
  std::string stdout_text;
  std::string stderr_text;
  bool truncated = false;
};
boost::asio::awaitable<Collected> CollectOutput(Context& ctx, std::shared_ptr<Process> process,
                                                sse::Encoding encoding);

}  // namespace sandstream::api
