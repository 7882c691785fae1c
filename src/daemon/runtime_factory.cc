#include "daemon/runtime_factory.h"

#include "sandbox/directory_runtime.h"

namespace sandstream {

Result<std::unique_ptr<sandbox::Runtime>> MakeRuntime(const Config& config) {
  if (config.runtime == "directory") {
    return std::unique_ptr<sandbox::Runtime>(
        new sandbox::DirectoryRuntime(config.data_dir + "/sandboxes"));
  }
  return Error{ErrorCode::kInvalidRequest, "runtime \"" + config.runtime + "\" is not available"};
}

}  // namespace sandstream
