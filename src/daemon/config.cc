#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <variant>

#include <boost/json.hpp>

#include "cluster/etcd.h"
#include "cluster/node.h"
#include "net/ipv4.h"
#include "platform/fd.h"
#include "sandbox/mounts.h"
#include "service/options.h"

namespace sandstream {
namespace json = boost::json;

namespace {

using Member =
    std::variant<std::string Config::*, int64_t Config::*, double Config::*, bool Config::*>;
// One row per setting: its name (the JSON key; SANDSTREAM_NAME; --name-with-dashes), the member
// it sets, and its one-line description. This table is the documentation: --help lists it and
// --print-config-reference prints it as docs/configuration.md (scripts/test checks the two agree).
struct Field {
  const char* name;
  Member member;
  const char* description;                 // Markdown, one line, no '|'
  const char* computed_default = nullptr;  // for a string whose empty default means something else
};

const Field kFields[] = {
    {"listen", &Config::listen, "address:port to serve HTTP on (port 0 picks one)"},
    {"data_dir", &Config::data_dir,
     "state: the SQLite database, the API key, sandboxes' state, image layers "
     "(`docs/operations.md`)",
     "`/var/lib/sandstream` for root, else `$XDG_STATE_HOME/sandstream` (or "
     "`~/.local/state/sandstream`)"},
    {"api_key", &Config::api_key,
     "the admin's bearer key (`SANDSTREAM_API_KEY`); empty: read from, or generated into, "
     "`<data_dir>/api_key`",
     "generated into `<data_dir>/api_key`"},
    {"runtime", &Config::runtime,
     "`namespace` (isolated) or `directory` (no isolation, development only)"},
    {"log_level", &Config::log_level,
     "`debug`, `info`, `warn` or `error`; logs are `key=value` lines on stderr"},
    {"templates_dir", &Config::templates_dir,
     "one directory per template, each a full root filesystem", "`<data_dir>/templates`"},
    {"max_body_bytes", &Config::max_body_bytes, "largest JSON request body (413 above)"},
    {"max_stdin_bytes", &Config::max_stdin_bytes, "largest stdin upload"},
    {"max_file_bytes", &Config::max_file_bytes, "largest file upload through the files API"},
    {"max_image_bytes", &Config::max_image_bytes,
     "largest image archive `POST /v1/templates` takes"},
    {"max_image_unpacked_bytes", &Config::max_image_unpacked_bytes,
     "largest image, all its layers unpacked"},
    {"max_image_entries", &Config::max_image_entries, "most files in one layer"},
    {"registry_allow", &Config::registry_allow,
     "the only registries templates are pulled from, comma-separated host[:port] (`docker.io` "
     "for Docker Hub); empty: any"},
    {"registry_plain_http", &Config::registry_plain_http,
     "registries (and their token services) pulled from over plain HTTP, comma-separated "
     "host[:port] (a host alone: any port); they may be on any address"},
    {"registry_private_hosts", &Config::registry_private_hosts,
     "registries pulled from over HTTPS although on loopback, private or link-local addresses, "
     "comma-separated host[:port] (others: public addresses only)"},
    {"pull_timeout_seconds", &Config::pull_timeout_seconds,
     "longest a pull from a registry may take in all (besides the 60 s stall limit); past it, "
     "`502`"},
    {"image_workers", &Config::image_workers,
     "threads for image work (imports, pulls, snapshots); each tenant runs one job at a time "
     "and tenants take turns"},
    {"exec_default_timeout_seconds", &Config::exec_default_timeout_seconds,
     "total timeout of `exec` and `exec/stream` when the request sets none (0: none)"},
    {"max_timeout_seconds", &Config::max_timeout_seconds, "largest timeout a request may ask for"},
    {"exec_output_limit_bytes", &Config::exec_output_limit_bytes,
     "buffered `exec` keeps at most this much of stdout and of stderr (`truncated` says so)"},
    {"log_window_bytes", &Config::log_window_bytes,
     "output retained per process for slow or reconnecting readers: a waiting reader this far "
     "behind holds its process back"},
    {"log_window_max_bytes", &Config::log_window_max_bytes,
     "largest `log_window_bytes` a request may ask for"},
    {"log_window_entries", &Config::log_window_entries,
     "chunks retained per process (bounds the cost of tiny writes)"},
    {"retained_tail_bytes", &Config::retained_tail_bytes,
     "output kept in the database after a process ends (survives restarts)"},
    {"keepalive_seconds", &Config::keepalive_seconds,
     "idle SSE streams get a `: keepalive` comment this often"},
    {"write_timeout_seconds", &Config::write_timeout_seconds,
     "a write to a client (a response, SSE, WebSocket) that makes no progress for this long "
     "ends the connection as gone; a slow client always makes some"},
    {"max_connections", &Config::max_connections,
     "open client connections at most, a node's or a gateway's (`503 too_many_connections` "
     "above); lowered at start to what `RLIMIT_NOFILE` (raised to its hard limit) leaves after "
     "10 descriptors per sandbox of `max_sandboxes` (a gateway's connection takes two)"},
    {"resume_grace_seconds", &Config::resume_grace_seconds,
     "a reader that holds its process back (flow `wait`) and loses its connection keeps its "
     "place this long: a resume within it gets every byte (0: not at all)"},
    {"reader_stall_seconds", &Config::reader_stall_seconds,
     "a reader that holds its process back and takes nothing for this long becomes a skipping "
     "reader (it gets a `gap`)"},
    {"kill_grace_ms", &Config::kill_grace_ms,
     "between TERM and KILL when a process group is stopped"},
    {"shutdown_grace_ms", &Config::shutdown_grace_ms,
     "how long shutdown waits for streams to drain"},
    {"sandbox_default_ttl_seconds", &Config::sandbox_default_ttl_seconds,
     "TTL of sandboxes created without one (0: none)"},
    {"paused_ttl_seconds", &Config::paused_ttl_seconds,
     "a paused sandbox is deleted this long after its pause unless resumed (its own TTL does "
     "not run while it is paused)"},
    {"max_sandboxes", &Config::max_sandboxes, "live sandboxes at most (429 above; 65535 at most)"},
    {"host_id_base", &Config::host_id_base,
     "host uid/gid of root in the first sandbox; sandbox *i* maps 65536 ids from "
     "`host_id_base + i * 65536`. At start the whole range must end below 2^32 - 1, hold no "
     "user or group of `/etc/passwd` and `/etc/group`, overlap no other user's "
     "`/etc/subuid`/`/etc/subgid` range and, if those files give root ranges, lie inside one: "
     "the daemon refuses to start otherwise"},
    {"allow_nested_userns", &Config::allow_nested_userns,
     "lets `POST /v1/sandboxes` ask for `allow_nested_userns` (its processes may create user "
     "namespaces of their own); refused with `400 invalid_request` otherwise"},
    {"volume_default_mb", &Config::volume_default_mb,
     "the size of a volume made without `size_mb` (a sparse file: it takes what is written)"},
    {"volume_max_mb", &Config::volume_max_mb,
     "the largest volume `POST /v1/volumes` makes; a tenant's volumes together are bounded by "
     "its `volume_storage_mb` quota"},
    {"metrics_interval_seconds", &Config::metrics_interval_seconds,
     "how often each sandbox's CPU, memory and disk use is sampled for `GET "
     "/v1/sandboxes/{id}/metrics` (0.1 to 3600)"},
    {"metrics_per_sandbox", &Config::metrics_per_sandbox,
     "`/metrics` also has each sandbox's latest sample, labelled by sandbox id (a series per "
     "sandbox: mind your Prometheus' cardinality)"},
    {"teardown_on_exit", &Config::teardown_on_exit,
     "a stopping daemon ends every sandbox and process; by default they run on and the next "
     "start takes them back, files and running processes included"},
    {"cgroup_parent", &Config::cgroup_parent,
     "where sandbox cgroups go: empty, below the daemon's own cgroup "
     "(`sandstream-<hash of data_dir>`; on v2, below the root when the daemon's cgroup cannot "
     "hand controllers down, as a login session's cannot); an absolute cgroup path (`/sandstream`) "
     "is that cgroup "
     "of every hierarchy, made if missing, outside the daemon's own, so sandboxes outlive a "
     "container the daemon runs in. One daemon per path"},
    {"lxcfs", &Config::lxcfs,
     "the lxcfs that answers a sandbox's `/proc/meminfo`, `cpuinfo`, `stat`, `uptime` and "
     "`/sys/devices/system/cpu/online` from its limits, started on demand at "
     "`<data_dir>/lxcfs` and left running while sandboxes outlive the daemon (empty or absent: "
     "sandboxes see the host's)"},
    {"criu", &Config::criu,
     "the CRIU that pauses a sandbox with mode \"checkpoint\" (its processes and memory written "
     "to disk), as `scripts/install-criu` builds it (absent: that mode answers 501)"},
    {"max_processes_per_sandbox", &Config::max_processes_per_sandbox,
     "running processes per sandbox at most"},
    {"default_memory_mb", &Config::default_memory_mb,
     "memory limit of a sandbox whose request sets none (includes its tmpfs)"},
    {"max_memory_mb", &Config::max_memory_mb, "largest memory limit a request may ask for"},
    {"default_pids", &Config::default_pids, "process limit of a sandbox whose request sets none"},
    {"max_pids", &Config::max_pids, "largest process limit a request may ask for"},
    {"default_cpu_percent", &Config::default_cpu_percent,
     "CPU share of a sandbox whose request sets none, 100 = one core"},
    {"max_cpu_percent", &Config::max_cpu_percent, "largest CPU share a request may ask for"},
    {"default_disk_mb", &Config::default_disk_mb,
     "writable space (`/`, `/tmp`, `/dev/shm` share it); it is memory, so a sandbox gets at "
     "most `memory_mb` less a quarter (32 MiB at least)"},
    {"max_disk_mb", &Config::max_disk_mb, "largest disk size a request may ask for"},
    {"default_open_files", &Config::default_open_files,
     "`RLIMIT_NOFILE` inside a sandbox whose request sets none"},
    {"max_open_files", &Config::max_open_files, "largest open-files limit a request may ask for"},
    {"terminal_idle_seconds", &Config::terminal_idle_seconds,
     "a terminal (`exec/pty`) no client has been attached to for this long is ended"},
    {"terminal_replay_bytes", &Config::terminal_replay_bytes,
     "output a terminal keeps to replay to a client that (re)attaches"},
    {"web_dir", &Config::web_dir, "the console's files, served at `/` (`none`: no console)",
     "the build's `web/dist`"},
    {"preview_domain", &Config::preview_domain,
     "an exposed port of a sandbox also answers at the host `{port}-{sandbox id}.{preview_domain}` "
     "(on the daemon's port); point a wildcard DNS name at the daemon to use another"},
    {"public_url", &Config::public_url,
     "how clients reach the daemon (`https://sandstream.example.com`, no path), for the URLs it "
     "hands out; empty: `http://` and the request's `Host`"},
    {"e2b_template_aliases", &Config::e2b_template_aliases,
     "template names E2B's SDKs ask for, as sandstream's templates: `name=template` pairs, "
     "comma-separated (`e2b-code-interpreter` creates `code-interpreter-v1`)"},
    {"egress_pool", &Config::egress_pool,
     "addresses of sandboxes with egress, a /31 each; must hold `max_sandboxes` of them and "
     "overlap no network of the host (checked when the first one starts); `none` (or empty): "
     "no egress, requests for it get `400`"},
    {"egress_dns", &Config::egress_dns,
     "upstream resolvers the sandboxes' DNS is forwarded to, comma-separated IPv4 addresses",
     "the IPv4 nameservers of `/etc/resolv.conf`"},
    {"egress_mark_mask", &Config::egress_mark_mask,
     "packet mark bits the egress rules use (3 bits at least); choose bits no other firewall on "
     "the host uses (Tailscale uses 0xff0000, Calico 0xffff0000, kube-proxy 0xc000)"},
    {"egress_max_connections", &Config::egress_max_connections,
     "connections a sandbox with egress may have open at once; new ones past it are refused"},
    {"role", &Config::role,
     "`node` runs sandboxes; `gateway` runs none, routes every request to the node that holds "
     "its sandbox and places new ones (see `docs/cluster.md`)"},
    {"node_id", &Config::node_id,
     "this node's id in a cluster (`a-z`, `0-9`, `-`; 40 at most): its sandbox ids carry it, "
     "`sb_{node_id}_{hex}`; empty: not in a cluster"},
    {"advertise", &Config::advertise,
     "`host:port` gateways reach this node at (set it when listening on `0.0.0.0`)",
     "the address it listens on"},
    {"etcd", &Config::etcd,
     "etcd endpoints, comma-separated `http://host:port`: nodes register there under a lease, "
     "gateways read who is up"},
    {"etcd_prefix", &Config::etcd_prefix, "the cluster's keys in etcd"},
    {"gateway_nodes", &Config::gateway_nodes,
     "a gateway without etcd: its nodes' `host:port`, comma-separated (it reads their records "
     "with `api_key`, which it then needs)"},
};

const Field* FindField(std::string_view name) {
  for (const auto& f : kFields) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Sets a field from text; appends a problem naming `source` on failure.
void SetFromText(Config& c, const Field& f, const std::string& text, const std::string& source,
                 std::vector<std::string>& problems) {
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          c.*member = text;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text != "true" && text != "false") {
            problems.push_back(source + ": " + f.name + " must be true or false, got '" + text +
                               "'");
            return;
          }
          c.*member = text == "true";
        } else {
          char* end = nullptr;
          errno = 0;
          T value;
          if constexpr (std::is_same_v<T, int64_t>) {
            value = std::strtoll(text.c_str(), &end, 10);
          } else {
            value = std::strtod(text.c_str(), &end);
          }
          bool finite = true;
          if constexpr (std::is_same_v<T, double>) finite = std::isfinite(value);
          if (text.empty() || *end != '\0' || errno != 0 || !finite) {
            problems.push_back(source + ": " + f.name + " must be a number, got '" + text + "'");
            return;
          }
          c.*member = value;
        }
      },
      f.member);
}

std::string EnvName(std::string_view field) {
  std::string name = "SANDSTREAM_";
  for (char ch : field) name += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return name;
}

std::string DefaultDataDir() {
  if (::geteuid() == 0) return "/var/lib/sandstream";
  if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state) {
    return std::string(state) + "/sandstream";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.local/state/sandstream";
  }
  return "/tmp/sandstream";
}

void ValidateEgress(const Config& c, std::vector<std::string>& problems) {
  if (!EgressEnabled(c)) return;
  auto pool = net::ParsePrefix(c.egress_pool);
  if (!pool) {
    problems.push_back("egress_pool: " + pool.error().message);
  } else if (pool->len > 30 ||
             (uint64_t{1} << (32 - pool->len)) / 2 < static_cast<uint64_t>(c.max_sandboxes)) {
    problems.push_back("egress_pool " + c.egress_pool + " holds fewer than max_sandboxes (" +
                       std::to_string(c.max_sandboxes) + ") /31 networks");
  }
  if (!EgressResolvers(c)) problems.push_back("egress_dns must be IPv4 addresses, comma-separated");
  if (!EgressMarkMask(c)) {
    problems.push_back(
        "egress_mark_mask must be a hexadecimal mask of 3 bits or more, like 0x0f000000");
  }
}

void ValidateCluster(const Config& c, std::vector<std::string>& problems) {
  if (c.role != "node" && c.role != "gateway") {
    problems.push_back("role must be \"node\" or \"gateway\"");
  }
  if (!c.node_id.empty() && !cluster::IsValidNodeId(c.node_id)) {
    problems.push_back("node_id must be 1 to 40 of a-z, 0-9 and '-', not starting with '-'");
  }
  if (!c.advertise.empty() && !cluster::ParseHostPort(c.advertise)) {
    problems.push_back("advertise must be host:port");
  }
  auto etcd = cluster::ParseEndpoints(c.etcd);
  if (!etcd) problems.push_back("etcd: " + etcd.error().message);
  auto nodes = cluster::ParseEndpoints(c.gateway_nodes);
  if (!nodes) problems.push_back("gateway_nodes: " + nodes.error().message);
  if (c.etcd_prefix.empty() || c.etcd_prefix.front() != '/' || c.etcd_prefix.back() != '/') {
    problems.push_back("etcd_prefix must start and end with '/'");
  }
  if (c.role == "gateway" && etcd && nodes && etcd->empty() && nodes->empty()) {
    problems.push_back("a gateway needs etcd or gateway_nodes to find its nodes");
  }
  if (c.role == "gateway" && etcd && nodes && etcd->empty() && !nodes->empty() &&
      c.api_key.empty()) {
    problems.push_back(
        "a gateway with gateway_nodes needs api_key (the admin key): a node tells its record "
        "(load, templates) at GET /healthz to the admin only");
  }
  if (c.role == "node" && etcd && !etcd->empty() && c.node_id.empty()) {
    problems.push_back("a node that registers in etcd needs a node_id");
  }
}

void Validate(const Config& c, std::vector<std::string>& problems) {
  if (c.listen.rfind(':') == std::string::npos) problems.push_back("listen must be host:port");
  if (c.runtime != "namespace" && c.runtime != "directory") {
    problems.push_back("runtime must be \"namespace\" or \"directory\"");
  }
  if (c.log_level != "debug" && c.log_level != "info" && c.log_level != "warn" &&
      c.log_level != "error") {
    problems.push_back("log_level must be debug, info, warn or error");
  }
  const bool domain_ok =
      !c.preview_domain.empty() && c.preview_domain.size() <= 200 &&
      c.preview_domain.front() != '.' && c.preview_domain.back() != '.' &&
      std::all_of(c.preview_domain.begin(), c.preview_domain.end(), [](unsigned char ch) {
        return std::islower(ch) || std::isdigit(ch) || ch == '-' || ch == '.';
      });
  if (!domain_ok) {
    problems.push_back("preview_domain must be a lowercase DNS name (letters, digits, '-', '.')");
  }
  if (!c.public_url.empty()) {
    const std::string_view url = c.public_url;
    const size_t sep = url.find("://");
    const std::string_view scheme = url.substr(0, sep);
    const std::string_view host = sep == std::string_view::npos ? "" : url.substr(sep + 3);
    const bool ok = (scheme == "http" || scheme == "https") && !host.empty() &&
                    host.find_first_of("/?#@ ") == std::string_view::npos;
    if (!ok)
      problems.push_back("public_url must be http:// or https:// and a host[:port], no path");
  }
  ValidateEgress(c, problems);
  ValidateCluster(c, problems);
  if (!TemplateAliases(c)) {
    problems.push_back("e2b_template_aliases must be comma-separated name=template pairs");
  }
  for (auto [name, list] : {std::pair{"registry_allow", &c.registry_allow},
                            std::pair{"registry_plain_http", &c.registry_plain_http},
                            std::pair{"registry_private_hosts", &c.registry_private_hosts}}) {
    for (const auto& host : RegistryHosts(*list)) {
      const bool ok = host.size() <= 255 && host.front() != ':' &&
                      std::all_of(host.begin(), host.end(), [](unsigned char ch) {
                        return std::isalnum(ch) || ch == '.' || ch == '-' || ch == ':' ||
                               ch == '[' || ch == ']';
                      });
      if (!ok) {
        problems.push_back(std::string(name) + ": '" + host + "' is not a host[:port]");
      }
    }
  }
  for (const auto& f : kFields) {
    if (const auto* m = std::get_if<int64_t Config::*>(&f.member)) {
      const bool may_be_zero = std::string_view(f.name) == "sandbox_default_ttl_seconds";
      if (c.**m < 0 || (c.**m == 0 && !may_be_zero)) {
        problems.push_back(std::string(f.name) + " must be greater than 0");
      }
    }
  }
  if (c.exec_default_timeout_seconds < 0)
    problems.push_back("exec_default_timeout_seconds must not be negative");
  if (c.max_timeout_seconds <= 0) problems.push_back("max_timeout_seconds must be greater than 0");
  if (c.pull_timeout_seconds <= 0 || c.pull_timeout_seconds > 604800) {
    problems.push_back("pull_timeout_seconds must be greater than 0 and at most 604800");
  }
  if (c.image_workers > 64) problems.push_back("image_workers must be at most 64");
  if (c.volume_max_mb < 16 || c.volume_max_mb > (int64_t{1} << 24)) {
    problems.push_back("volume_max_mb must be between 16 and 16777216 (16 TiB)");
  }
  if (c.volume_default_mb < 16 || c.volume_default_mb > c.volume_max_mb) {
    problems.push_back("volume_default_mb must be between 16 and volume_max_mb");
  }
  if (!(c.metrics_interval_seconds >= 0.1 && c.metrics_interval_seconds <= 3600)) {
    problems.push_back("metrics_interval_seconds must be between 0.1 and 3600");
  }
  if (c.resume_grace_seconds < 0 || c.resume_grace_seconds > 86400) {
    problems.push_back("resume_grace_seconds must be between 0 and 86400");
  }
  if (c.reader_stall_seconds <= 0 || c.reader_stall_seconds > 604800) {
    problems.push_back("reader_stall_seconds must be greater than 0 and at most 604800");
  }
  if (c.write_timeout_seconds <= 0 || c.write_timeout_seconds > 86400) {
    problems.push_back("write_timeout_seconds must be greater than 0 and at most 86400");
  }
  // Past these, a deadline in nanoseconds overflows.
  if (c.max_timeout_seconds > kMaxTtlSeconds) {
    problems.push_back("max_timeout_seconds must be at most " + std::to_string(kMaxTtlSeconds));
  }
  if (c.paused_ttl_seconds > kMaxTtlSeconds) {
    problems.push_back("paused_ttl_seconds must be at most " + std::to_string(kMaxTtlSeconds));
  }
  if (c.sandbox_default_ttl_seconds > kMaxTtlSeconds) {
    problems.push_back("sandbox_default_ttl_seconds must be at most " +
                       std::to_string(kMaxTtlSeconds));
  }
  // Each sandbox maps 65536 host ids below 2^32; the runtime checks the exact range at start.
  if (c.max_sandboxes > 65535) problems.push_back("max_sandboxes must be at most 65535");
  if (c.host_id_base > 4294901759) problems.push_back("host_id_base must be at most 4294901759");
  if (!c.cgroup_parent.empty()) {
    bool ok = c.cgroup_parent.front() == '/' && c.cgroup_parent.size() <= 200 &&
              c.cgroup_parent.back() != '/';
    std::string_view rest(c.cgroup_parent);
    while (ok && !rest.empty()) {
      rest.remove_prefix(1);  // the '/'
      const std::string_view part = rest.substr(0, rest.find('/'));
      rest.remove_prefix(part.size());
      ok = !part.empty() && part != "." && part != ".." &&
           std::all_of(part.begin(), part.end(), [](unsigned char ch) {
             return std::isalnum(ch) || ch == '.' || ch == '-' || ch == '_';
           });
    }
    if (!ok) {
      problems.push_back(
          "cgroup_parent must be an absolute cgroup path such as /sandstream "
          "(names of a-z, A-Z, 0-9, '.', '-', '_')");
    }
  }
  if (c.default_disk_mb > sandbox::WritableMb({c.default_memory_mb, 1, 1, c.default_disk_mb, 1})) {
    problems.push_back(
        "default_disk_mb must leave a quarter of default_memory_mb (32 MiB at "
        "least) free: tmpfs pages count against the memory limit");
  }
  if (c.log_window_bytes > c.log_window_max_bytes) {
    problems.push_back("log_window_bytes must not exceed log_window_max_bytes");
  }
  const std::pair<int64_t, int64_t> pairs[] = {{c.default_memory_mb, c.max_memory_mb},
                                               {c.default_pids, c.max_pids},
                                               {c.default_cpu_percent, c.max_cpu_percent},
                                               {c.default_disk_mb, c.max_disk_mb},
                                               {c.default_open_files, c.max_open_files}};
  const char* names[] = {"memory_mb", "pids", "cpu_percent", "disk_mb", "open_files"};
  for (size_t i = 0; i < std::size(pairs); ++i) {
    if (pairs[i].first > pairs[i].second) {
      problems.push_back(std::string("default_") + names[i] + " must not exceed max_" + names[i]);
    }
  }
}

}  // namespace

Result<Config> LoadConfig(const std::vector<std::string>& args, bool* print_config, bool* help,
                          bool* version) {
  Config c;
  std::vector<std::string> problems;
  *print_config = false;
  *help = false;
  *version = false;

  std::string config_file;
  if (const char* env = std::getenv("SANDSTREAM_CONFIG")) config_file = env;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 < args.size()) {
        config_file = args[i + 1];
      } else {
        problems.push_back("flag --config needs a value");
      }
    }
    if (args[i].starts_with("--config=")) config_file = args[i].substr(9);
  }
  if (!config_file.empty()) {
    auto text = ReadFile(config_file);
    if (!text) {
      problems.push_back("config file: " + text.error().message);
    } else {
      boost::system::error_code ec;
      json::value v = json::parse(*text, ec);
      if (ec || !v.is_object()) {
        problems.push_back("config file " + config_file + ": not a JSON object");
      } else {
        for (const auto& [key, value] : v.as_object()) {
          const Field* f = FindField(key);
          if (!f) {
            problems.push_back("config file: unknown setting '" + std::string(key) + "'");
            continue;
          }
          std::string text_value =
              value.is_string() ? std::string(value.as_string()) : json::serialize(value);
          SetFromText(c, *f, text_value, "config file", problems);
        }
      }
    }
  }
  for (const auto& f : kFields) {
    if (const char* v = std::getenv(EnvName(f.name).c_str())) {
      SetFromText(c, f, v, EnvName(f.name), problems);
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--print-config") {
      *print_config = true;
      continue;
    }
    if (a == "--help" || a == "-h") {
      *help = true;
      continue;
    }
    if (a == "--version") {
      *version = true;
      continue;
    }
    if (!a.starts_with("--")) {
      problems.push_back("unexpected argument '" + a + "'");
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    for (char& ch : name) {
      if (ch == '-') ch = '_';
    }
    if (name == "config") {
      if (!has_value) ++i;
      continue;
    }
    const Field* f = FindField(name);
    if (!f) {
      problems.push_back("unknown flag '" + a + "'");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        problems.push_back("flag " + a + " needs a value");
        continue;
      }
      value = args[++i];
    }
    SetFromText(c, *f, value, "--" + name, problems);
  }
  if (c.data_dir.empty()) c.data_dir = DefaultDataDir();
  if (c.templates_dir.empty()) c.templates_dir = c.data_dir + "/templates";
  Validate(c, problems);
  if (!problems.empty()) {
    std::string message = "invalid configuration:";
    for (const auto& p : problems) message += "\n  - " + p;
    return Error{ErrorCode::kInvalidRequest, message};
  }
  return c;
}

bool EgressEnabled(const Config& c) {
  return !c.egress_pool.empty() && c.egress_pool != "none";
}

std::optional<std::vector<uint32_t>> EgressResolvers(const Config& c) {
  std::vector<uint32_t> out;
  if (!c.egress_dns.empty()) {
    std::string_view rest = c.egress_dns;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      while (item.starts_with(' ')) item.remove_prefix(1);
      while (item.ends_with(' ')) item.remove_suffix(1);
      auto addr = net::ParseAddress(item);
      if (!addr) return std::nullopt;
      out.push_back(*addr);
    }
    return out;
  }
  auto conf = ReadFile("/etc/resolv.conf");
  if (!conf) return out;
  std::istringstream lines(*conf);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string keyword, value;
    if (words >> keyword >> value && keyword == "nameserver") {
      if (auto addr = net::ParseAddress(value)) out.push_back(*addr);
    }
  }
  return out;
}

std::optional<uint32_t> EgressMarkMask(const Config& c) {
  const std::string& text = c.egress_mark_mask;
  if (!text.starts_with("0x") || text.size() < 3 || text.size() > 10 ||
      text.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos) {
    return std::nullopt;
  }
  const auto mask = static_cast<uint32_t>(std::stoul(text.substr(2), nullptr, 16));
  if (std::popcount(mask) < 3) return std::nullopt;
  return mask;
}

int64_t ConnectionLimit(const Config& c, uint64_t open_files_limit) {
  // What a sandbox keeps open in the daemon (its cgroup files, pidfds, its keeper's socket, a
  // running process's pipes), and the daemon's own (store, logs, epoll, refused connections).
  constexpr uint64_t kPerSandbox = 10;  // with egress: its resolver's two sockets
  constexpr uint64_t kOwn = 512;
  const uint64_t limit = std::min<uint64_t>(open_files_limit, uint64_t{1} << 32);  // RLIM_INFINITY
  const uint64_t sandboxes = static_cast<uint64_t>(c.max_sandboxes);
  const uint64_t reserved =
      sandboxes > limit / kPerSandbox ? limit : kPerSandbox * sandboxes + kOwn;
  uint64_t room = limit > reserved ? limit - reserved : 0;
  // A limit too low for max_sandboxes still serves some connections.
  room = std::max(room, limit / 4);
  return static_cast<int64_t>(std::min(static_cast<uint64_t>(c.max_connections), room));
}

std::string ConfigJson(const Config& c) {
  json::object o;
  for (const auto& f : kFields) {
    std::visit(
        [&](auto member) {
          if (std::string_view(f.name) == "api_key") {
            o[f.name] = c.api_key.empty() ? "" : "(set)";
          } else {
            o[f.name] = c.*member;
          }
        },
        f.member);
  }
  return json::serialize(o);
}

std::optional<std::map<std::string, std::string>> TemplateAliases(const Config& config) {
  std::map<std::string, std::string> aliases;
  for (const std::string& item : RegistryHosts(config.e2b_template_aliases)) {
    const size_t eq = item.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == item.size()) return std::nullopt;
    aliases[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return aliases;
}

std::vector<std::string> RegistryHosts(const std::string& list) {
  std::vector<std::string> hosts;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t begin = item.find_first_not_of(" \t");
    if (begin == std::string::npos) continue;
    const size_t end = item.find_last_not_of(" \t");
    hosts.push_back(item.substr(begin, end - begin + 1));
  }
  return hosts;
}

namespace {

// A setting's default as text: "" for a string whose default is computed at start.
std::string DefaultText(const Field& f) {
  static const Config defaults;
  std::string out;
  std::visit(
      [&](auto member) {
        using T = std::remove_cvref_t<decltype(defaults.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          out = defaults.*member;
        } else if constexpr (std::is_same_v<T, bool>) {
          out = defaults.*member ? "true" : "false";
        } else {
          // %g for seconds (600, not 6E2 as JSON would print it); integers as they are.
          char value[32];
          if constexpr (std::is_same_v<T, double>) {
            std::snprintf(value, sizeof value, "%g", defaults.*member);
          } else {
            std::snprintf(value, sizeof value, "%lld", static_cast<long long>(defaults.*member));
          }
          out = value;
        }
      },
      f.member);
  return out;
}

std::string FlagName(const Field& f) {
  std::string name = f.name;
  for (char& ch : name) {
    if (ch == '_') ch = '-';
  }
  return "--" + name;
}

}  // namespace

std::string ConfigHelp() {
  std::string out =
      "usage: sandstreamd [--config FILE] [--print-config] [--print-config-reference] [--version]\n"
      "                   [--NAME VALUE ...]\n\n"
      "Every setting can come from the JSON config file, the environment (SANDSTREAM_NAME) or a\n"
      "flag (--name-with-dashes VALUE); later sources win. Settings and their defaults:\n\n";
  for (const auto& f : kFields) {
    const std::string value = DefaultText(f);
    out += "  " + FlagName(f) + (value.empty() ? " (computed)" : " (default " + value + ")") + "\n";
  }
  out += "\n--print-config-reference prints what each setting means (docs/configuration.md).\n";
  return out;
}

std::string ConfigReference() {
  std::string out =
      "# Configuration reference\n"
      "\n"
      "<!-- Generated by `sandstreamd --print-config-reference` from the settings table in\n"
      "     src/daemon/config.cc; scripts/test fails when this file differs from it. -->\n"
      "\n"
      "Settings come from a JSON file (`--config FILE` or `SANDSTREAM_CONFIG`), then environment\n"
      "variables (`SANDSTREAM_<NAME>`), then flags (`--name-with-dashes VALUE`); later sources\n"
      "win. `sandstreamd --print-config` shows the result, `--help` the defaults, `--version` the\n"
      "version. Invalid settings are all reported at once, and an unknown name is one of them.\n"
      "Sizes are in bytes unless the name says otherwise.\n"
      "\n"
      "| setting | default | meaning |\n"
      "| --- | --- | --- |\n";
  for (const auto& f : kFields) {
    const std::string value = DefaultText(f);
    std::string shown;
    if (f.computed_default) {
      shown = f.computed_default;
    } else if (value.empty()) {
      shown = "(none)";
    } else {
      shown = "`" + value + "`";
    }
    out += std::string("| `") + f.name + "` | " + shown + " | " + f.description + " |\n";
  }
  return out;
}

}  // namespace sandstream
