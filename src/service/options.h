// What a Service is made with: its collaborators (access, the template catalog, egress), the
// limits and defaults it applies, and its timings. Filled by the daemon from its Config.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "image/store.h"
#include "net/egress.h"
#include "process/output_log.h"
#include "sandbox/runtime.h"
#include "service/access.h"

namespace sandstream {

// The templates a cluster keeps on every node (cluster::EtcdTemplates): told of each template
// pulled from a registry without credentials, and of each one deleted, it has every other node,
// and every node that joins later, pull it too.
class TemplateCatalog {
 public:
  virtual ~TemplateCatalog() = default;
  virtual void Pulled(const std::string& name, const std::string& tenant,
                      const std::string& image) = 0;
  virtual void Deleted(const std::string& name) = 0;
};

// The longest TTL a sandbox may have (ten years), and the longest timeout: a deadline in
// nanoseconds stays far from overflowing.
inline constexpr int64_t kMaxTtlSeconds = 10 * 365 * 86400;

struct ServiceOptions {
  // Tenants and their quotas, keys and tokens; null: the admin alone (tests).
  Access* access = nullptr;
  // In a cluster: where pulled templates are kept for every node; null: not in one.
  TemplateCatalog* catalog = nullptr;
  // Egress, when the daemon offers it, and the resolvers its sandboxes' DNS goes to.
  std::shared_ptr<net::Egress> egress;
  std::vector<uint32_t> dns_upstreams;
  sandbox::Limits default_limits;
  sandbox::Limits max_limits;
  double exec_default_timeout_seconds = 600;
  double max_timeout_seconds = 7 * 24 * 3600;
  LogLimits default_log_limits;
  uint64_t log_window_max_bytes = 256u << 20;
  uint64_t retained_tail_bytes = 64u << 10;
  uint64_t exec_output_limit_bytes = 10u << 20;
  std::chrono::milliseconds kill_grace{2000};
  // A waiting reader whose client went away keeps its place this long (a resume gets every
  // byte); one that takes nothing this long while holding its process back is dropped.
  std::chrono::milliseconds resume_grace{30000};
  std::chrono::milliseconds reader_stall{300000};
  int64_t sandbox_default_ttl_seconds = 0;
  // A paused sandbox is deleted after this long unless resumed (its own TTL stops meanwhile).
  std::chrono::seconds paused_ttl{30 * 24 * 3600};
  // How often each sandbox's CPU, memory and disk use is sampled (resource_series.h).
  std::chrono::milliseconds metrics_interval{5000};
  size_t max_sandboxes = 1000;
  size_t max_processes_per_sandbox = 1024;
  bool allow_nested_userns = false;  // the operator grants requests' allow_nested_userns
  // Shutdown() ends every sandbox; else they run on for the next daemon's Restore().
  bool teardown_on_exit = false;
  size_t journal_entries = 1000;
  // This daemon's id in a cluster: every sandbox id it makes names it, sb_{node_id}_{hex}, so a
  // gateway routes without a table. Empty: sb_{hex}.
  std::string node_id;
  // A finished process keeps its whole output window this long after its last reader left
  // (for reconnects), then only the retained tail: memory follows live processes, not history.
  std::chrono::seconds finished_window_grace{60};
  std::vector<std::string> base_env;  // every process starts from these ("PATH=...")
  // Directory templates (one per directory), and the image store's root and limits.
  std::string templates_dir;
  std::string images_dir;
  // Volumes (volumes.h): where they are kept, and their sizes when not asked and at most.
  std::string volumes_dir;
  // Checkpoints that sandboxes are made from (a fork with memory): one directory each, while
  // the forks are made.
  std::string checkpoints_dir;
  int64_t volume_default_mb = 1024;
  int64_t volume_max_mb = 65536;
  image::StoreLimits image_limits;
  // Registries pulled from at all (empty: any), over plain HTTP, and over HTTPS on non-public
  // addresses (host[:port]).
  std::vector<std::string> registry_allow;
  std::vector<std::string> registry_plain_http;
  std::vector<std::string> registry_private_hosts;
  double pull_timeout_seconds = 1800;  // a whole pull, at most
  size_t image_workers = 4;            // image jobs at once (one per tenant at a time)
};

}  // namespace sandstream
