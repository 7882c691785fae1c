#include "daemon/runtime_factory.h"

#include "sandbox/directory_runtime.h"
#include "sandbox/namespace_runtime.h"

namespace sandstream {

Result<std::unique_ptr<sandbox::Runtime>> MakeRuntime(const Config& config) {
  if (config.runtime == "directory") {
    return std::unique_ptr<sandbox::Runtime>(
        new sandbox::DirectoryRuntime(config.data_dir + "/sandboxes"));
  }
  sandbox::NamespaceRuntimeOptions options;
  options.state_dir = config.data_dir + "/sandboxes";
  options.template_dir = config.templates_dir;
  options.max_sandboxes = static_cast<uint32_t>(config.max_sandboxes);
  auto runtime = std::make_unique<sandbox::NamespaceRuntime>(options);
  if (!runtime->ready()) return runtime->ready().error();
  return std::unique_ptr<sandbox::Runtime>(std::move(runtime));
}

}  // namespace sandstream
