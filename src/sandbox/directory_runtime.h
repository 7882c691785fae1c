// The unisolated runtime: a sandbox is a private directory and its processes are ordinary
// process groups of the daemon's user. For development machines without namespaces, and as
// the reference the namespace runtime is tested against. Never the default for untrusted code.
#pragma once

#include <string>

#include "sandbox/runtime.h"

namespace sandstream::sandbox {

class DirectoryRuntime final : public Runtime {
 public:
  // Sandboxes live under `base_dir`/<id>/; "/workspace" inside maps to <id>/workspace.
  explicit DirectoryRuntime(std::string base_dir) : base_dir_(std::move(base_dir)) {}
  std::string_view name() const override { return "directory"; }
  Op<Result<std::unique_ptr<Sandbox>>> Create(SandboxSpec spec) override;
  void CleanupLeftovers(const std::vector<std::string>& keep) override;

 private:
  std::string base_dir_;
};

}  // namespace sandstream::sandbox
