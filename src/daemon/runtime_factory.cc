#include "daemon/runtime_factory.h"

#include <cstdio>

#include "sandbox/directory_runtime.h"
#include "sandbox/namespace_runtime.h"

namespace sandstream {

std::shared_ptr<net::Egress> MakeEgress(const Config& config) {
  if (config.runtime != "namespace" || !EgressEnabled(config)) return nullptr;
  net::EgressOptions o;
  o.pool = *net::ParsePrefix(config.egress_pool);  // validated with the config
  o.mark_mask = EgressMarkMask(config).value_or(0x0f000000);
  o.max_connections = static_cast<uint32_t>(config.egress_max_connections);
  o.resolvers = EgressResolvers(config).value_or(std::vector<uint32_t>{});
  return std::make_shared<net::Egress>(std::move(o));
}

Result<std::unique_ptr<sandbox::Runtime>> MakeRuntime(const Config& config,
                                                      std::shared_ptr<net::Egress> egress) {
  if (config.runtime == "directory") {
    return std::unique_ptr<sandbox::Runtime>(
        new sandbox::DirectoryRuntime(config.data_dir + "/sandboxes"));
  }
  sandbox::NamespaceRuntimeOptions options;
  options.state_dir = config.data_dir + "/sandboxes";
  options.init_dir = config.data_dir + "/init";
  options.egress = std::move(egress);
  options.max_sandboxes = static_cast<uint32_t>(config.max_sandboxes);
  options.host_id_base = static_cast<uint32_t>(config.host_id_base);
  // One cgroup parent per data dir: start-up clean-up removes every sandbox cgroup under the
  // parent, so two daemons (tests run several) must never share one.
  uint32_t hash = 2166136261u;  // FNV-1a: stable across builds and restarts
  for (unsigned char c : config.data_dir) hash = (hash ^ c) * 16777619u;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", hash);
  options.cgroup_parent =
      config.cgroup_parent.empty() ? std::string("sandstream-") + suffix : config.cgroup_parent;
  options.lxcfs = config.lxcfs;
  options.lxcfs_dir = config.data_dir + "/lxcfs";
  options.criu = config.criu;
  auto runtime = std::make_unique<sandbox::NamespaceRuntime>(options);
  if (!runtime->ready()) return runtime->ready().error();
  return std::unique_ptr<sandbox::Runtime>(std::move(runtime));
}

}  // namespace sandstream
