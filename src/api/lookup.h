// Finding the sandbox and process a route names, or the 404 that says which is missing.
#pragma once

#include <memory>

#include "api/http.h"
#include "base/result.h"
#include "process/process.h"
#include "service/service.h"

namespace sandstream::api {

inline Result<SandboxEntry*> FindSandbox(Context& ctx) {
  SandboxEntry* sb = ctx.service.Find(ctx.params.at(0));
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + ctx.params.at(0) + "'"};
  return sb;
}

inline Result<std::shared_ptr<Process>> FindProcess(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) return std::move(sb).error();
  auto p = (*sb)->FindProcess(ctx.params.at(1));
  if (!p) {
    return Error{ErrorCode::kNotFound,
                 "no process '" + ctx.params.at(1) + "' in sandbox '" + ctx.params.at(0) + "'"};
  }
  return p;
}

}  // namespace sandstream::api
