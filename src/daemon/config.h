// sandstreamd's configuration: one struct, one line of documentation per field. Read from a
// JSON file, then SANDSTREAM_* environment variables, then --flags; later sources win.
// Validation reports every problem at once. Defaults deny: limits always set, loopback only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace sandstream {

struct Config {
  std::string listen = "127.0.0.1:8080";     // address:port to serve HTTP on (port 0 picks one)
  std::string data_dir;                      // state: SQLite, API key, sandboxes (default: $XDG_STATE_HOME/sandstream, or /var/lib/sandstream for root)
  std::string api_key;                       // bearer key; empty: read or generate <data_dir>/api_key
  std::string runtime = "namespace";         // sandbox runtime: "namespace" (isolated) or "directory" (no isolation, development only)
  std::string log_level = "info";            // debug, info, warn or error
  std::string templates_dir;                 // directories holding full root filesystems, one per template (default: <data_dir>/templates)
  int64_t max_body_bytes = 1 << 20;          // largest JSON request body
  int64_t max_stdin_bytes = 16 << 20;        // largest stdin upload
  int64_t max_file_bytes = 1 << 30;          // largest file upload through the files API
  int64_t max_image_bytes = int64_t{4} << 30;          // largest image archive imported as a template
  int64_t max_image_unpacked_bytes = int64_t{16} << 30;// largest image, all its layers unpacked
  int64_t max_image_entries = 1000000;                 // most files in one layer
  std::string registry_allow;                // the only registries templates are pulled from, comma-separated host[:port] (empty: any; docker.io for Docker Hub)
  std::string registry_plain_http;           // registries pulled from over plain HTTP, comma-separated host[:port] (a host alone: any port); they may be on any address
  std::string registry_private_hosts;        // registries pulled from over HTTPS although on loopback, private or link-local addresses, comma-separated host[:port] (others: public addresses only)
  double pull_timeout_seconds =
      1800;  // a template pull that takes longer fails (besides the 60 s stall limit)
  int64_t image_workers =
      4;  // imports, pulls and snapshots made at once: one per tenant at a time, tenants in turn
  double exec_default_timeout_seconds = 600; // total timeout of exec and exec/stream when the request sets none (0: none)
  double max_timeout_seconds = 604800;       // largest timeout a request may ask for
  int64_t exec_output_limit_bytes = 10 << 20;// buffered exec keeps at most this much of stdout and of stderr
  int64_t log_window_bytes = 8 << 20;        // output retained per process for slow or reconnecting readers
  int64_t log_window_max_bytes = 256 << 20;  // largest log_window_bytes a request may ask for
  int64_t log_window_entries = 65536;        // chunks retained per process (bounds the cost of tiny writes)
  int64_t retained_tail_bytes = 65536;       // output kept in the database after a process ends
  int64_t keepalive_seconds = 15;            // idle SSE streams get a `: keepalive` comment this often
  double write_timeout_seconds = 60;         // a write to a client (a response, SSE, WebSocket) that makes no progress for this long ends the connection as gone
  int64_t max_connections = 12000;           // open client connections at most (503 above), a node's or a gateway's; lowered at start to what RLIMIT_NOFILE leaves (after max_sandboxes' descriptors; a gateway's connection takes two)
  double resume_grace_seconds = 30;          // a reader that holds its process back (flow "wait") and loses its connection keeps its place this long, so a resume gets every byte (0: not at all)
  double reader_stall_seconds = 300;         // a reader that holds its process back and takes nothing for this long becomes a skipping reader (it gets a `gap`)
  int64_t kill_grace_ms = 2000;              // between TERM and KILL when a process is stopped
  int64_t shutdown_grace_ms = 5000;          // how long shutdown waits for streams to drain
  int64_t sandbox_default_ttl_seconds = 0;   // TTL of sandboxes created without one (0: none)
  int64_t max_sandboxes = 1000;              // live sandboxes at most
  int64_t host_id_base = 1000000;            // host uid/gid of root in the first sandbox; sandbox i maps 65536 ids from host_id_base + i * 65536, which must hold no host user and lie in /etc/subuid's ranges for root if it has any
  bool teardown_on_exit = false;             // a stopping daemon ends every sandbox and process (else they run on and the next start takes them back)
  std::string cgroup_parent;                 // where sandbox cgroups go: empty, below the daemon's own cgroup; an absolute path (/sandstream), that cgroup of every hierarchy, made if missing: outside the daemon's own, so sandboxes outlive a container the daemon runs in (one daemon per path)
  std::string lxcfs = "/usr/bin/lxcfs";      // the lxcfs that answers each sandbox's /proc/meminfo, cpuinfo, stat, uptime and /sys/devices/system/cpu/online from its limits, started on demand at <data_dir>/lxcfs and left running while sandboxes outlive the daemon; empty or absent: sandboxes see the host's
  bool allow_nested_userns = false;          // lets sandbox requests ask for allow_nested_userns (their processes may create user namespaces); refused with 400 otherwise
  int64_t max_processes_per_sandbox = 1024;  // running processes per sandbox at most
  int64_t default_memory_mb = 512;           // sandbox memory limit unless the request sets one
  int64_t max_memory_mb = 8192;              // largest memory limit a request may ask for
  int64_t default_pids = 256;                // sandbox process limit
  int64_t max_pids = 4096;                   // largest process limit a request may ask for
  int64_t default_cpu_percent = 100;         // CPU share, 100 = one core
  int64_t max_cpu_percent = 800;             // largest CPU share a request may ask for
  int64_t default_disk_mb = 256;             // writable space (/, /tmp, /dev/shm share it); counts against memory_mb, so at most memory_mb less a quarter (32 MiB at least) of it is given
  int64_t max_disk_mb = 65536;               // largest disk size a request may ask for
  int64_t default_open_files = 1024;         // RLIMIT_NOFILE inside
  int64_t max_open_files = 16384;            // largest open-files limit a request may ask for
  int64_t terminal_idle_seconds = 300;       // a terminal no client has been attached to for this long is ended
  int64_t terminal_replay_bytes = 1 << 20;   // output a terminal keeps to replay to a client that (re)attaches
  std::string web_dir;                       // the console's files served at / (default: the build's web/dist; "none": no console)
  std::string preview_domain = "localhost";  // exposed ports answer at {port}-{sandbox id}.{preview_domain}
  std::string public_url;                    // how clients reach the daemon (scheme://host[:port]), for the URLs it hands out; empty: http:// and the request's Host
  std::string egress_pool = "10.200.0.0/16"; // addresses of sandboxes with egress, a /31 each (gateway, sandbox); must hold 2 * max_sandboxes and overlap no host network; "" or "none": no egress (requests for it get 400)
  std::string egress_dns;                    // upstream resolvers the sandboxes' DNS is forwarded to, comma-separated IPv4 addresses (default: the nameservers of /etc/resolv.conf)
  std::string egress_mark_mask = "0x0f000000"; // packet mark bits the egress rules use (3 bits at least), clear of other firewalls' marks (Tailscale 0xff0000, Calico 0xffff0000, kube-proxy 0xc000)
  int64_t egress_max_connections = 1024;     // connections a sandbox with egress may have open at once; past it new ones are reset
  std::string role = "node";                 // "node" (runs sandboxes) or "gateway" (stateless, routes every request to the node that holds its sandbox and places new ones)
  std::string node_id;                       // this node's id in a cluster ([a-z0-9-], 40 at most): its sandbox ids carry it (sb_{node_id}_...); empty: not in a cluster
  std::string advertise;                     // host:port gateways reach this node's API at (default: listen)
  std::string etcd;                          // etcd endpoints, comma-separated http://host:port: nodes register there under a lease, gateways read who is up (empty: no etcd)
  std::string etcd_prefix = "/sandstream/";  // the keys of this cluster in etcd
  std::string gateway_nodes;                 // a gateway without etcd: its nodes' host:port, comma-separated (each says its id and load at GET /healthz, to the admin key: give the gateway api_key)
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
// registry_allow, registry_plain_http or registry_private_hosts as its entries.
std::vector<std::string> RegistryHosts(const std::string& list);
std::string ConfigHelp();

}  // namespace sandstream
