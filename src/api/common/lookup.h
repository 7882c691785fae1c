// Finding the sandbox and the process, session or context a route names, or the 404 that says
// which is missing.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "api/http.h"
#include "base/result.h"
#include "process/process.h"
#include "service/contexts.h"
#include "service/service.h"

namespace sandstream::api {

// The sandbox the route's first parameter names, if the principal sees it.
Result<const SandboxEntry*> FindSandbox(Context& ctx);
// The volume the route's first parameter names (its id, or a name among the principal's
// tenant's), if the principal sees it; VolumeNotFound is the 404 when not.
const Volume* FindVolume(Context& ctx);
Error VolumeNotFound(Context& ctx);
// The process the route's second parameter names, in that sandbox.
Result<std::shared_ptr<Process>> FindProcess(Context& ctx);

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

// Context `id` of `sb`, or the 404 naming it.
Result<std::shared_ptr<CodeContext>> FindContext(const SandboxEntry& sb, std::string_view id);

// The processes a client started or may see, in start order: not the interpreters of code
// contexts, which are sandstream's own machinery.
std::vector<std::shared_ptr<Process>> ClientProcesses(const SandboxEntry& sb);

}  // namespace sandstream::api
