// sandstreamd: the composition root. Reads the config, opens the store, picks the runtime,
// serves HTTP on one io_context thread, and shuts down in order on SIGTERM/SIGINT.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string_view>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "api/server.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/version.h"
#include "cluster/catalog.h"
#include "cluster/etcd.h"
#include "cluster/gateway.h"
#include "cluster/members.h"
#include "cluster/registrar.h"
#include "cluster/tenants.h"
#include "daemon/config.h"
#include "daemon/runtime_factory.h"
#include "platform/fd.h"
#include "service/service.h"
#include "service/store.h"

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace sandstream;

namespace {

// The key from the config, else the one stored in the data dir, else a new one (stored 0600).
Result<std::string> ResolveApiKey(const Config& config, bool* generated) {
  *generated = false;
  if (!config.api_key.empty()) return config.api_key;
  const std::string path = config.data_dir + "/api_key";
  if (auto stored = ReadFile(path)) {
    std::string key = *stored;
    while (!key.empty() && (key.back() == '\n' || key.back() == ' ')) key.pop_back();
    if (!key.empty()) return key;
  }
  std::string key = NewApiKey();
  if (auto w = WriteFileAtomic(path, key + "\n", 0600); !w) return std::move(w).error();
  *generated = true;
  return key;
}

// The console's directory: the configured one, else an installed copy beside the binary, else
// the source tree's build output. Empty when there is none.
std::string ResolveWebDir(const Config& config) {
  if (config.web_dir == "none") return "";
  if (!config.web_dir.empty()) return config.web_dir;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path() / "../share/sandstream/web");
  candidates.emplace_back(SANDSTREAM_WEB_DIST);
  for (const auto& dir : candidates) {
    if (fs::is_regular_file(dir / "index.html", ec)) return fs::weakly_canonical(dir, ec).string();
  }
  return "";
}

// Every connection and every sandbox's pipes and pidfds are descriptors: the soft limit goes up
// to the hard one. Returns the limit in force.
uint64_t RaiseOpenFilesLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur;
}

ServiceOptions MakeServiceOptions(const Config& c) {
  ServiceOptions o;
  o.default_limits = {c.default_memory_mb, c.default_pids, c.default_cpu_percent, c.default_disk_mb,
                      c.default_open_files};
  o.max_limits = {c.max_memory_mb, c.max_pids, c.max_cpu_percent, c.max_disk_mb, c.max_open_files};
  o.exec_default_timeout_seconds = c.exec_default_timeout_seconds;
  o.max_timeout_seconds = c.max_timeout_seconds;
  o.exec_output_limit_bytes = static_cast<uint64_t>(c.exec_output_limit_bytes);
  o.default_log_limits = {static_cast<uint64_t>(c.log_window_bytes),
                          static_cast<uint64_t>(c.log_window_entries)};
  o.log_window_max_bytes = static_cast<uint64_t>(c.log_window_max_bytes);
  o.retained_tail_bytes = static_cast<uint64_t>(c.retained_tail_bytes);
  o.kill_grace = std::chrono::milliseconds(c.kill_grace_ms);
  o.resume_grace = std::chrono::milliseconds(static_cast<int64_t>(c.resume_grace_seconds * 1000));
  o.reader_stall = std::chrono::milliseconds(static_cast<int64_t>(c.reader_stall_seconds * 1000));
  o.sandbox_default_ttl_seconds = c.sandbox_default_ttl_seconds;
  o.paused_ttl = std::chrono::seconds(c.paused_ttl_seconds);
  o.metrics_interval =
      std::chrono::milliseconds(static_cast<int64_t>(c.metrics_interval_seconds * 1000));
  o.max_sandboxes = static_cast<size_t>(c.max_sandboxes);
  o.max_processes_per_sandbox = static_cast<size_t>(c.max_processes_per_sandbox);
  o.allow_nested_userns = c.allow_nested_userns;
  o.teardown_on_exit = c.teardown_on_exit;
  o.base_env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                "HOME=/workspace", "TERM=xterm-256color"};
  o.templates_dir = c.templates_dir;
  o.images_dir = c.data_dir + "/images";
  o.volumes_dir = c.data_dir + "/volumes";
  o.checkpoints_dir = c.data_dir + "/checkpoints";
  o.volume_default_mb = c.volume_default_mb;
  o.volume_max_mb = c.volume_max_mb;
  o.image_limits = {static_cast<uint64_t>(c.max_image_bytes),
                    static_cast<uint64_t>(c.max_image_unpacked_bytes),
                    static_cast<uint64_t>(c.max_image_entries)};
  o.registry_allow = RegistryHosts(c.registry_allow);
  o.registry_plain_http = RegistryHosts(c.registry_plain_http);
  o.registry_private_hosts = RegistryHosts(c.registry_private_hosts);
  o.pull_timeout_seconds = c.pull_timeout_seconds;
  o.image_workers = static_cast<size_t>(c.image_workers);
  return o;
}

// The line a supervisor (and the tests) wait for, with the bound address. Returns host:port.
std::string PrintListening(const boost::asio::ip::tcp::endpoint& endpoint, const char* role) {
  std::string address = endpoint.address().to_string();
  if (endpoint.address().is_v6()) address = "[" + address + "]";
  std::printf("sandstreamd %s %slistening on http://%s:%u\n", kVersion, role, address.c_str(),
              endpoint.port());
  std::fflush(stdout);
  return address + ":" + std::to_string(endpoint.port());
}

// The etcd client of the config, if it names etcd (validated by LoadConfig).
std::unique_ptr<cluster::Etcd> MakeEtcd(asio::io_context& io, const Config& config) {
  if (config.etcd.empty()) return nullptr;
  return std::make_unique<cluster::Etcd>(io.get_executor(), *cluster::ParseEndpoints(config.etcd));
}

// This node as gateways see it: what it holds and what it may hold.
cluster::NodeRecord NodeRecordOf(const Service& service, const Config& config,
                                 const std::string& address) {
  cluster::NodeRecord r;
  r.id = config.node_id;
  r.address = address;
  r.sandboxes = static_cast<int64_t>(service.sandbox_count());
  r.max_sandboxes = config.max_sandboxes;
  for (const SandboxEntry* sb : service.List()) {
    r.memory_mb += sb->limits.memory_mb;
    r.cpu_percent += sb->limits.cpu_percent;
  }
  static const int64_t memory_mb =
      static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE) / (1 << 20);
  static const int64_t cpu_percent = ::sysconf(_SC_NPROCESSORS_ONLN) * 100;
  r.memory_mb_capacity = memory_mb;
  r.sandbox_memory_mb = config.default_memory_mb;
  r.cpu_percent_capacity = cpu_percent;
  for (const Template* t : service.templates().List()) r.templates.push_back(t->name);
  r.stopping = service.shutting_down();
  return r;
}

asio::awaitable<void> StopGatewayOnSignal(asio::signal_set& signals, cluster::Gateway& gateway,
                                          cluster::Members& members, const Config& config,
                                          asio::io_context& io) {
  auto [ec, sig] = co_await signals.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) co_return;
  log::Info("shutting down", {{"signal", std::to_string(sig)}});
  gateway.StopAccepting();
  members.Stop();
  // Relayed streams end when their clients or nodes end them; past the grace they are cut, and
  // a client resumes through another gateway.
  co_await gateway.SessionsEnded(std::chrono::milliseconds(config.shutdown_grace_ms));
  log::Info("stopped");
  io.stop();
}

// The gateway role: no sandboxes, no state; its nodes from etcd or gateway_nodes.
int RunGateway(const Config& config) {
  asio::io_context io(1);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  std::unique_ptr<cluster::Etcd> etcd = MakeEtcd(io, config);
  cluster::Members::Options members_options;
  members_options.prefix = config.etcd_prefix;
  members_options.etcd = etcd.get();
  if (!etcd) members_options.nodes = *cluster::ParseEndpoints(config.gateway_nodes);
  members_options.api_key = config.api_key;
  cluster::Members members(io.get_executor(), std::move(members_options));
  cluster::GatewayOptions options;
  options.preview_domain = config.preview_domain;
  options.max_body_bytes = static_cast<uint64_t>(config.max_body_bytes);
  options.write_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.write_timeout_seconds * 1000));
  options.shared_tenants = etcd != nullptr;
  options.api_key = config.api_key;
  // Each client's connection holds a node's too.
  const uint64_t open_files = RaiseOpenFilesLimit();
  options.max_connections =
      static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(config.max_connections),
                                             open_files > 1024 ? (open_files - 512) / 2 : 256));
  if (static_cast<int64_t>(options.max_connections) < config.max_connections) {
    log::Warn("max_connections lowered to fit RLIMIT_NOFILE",
              {{"max_connections", std::to_string(options.max_connections)}});
  }
  cluster::Gateway gateway(io.get_executor(), members, options);
  auto endpoint = gateway.Listen(config.listen);
  if (!endpoint) {
    std::cerr << "sandstreamd: " << endpoint.error().message << "\n";
    return 1;
  }
  const std::string listening = PrintListening(*endpoint, "gateway ");
  log::Info("gateway started",
            {{"listen", listening}, {"membership", etcd ? "etcd" : "gateway_nodes"}});
  asio::co_spawn(io, members.Run(), asio::detached);
  asio::co_spawn(io, gateway.Run(), asio::detached);
  asio::co_spawn(io, StopGatewayOnSignal(signals, gateway, members, config, io), asio::detached);
  io.run();
  return 0;
}

asio::awaitable<void> ShutdownOnSignal(asio::signal_set& signals, api::Server& server,
                                       Service& service, const Config& config, asio::io_context& io,
                                       cluster::Registrar* registrar) {
  auto [ec, sig] = co_await signals.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) co_return;
  log::Info("shutting down", {{"signal", std::to_string(sig)}});
  if (registrar) co_await registrar->Leave();
  server.StopAccepting();
  server.EndStreams();
  co_await service.Shutdown();
  // The sessions flush their last events and close within the grace; whatever is still open
  // then is stuck (a write to a client that reads nothing): it is closed, and its session ends
  // before the server goes.
  const bool ended =
      co_await server.SessionsEnded(std::chrono::milliseconds(config.shutdown_grace_ms));
  if (!ended) {
    server.CloseConnections();
    const bool closed = co_await server.SessionsEnded(std::chrono::seconds(1));
    if (!closed) {
      log::Warn("sessions still open at exit",
                {{"sessions", std::to_string(server.open_sessions())}});
    }
  }
  log::Info("stopped");
  io.stop();
}

// The daemon, start to stop; main() reports what escapes it.
int Run(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  // The reference is the same whatever else is set: defaults, not this environment's values.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--print-config-reference") {
      std::cout << ConfigReference();
      return 0;
    }
  }
  bool print_config = false;
  bool help = false;
  bool version = false;
  auto config =
      LoadConfig(std::vector<std::string>(argv + 1, argv + argc), &print_config, &help, &version);
  if (help) {
    std::cout << ConfigHelp();
    return 0;
  }
  if (version) {
    std::cout << "sandstreamd " << kVersion << "\n";
    return 0;
  }
  if (!config) {
    std::cerr << "sandstreamd: " << config.error().message << "\n";
    return 2;
  }
  if (print_config) {
    std::cout << ConfigJson(*config) << "\n";
    return 0;
  }
  log::Level level;
  if (log::ParseLevel(config->log_level, &level)) log::SetLevel(level);
  if (config->role == "gateway") return RunGateway(*config);

  std::error_code fs_ec;
  fs::create_directories(config->data_dir, fs_ec);
  if (fs_ec) {
    std::cerr << "sandstreamd: data dir " << config->data_dir << ": " << fs_ec.message() << "\n";
    return 1;
  }
  ::chmod(config->data_dir.c_str(), 0700);

  bool generated = false;
  auto key = ResolveApiKey(*config, &generated);
  if (!key) {
    std::cerr << "sandstreamd: API key: " << key.error().message << "\n";
    return 1;
  }
  auto store = Store::Open(config->data_dir + "/sandstream.db");
  if (!store) {
    std::cerr << "sandstreamd: " << store.error().message << "\n";
    return 1;
  }
  std::shared_ptr<net::Egress> egress = MakeEgress(*config);
  auto runtime = MakeRuntime(*config, egress);
  if (!runtime) {
    std::cerr << "sandstreamd: runtime: " << runtime.error().message << "\n";
    return 1;
  }

  asio::io_context io(1);
  // Before anything can be seen from outside (the listening line): a SIGTERM from then on is a
  // graceful stop, served once the loop runs, never the default action.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  // Tenants, their keys and scoped tokens; the configured key is the admin's. With etcd,
  // tenants and keys are the cluster's, mirrored here.
  Access access(*key, store->get());
  std::unique_ptr<cluster::Etcd> etcd = MakeEtcd(io, *config);
  const Service* service_ref = nullptr;  // set once the service exists
  std::unique_ptr<cluster::EtcdTenants> tenants;
  if (etcd) {
    cluster::EtcdTenants::Options tenants_options;
    tenants_options.prefix = config->etcd_prefix;
    tenants_options.node_id = config->node_id;
    tenants = std::make_unique<cluster::EtcdTenants>(
        io.get_executor(), *etcd, access,
        [&service_ref] {
          return service_ref ? service_ref->quotas().Committed()
                             : std::map<std::string, TenantUsage, std::less<>>{};
        },
        std::move(tenants_options));
    access.Share(tenants.get());
  }
  // Templates pulled on any node are pulled on every node, those that join later included.
  std::unique_ptr<cluster::EtcdTemplates> catalog;
  if (etcd) {
    cluster::EtcdTemplates::Options catalog_options;
    catalog_options.prefix = config->etcd_prefix;
    catalog = std::make_unique<cluster::EtcdTemplates>(io.get_executor(), *etcd,
                                                       std::move(catalog_options));
  }
  if (auto loaded = access.Load(); !loaded) {
    std::cerr << "sandstreamd: " << loaded.error().message << "\n";
    return 1;
  }
  ServiceOptions service_options = MakeServiceOptions(*config);
  service_options.access = &access;
  service_options.catalog = catalog.get();
  service_options.node_id = config->node_id;
  service_options.egress = egress;
  if (egress) service_options.dns_upstreams = egress->options().resolvers;
  Service service(io.get_executor(), **runtime, **store, std::move(service_options));
  service.Restore();
  service_ref = &service;

  api::ServerOptions server_options;
  server_options.api_key = *key;
  server_options.access = &access;
  server_options.max_body_bytes = static_cast<uint64_t>(config->max_body_bytes);
  server_options.max_stdin_bytes = static_cast<uint64_t>(config->max_stdin_bytes);
  server_options.max_file_bytes = static_cast<uint64_t>(config->max_file_bytes);
  server_options.max_image_bytes = static_cast<uint64_t>(config->max_image_bytes);
  server_options.keepalive = std::chrono::seconds(config->keepalive_seconds);
  server_options.write_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config->write_timeout_seconds * 1000));
  const uint64_t open_files = RaiseOpenFilesLimit();
  server_options.max_connections = static_cast<size_t>(ConnectionLimit(*config, open_files));
  if (static_cast<int64_t>(server_options.max_connections) < config->max_connections) {
    log::Warn("max_connections lowered to fit RLIMIT_NOFILE",
              {{"max_connections", std::to_string(server_options.max_connections)},
               {"open_files_limit", std::to_string(open_files)},
               {"max_sandboxes", std::to_string(config->max_sandboxes)}});
  }
  server_options.terminal_idle = std::chrono::seconds(config->terminal_idle_seconds);
  server_options.terminal_replay_bytes = static_cast<uint64_t>(config->terminal_replay_bytes);
  server_options.web_dir = ResolveWebDir(*config);
  server_options.preview_domain = config->preview_domain;
  server_options.public_url = config->public_url;
  server_options.metrics_per_sandbox = config->metrics_per_sandbox;
  server_options.e2b_template_aliases = TemplateAliases(*config).value_or(
      std::map<std::string, std::string>{});  // validated by LoadConfig
  if (tenants) {
    server_options.refresh_access = [&tenants]() -> asio::awaitable<void> {
      co_await tenants->Refresh();
    };
  }
  // Where gateways reach this node: advertise, else the address it listens on (a wildcard one
  // says nothing: loopback, with a warning), known once it is bound.
  std::string advertised;
  if (!config->node_id.empty()) {
    server_options.node_record = [&service, &config, &advertised] {
      return NodeRecordOf(service, *config, advertised).Json();
    };
  }
  api::Server server(io.get_executor(), service, server_options);
  auto endpoint = server.Listen(config->listen);
  if (!endpoint) {
    std::cerr << "sandstreamd: " << endpoint.error().message << "\n";
    return 1;
  }
  advertised = config->advertise;
  if (advertised.empty()) {
    std::string host = endpoint->address().to_string();
    if (endpoint->address().is_unspecified()) {
      if (!config->node_id.empty()) {
        log::Warn(
            "listening on a wildcard address without advertise: gateways are told "
            "127.0.0.1; set advertise to the address they reach this node at");
      }
      host = "127.0.0.1";
    }
    if (endpoint->address().is_v6() && host != "127.0.0.1") host = "[" + host + "]";
    advertised = host + ":" + std::to_string(endpoint->port());
  }
  std::unique_ptr<cluster::Registrar> registrar;
  if (etcd) {
    registrar = std::make_unique<cluster::Registrar>(
        io.get_executor(), *etcd, cluster::NodeKey(config->etcd_prefix, config->node_id),
        [&service, &config, &advertised] { return NodeRecordOf(service, *config, advertised); });
  }

  if (egress) {
    // Sandboxes never reach the API, even on an address a rule names. Those taken back from
    // an earlier daemon get the shared table as this one's config says, now.
    egress->SetApiPort(endpoint->port());
    if (service.egress_sandboxes() > 0) {
      if (auto prepared = egress->Prepare(); !prepared) {
        log::Error("egress: could not prepare the host", {{"error", prepared.error().message}});
      }
    }
    if (egress->options().resolvers.empty()) {
      log::Warn(
          "egress: no upstream resolver (no IPv4 nameserver in /etc/resolv.conf and no "
          "egress_dns): names will not resolve in sandboxes with egress");
    }
  }
  const std::string listening = PrintListening(*endpoint, "");
  if (generated) {
    std::printf("API key (generated, stored in %s/api_key): %s\n", config->data_dir.c_str(),
                key->c_str());
  }
  std::fflush(stdout);
  log::Info("started", {{"listen", listening},
                        {"runtime", std::string((*runtime)->name())},
                        {"data_dir", config->data_dir},
                        {"max_connections", std::to_string(server_options.max_connections)}});

  asio::co_spawn(io, server.Run(), asio::detached);
  if (registrar) asio::co_spawn(io, registrar->Run(), asio::detached);
  if (tenants) asio::co_spawn(io, tenants->Run(), asio::detached);
  if (catalog) asio::co_spawn(io, catalog->Run(service), asio::detached);
  asio::co_spawn(io, ShutdownOnSignal(signals, server, service, *config, io, registrar.get()),
                 asio::detached);
  io.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sandstreamd: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "sandstreamd: an unknown error stopped it\n");
  }
  return 1;
}
