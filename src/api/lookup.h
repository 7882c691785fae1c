// Finding the sandbox and the process, session or context a route names, or the 404 that says
// which is missing.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "api/http.h"
#include "base/result.h"
#include "process/process.h"
#include "service/contexts.h"
#include "service/service.h"

namespace sandstream::api {

inline Result<const SandboxEntry*> FindSandbox(Context& ctx) {
  const SandboxEntry* sb = ctx.service.Find(ctx.params.at(0));
  // Another tenant's sandbox does not exist for this one (the server refuses it before the
  // handler runs; this holds for any caller).
  if (!sb || !ctx.principal.Sees(sb->tenant, sb->id)) {
    return Error{ErrorCode::kNotFound, "no sandbox '" + ctx.params.at(0) + "'"};
  }
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

// The entry of a sandbox's `map` (sessions, contexts) that the route's second parameter names.
template <typename Map>
Result<typename Map::mapped_type> FindIn(Context& ctx, const SandboxEntry& sb, const Map& map,
                                         std::string_view what) {
  auto it = map.find(ctx.params.at(1));
  if (it == map.end()) {
    return Error{ErrorCode::kNotFound, "no " + std::string(what) + " '" + ctx.params.at(1) +
                                           "' in sandbox '" + sb.id + "'"};
  }
  return it->second;
}

// The processes a client started or may see, in start order: not the interpreters of code
// contexts, which are sandstream's own machinery.
inline std::vector<std::shared_ptr<Process>> ClientProcesses(const SandboxEntry& sb) {
  std::vector<std::shared_ptr<Process>> out;
  for (const auto& p : sb.processes) {
    const bool driver = std::any_of(sb.contexts.begin(), sb.contexts.end(),
                                    [&](const auto& c) { return c.second->driver() == p; });
    if (!driver) out.push_back(p);
  }
  return out;
}

}  // namespace sandstream::api
