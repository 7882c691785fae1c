#include "api/common/lookup.h"

#include <algorithm>

namespace sandstream::api {

Result<const SandboxEntry*> FindSandbox(Context& ctx) {
  const SandboxEntry* sb = ctx.service.Find(ctx.params.at(0));
  // Another tenant's sandbox does not exist for this one (the server refuses it before the
  // handler runs; this holds for any caller).
  if (!sb || !ctx.principal.Sees(sb->tenant, sb->id)) {
    return Error{ErrorCode::kNotFound, "no sandbox '" + ctx.params.at(0) + "'"};
  }
  return sb;
}

const Volume* FindVolume(Context& ctx) {
  return ctx.service.volumes().Find(ctx.principal.tenant, ctx.principal.admin(), ctx.params.at(0));
}

Error VolumeNotFound(Context& ctx) {
  return Error{ErrorCode::kNotFound, "no volume '" + ctx.params.at(0) + "'"};
}

Result<std::shared_ptr<Process>> FindProcess(Context& ctx) {
  auto sb = FindSandbox(ctx);
  if (!sb) return std::move(sb).error();
  auto p = (*sb)->FindProcess(ctx.params.at(1));
  if (!p) {
    return Error{ErrorCode::kNotFound,
                 "no process '" + ctx.params.at(1) + "' in sandbox '" + ctx.params.at(0) + "'"};
  }
  return p;
}

Result<std::shared_ptr<CodeContext>> FindContext(const SandboxEntry& sb, std::string_view id) {
  if (auto it = sb.contexts.find(id); it != sb.contexts.end()) return it->second;
  return Error{ErrorCode::kNotFound,
               "no code context '" + std::string(id) + "' in sandbox '" + sb.id + "'"};
}

std::vector<std::shared_ptr<Process>> ClientProcesses(const SandboxEntry& sb) {
  std::vector<std::shared_ptr<Process>> out;
  for (const auto& p : sb.processes) {
    const bool driver = std::any_of(sb.contexts.begin(), sb.contexts.end(),
                                    [&](const auto& c) { return c.second->driver() == p; });
    if (!driver) out.push_back(p);
  }
  return out;
}

}  // namespace sandstream::api
