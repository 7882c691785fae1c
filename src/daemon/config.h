// sandstreamd's configuration: one struct. Read from a JSON file, then SANDSTREAM_* environment
// variables, then --flags; later sources win. Validation reports every problem at once. Defaults
// deny: limits always set, loopback only. What each field means is said once, in the settings
// table of config.cc (kFields), which docs/configuration.md is generated from.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace sandstream {

struct Config {
  std::string listen = "127.0.0.1:8080";
  std::string data_dir;
  std::string api_key;
  std::string runtime = "namespace";
  std::string log_level = "info";
  std::string templates_dir;
  int64_t max_body_bytes = 1 << 20;
  int64_t max_stdin_bytes = 16 << 20;
  int64_t max_file_bytes = 1 << 30;
  int64_t max_image_bytes = int64_t{4} << 30;
  int64_t max_image_unpacked_bytes = int64_t{16} << 30;
  int64_t max_image_entries = 1000000;
  std::string registry_allow;
  std::string registry_plain_http;
  std::string registry_private_hosts;
  double pull_timeout_seconds = 1800;
  int64_t image_workers = 4;
  int64_t volume_default_mb = 1024;
  int64_t volume_max_mb = 65536;
  double exec_default_timeout_seconds = 600;
  double max_timeout_seconds = 604800;
  int64_t exec_output_limit_bytes = 10 << 20;
  int64_t log_window_bytes = 8 << 20;
  int64_t log_window_max_bytes = 256 << 20;
  int64_t log_window_entries = 65536;
  int64_t retained_tail_bytes = 65536;
  int64_t keepalive_seconds = 15;
  double write_timeout_seconds = 60;
  int64_t max_connections = 12000;
  double resume_grace_seconds = 30;
  double reader_stall_seconds = 300;
  int64_t kill_grace_ms = 2000;
  int64_t shutdown_grace_ms = 5000;
  int64_t sandbox_default_ttl_seconds = 0;
  int64_t paused_ttl_seconds = 30 * 24 * 3600;
  double metrics_interval_seconds = 5;
  bool metrics_per_sandbox = false;
  int64_t max_sandboxes = 1000;
  int64_t host_id_base = 1000000;
  bool teardown_on_exit = false;
  std::string cgroup_parent;
  std::string lxcfs = "/usr/bin/lxcfs";
  std::string criu = "/var/cache/sandstream/criu-4.2.1/sbin/criu";
  bool allow_nested_userns = false;
  int64_t max_processes_per_sandbox = 1024;
  int64_t default_memory_mb = 512;
  int64_t max_memory_mb = 8192;
  int64_t default_pids = 256;
  int64_t max_pids = 4096;
  int64_t default_cpu_percent = 100;
  int64_t max_cpu_percent = 800;
  int64_t default_disk_mb = 256;
  int64_t max_disk_mb = 65536;
  int64_t default_open_files = 1024;
  int64_t max_open_files = 16384;
  int64_t terminal_idle_seconds = 300;
  int64_t terminal_replay_bytes = 1 << 20;
  std::string web_dir;
  std::string preview_domain = "localhost";
  std::string public_url;
  std::string egress_pool = "10.200.0.0/16";
  std::string egress_dns;
  std::string egress_mark_mask = "0x0f000000";
  int64_t egress_max_connections = 1024;
  std::string role = "node";
  std::string node_id;
  std::string advertise;
  std::string etcd;
  std::string etcd_prefix = "/sandstream/";
  std::string gateway_nodes;
  std::string e2b_template_aliases =
      "code-interpreter-v1=code-interpreter,code-interpreter-beta=code-interpreter";
};

// Loads defaults, then `--config FILE` (or SANDSTREAM_CONFIG), environment, flags.
// `argv` excludes the program name. Unknown flags and bad values are all reported together.
// --print-config, --help (-h) and --version set their flag.
Result<Config> LoadConfig(const std::vector<std::string>& args, bool* print_config, bool* help,
                          bool* version);
// max_connections, lowered to what `open_files_limit` (RLIMIT_NOFILE) leaves after the
// descriptors that max_sandboxes may hold.
int64_t ConnectionLimit(const Config& config, uint64_t open_files_limit);
std::string ConfigJson(const Config& config);
// Egress: on unless egress_pool is "" or "none".
bool EgressEnabled(const Config& config);
// The upstream resolvers: egress_dns, or the IPv4 nameservers of /etc/resolv.conf (which may
// be none); nullopt when egress_dns does not parse.
std::optional<std::vector<uint32_t>> EgressResolvers(const Config& config);
// egress_mark_mask as a number, nullopt unless it has 3 bits or more.
std::optional<uint32_t> EgressMarkMask(const Config& config);
// e2b_template_aliases as a map (E2B's name to sandstream's); nullopt when an entry is not
// `name=template`.
std::optional<std::map<std::string, std::string>> TemplateAliases(const Config& config);
// registry_allow, registry_plain_http or registry_private_hosts as its entries.
std::vector<std::string> RegistryHosts(const std::string& list);
// Every setting as a flag with its default (--help).
std::string ConfigHelp();
// Every setting, its default and its description as Markdown: docs/configuration.md.
std::string ConfigReference();

}  // namespace sandstream
