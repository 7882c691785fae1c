// Creating a namespace sandbox, the parent's side of the clone in order: state directory,
// template layers, cgroups, the clone3 of PID 1 (whose child runs init_setup.cc), id maps, OOM
// exemption, egress, idmapped layers, the go-ahead, then the keeper. NamespaceRuntime::Create
// is its caller.
#pragma once

#include <string>

#include "base/result.h"
#include "sandbox/namespace_runtime.h"
#include "sandbox/namespace_sandbox.h"
#include "sandbox/op.h"
#include "sandbox/runtime.h"

namespace sandstream::sandbox {

// The steps of Create after the id range, each naming itself in its error. A step that fails
// leaves what it made recorded in `sandbox`, for its Destroy to free.
Op<Result<void>> SetUpSandbox(NamespaceRuntime::State& s, NamespaceSandbox& sandbox,
                              const SandboxSpec& spec, const std::string& dir);

}  // namespace sandstream::sandbox
