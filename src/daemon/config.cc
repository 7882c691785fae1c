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

#include "api/request.h"
#include "cluster/etcd.h"
#include "cluster/node.h"
#include "net/ipv4.h"
#include "platform/fd.h"
#include "sandbox/mounts.h"

namespace sandstream {
namespace json = boost::json;

namespace {

using Member =
    std::variant<std::string Config::*, int64_t Config::*, double Config::*, bool Config::*>;
struct Field {
  const char* name;
  Member member;
};

const Field kFields[] = {
    {"listen", &Config::listen},
    {"data_dir", &Config::data_dir},
    {"api_key", &Config::api_key},
    {"runtime", &Config::runtime},
    {"log_level", &Config::log_level},
    {"templates_dir", &Config::templates_dir},
    {"max_body_bytes", &Config::max_body_bytes},
    {"max_stdin_bytes", &Config::max_stdin_bytes},
    {"max_file_bytes", &Config::max_file_bytes},
    {"max_image_bytes", &Config::max_image_bytes},
    {"max_image_unpacked_bytes", &Config::max_image_unpacked_bytes},
    {"max_image_entries", &Config::max_image_entries},
    {"registry_allow", &Config::registry_allow},
    {"registry_plain_http", &Config::registry_plain_http},
    {"registry_private_hosts", &Config::registry_private_hosts},
    {"pull_timeout_seconds", &Config::pull_timeout_seconds},
    {"image_workers", &Config::image_workers},
    {"exec_default_timeout_seconds", &Config::exec_default_timeout_seconds},
    {"max_timeout_seconds", &Config::max_timeout_seconds},
    {"exec_output_limit_bytes", &Config::exec_output_limit_bytes},
    {"log_window_bytes", &Config::log_window_bytes},
    {"log_window_max_bytes", &Config::log_window_max_bytes},
    {"log_window_entries", &Config::log_window_entries},
    {"retained_tail_bytes", &Config::retained_tail_bytes},
    {"keepalive_seconds", &Config::keepalive_seconds},
    {"write_timeout_seconds", &Config::write_timeout_seconds},
    {"max_connections", &Config::max_connections},
    {"resume_grace_seconds", &Config::resume_grace_seconds},
    {"reader_stall_seconds", &Config::reader_stall_seconds},
    {"kill_grace_ms", &Config::kill_grace_ms},
    {"shutdown_grace_ms", &Config::shutdown_grace_ms},
    {"sandbox_default_ttl_seconds", &Config::sandbox_default_ttl_seconds},
    {"max_sandboxes", &Config::max_sandboxes},
    {"host_id_base", &Config::host_id_base},
    {"allow_nested_userns", &Config::allow_nested_userns},
    {"teardown_on_exit", &Config::teardown_on_exit},
    {"cgroup_parent", &Config::cgroup_parent},
    {"lxcfs", &Config::lxcfs},
    {"max_processes_per_sandbox", &Config::max_processes_per_sandbox},
    {"default_memory_mb", &Config::default_memory_mb},
    {"max_memory_mb", &Config::max_memory_mb},
    {"default_pids", &Config::default_pids},
    {"max_pids", &Config::max_pids},
    {"default_cpu_percent", &Config::default_cpu_percent},
    {"max_cpu_percent", &Config::max_cpu_percent},
    {"default_disk_mb", &Config::default_disk_mb},
    {"max_disk_mb", &Config::max_disk_mb},
    {"default_open_files", &Config::default_open_files},
    {"max_open_files", &Config::max_open_files},
    {"terminal_idle_seconds", &Config::terminal_idle_seconds},
    {"terminal_replay_bytes", &Config::terminal_replay_bytes},
    {"web_dir", &Config::web_dir},
    {"preview_domain", &Config::preview_domain},
    {"public_url", &Config::public_url},
    {"egress_pool", &Config::egress_pool},
    {"egress_dns", &Config::egress_dns},
    {"egress_mark_mask", &Config::egress_mark_mask},
    {"egress_max_connections", &Config::egress_max_connections},
    {"role", &Config::role},
    {"node_id", &Config::node_id},
    {"advertise", &Config::advertise},
    {"etcd", &Config::etcd},
    {"etcd_prefix", &Config::etcd_prefix},
    {"gateway_nodes", &Config::gateway_nodes},
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
            problems.push_back(source + ": " + f.name + " must be true or false, got '" + text + "'");
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
    problems.push_back("egress_mark_mask must be a hexadecimal mask of 3 bits or more, like 0x0f000000");
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
    if (!ok) problems.push_back("public_url must be http:// or https:// and a host[:port], no path");
  }
  ValidateEgress(c, problems);
  ValidateCluster(c, problems);
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
  if (c.exec_default_timeout_seconds < 0) problems.push_back("exec_default_timeout_seconds must not be negative");
  if (c.max_timeout_seconds <= 0) problems.push_back("max_timeout_seconds must be greater than 0");
  if (c.pull_timeout_seconds <= 0 || c.pull_timeout_seconds > 604800) {
    problems.push_back("pull_timeout_seconds must be greater than 0 and at most 604800");
  }
  if (c.image_workers > 64) problems.push_back("image_workers must be at most 64");
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
  if (c.max_timeout_seconds > api::kMaxTtlSeconds) {
    problems.push_back("max_timeout_seconds must be at most " +
                       std::to_string(api::kMaxTtlSeconds));
  }
  if (c.sandbox_default_ttl_seconds > api::kMaxTtlSeconds) {
    problems.push_back("sandbox_default_ttl_seconds must be at most " +
                       std::to_string(api::kMaxTtlSeconds));
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
      problems.push_back("cgroup_parent must be an absolute cgroup path such as /sandstream "
                         "(names of a-z, A-Z, 0-9, '.', '-', '_')");
    }
  }
  if (c.default_disk_mb > sandbox::WritableMb({c.default_memory_mb, 1, 1, c.default_disk_mb, 1})) {
    problems.push_back("default_disk_mb must leave a quarter of default_memory_mb (32 MiB at "
                       "least) free: tmpfs pages count against the memory limit");
  }
  if (c.log_window_bytes > c.log_window_max_bytes) {
    problems.push_back("log_window_bytes must not exceed log_window_max_bytes");
  }
  const std::pair<int64_t, int64_t> pairs[] = {
      {c.default_memory_mb, c.max_memory_mb}, {c.default_pids, c.max_pids},
      {c.default_cpu_percent, c.max_cpu_percent}, {c.default_disk_mb, c.max_disk_mb},
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
          std::string text_value = value.is_string() ? std::string(value.as_string())
                                                     : json::serialize(value);
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

bool EgressEnabled(const Config& c) { return !c.egress_pool.empty() && c.egress_pool != "none"; }

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
  // What a sandbox keeps open in the daemon (its cgroup files, pidfds, the spawner's socket, a
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

std::string ConfigHelp() {
  std::string out =
      "usage: sandstreamd [--config FILE] [--print-config] [--version] [--NAME VALUE ...]\n\n"
      "Every setting can come from the JSON config file, the environment (SANDSTREAM_NAME) or a\n"
      "flag (--name-with-dashes VALUE); later sources win. Settings and their defaults:\n\n";
  Config defaults;
  for (const auto& f : kFields) {
    std::string name = f.name;
    for (char& ch : name) {
      if (ch == '_') ch = '-';
    }
    out += "  --" + name;
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(defaults.*member)>;
          if constexpr (std::is_same_v<T, std::string>) {
            out += (defaults.*member).empty() ? std::string(" (computed)")
                                              : " (default " + defaults.*member + ")";
          } else if constexpr (std::is_same_v<T, bool>) {
            out += defaults.*member ? " (default true)" : " (default false)";
          } else {
            // %g for seconds (600, not 6E2 as JSON would print it); integers as they are.
            char value[32];
            if constexpr (std::is_same_v<T, double>) {
              std::snprintf(value, sizeof value, "%g", defaults.*member);
            } else {
              std::snprintf(value, sizeof value, "%lld", static_cast<long long>(defaults.*member));
            }
            out += std::string(" (default ") + value + ")";
          }
        },
        f.member);
    out += "\n";
  }
  out += "\nThe README's configuration reference explains each setting.\n";
  return out;
}

}  // namespace sandstream
