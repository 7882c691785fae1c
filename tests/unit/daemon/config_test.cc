// Unit tests of sandstreamd's configuration: defaults, the JSON file, SANDSTREAM_* variables
// and --flags in that order of precedence, every problem reported at once, and the printed
// configuration that never shows the API key.
#include "daemon/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <boost/json.hpp>

extern char** environ;

namespace sandstream {
namespace {
namespace json = boost::json;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The test runner's own environment must not leak into the configuration under test.
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const size_t eq = entry.find('=');
      const std::string name = entry.substr(0, eq);
      if (name.starts_with("SANDSTREAM_") || name == "XDG_STATE_HOME") {
        saved_[name] = entry.substr(eq + 1);
      }
    }
    for (const auto& [name, value] : saved_) ::unsetenv(name.c_str());
  }

  void TearDown() override {
    for (const std::string& name : set_) ::unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    for (const std::string& path : files_) std::remove(path.c_str());
  }

  void SetEnv(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    set_.push_back(name);
  }

  std::string WriteFile(const std::string& text) {
    std::string path = ::testing::TempDir() + "sandstream_config_test_" +
                       std::to_string(::getpid()) + "_" + std::to_string(files_.size()) + ".json";
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  Result<Config> Load(const std::vector<std::string>& args) {
    print_config_ = true;  // LoadConfig must reset all three
    help_ = true;
    version_ = true;
    return LoadConfig(args, &print_config_, &help_, &version_);
  }

  // The message of a failed load; fails the test if the load succeeded.
  std::string Problems(const std::vector<std::string>& args) {
    auto r = Load(args);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return "";
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
    EXPECT_TRUE(r.error().message.starts_with("invalid configuration:")) << r.error().message;
    return r.error().message;
  }

  static size_t CountProblems(const std::string& message) {
    size_t n = 0;
    for (size_t at = message.find("\n  - "); at != std::string::npos;
         at = message.find("\n  - ", at + 1)) {
      ++n;
    }
    return n;
  }

  bool print_config_ = false;
  bool help_ = false;
  bool version_ = false;

 private:
  std::map<std::string, std::string> saved_;
  std::vector<std::string> set_;
  std::vector<std::string> files_;
};

TEST_F(ConfigTest, DefaultsDenyAndBoundEverything) {
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Config& c = *r;
  EXPECT_FALSE(print_config_);
  EXPECT_FALSE(help_);
  EXPECT_FALSE(version_);
  EXPECT_EQ(c.listen, "127.0.0.1:8080");
  EXPECT_EQ(c.api_key, "");
  EXPECT_EQ(c.runtime, "namespace");
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.max_body_bytes, 1 << 20);
  EXPECT_EQ(c.max_stdin_bytes, 16 << 20);
  EXPECT_EQ(c.exec_default_timeout_seconds, 600);
  EXPECT_EQ(c.max_timeout_seconds, 604800);
  EXPECT_EQ(c.exec_output_limit_bytes, 10 << 20);
  EXPECT_EQ(c.log_window_bytes, 8 << 20);
  EXPECT_EQ(c.log_window_max_bytes, 256 << 20);
  EXPECT_EQ(c.log_window_entries, 65536);
  EXPECT_EQ(c.retained_tail_bytes, 65536);
  EXPECT_EQ(c.keepalive_seconds, 15);
  EXPECT_EQ(c.kill_grace_ms, 2000);
  EXPECT_EQ(c.shutdown_grace_ms, 5000);
  EXPECT_EQ(c.sandbox_default_ttl_seconds, 0);
  EXPECT_EQ(c.max_sandboxes, 1000);
  EXPECT_EQ(c.max_processes_per_sandbox, 1024);
  EXPECT_EQ(c.default_memory_mb, 512);
  EXPECT_EQ(c.max_memory_mb, 8192);
  EXPECT_EQ(c.default_pids, 256);
  EXPECT_EQ(c.max_pids, 4096);
  EXPECT_EQ(c.default_cpu_percent, 100);
  EXPECT_EQ(c.max_cpu_percent, 800);
  EXPECT_EQ(c.default_disk_mb, 256);
  EXPECT_EQ(c.max_disk_mb, 65536);
  EXPECT_EQ(c.default_open_files, 1024);
  EXPECT_EQ(c.max_open_files, 16384);
  if (::geteuid() == 0) {
    EXPECT_EQ(c.data_dir, "/var/lib/sandstream");
  }
  EXPECT_FALSE(c.data_dir.empty());
  EXPECT_EQ(c.templates_dir, c.data_dir + "/templates");
}

TEST_F(ConfigTest, DefaultDataDirIsVarLibForRootAndXdgStateHomeOtherwise) {
  SetEnv("XDG_STATE_HOME", "/srv/state");
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string expected = ::geteuid() == 0 ? "/var/lib/sandstream" : "/srv/state/sandstream";
  EXPECT_EQ(r->data_dir, expected);
  EXPECT_EQ(r->templates_dir, expected + "/templates");
}

TEST_F(ConfigTest, EnvironmentOverridesDefaults) {
  SetEnv("SANDSTREAM_LISTEN", "0.0.0.0:9000");
  SetEnv("SANDSTREAM_API_KEY", "secret");
  SetEnv("SANDSTREAM_DATA_DIR", "/data");
  SetEnv("SANDSTREAM_MAX_BODY_BYTES", "2048");
  SetEnv("SANDSTREAM_EXEC_DEFAULT_TIMEOUT_SECONDS", "1.5");
  SetEnv("SANDSTREAM_RUNTIME", "directory");
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->listen, "0.0.0.0:9000");
  EXPECT_EQ(r->api_key, "secret");
  EXPECT_EQ(r->data_dir, "/data");
  EXPECT_EQ(r->templates_dir, "/data/templates");
  EXPECT_EQ(r->max_body_bytes, 2048);
  EXPECT_EQ(r->exec_default_timeout_seconds, 1.5);
  EXPECT_EQ(r->runtime, "directory");
  EXPECT_EQ(r->keepalive_seconds, 15);  // untouched
}

TEST_F(ConfigTest, FlagsOverrideEnvironment) {
  SetEnv("SANDSTREAM_LISTEN", "0.0.0.0:9000");
  SetEnv("SANDSTREAM_KEEPALIVE_SECONDS", "30");
  auto r = Load({"--listen", "127.0.0.1:0", "--data-dir", "/tmp/dd"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->listen, "127.0.0.1:0");
  EXPECT_EQ(r->data_dir, "/tmp/dd");
  EXPECT_EQ(r->keepalive_seconds, 30);
}

TEST_F(ConfigTest, FlagsTakeValuesWithEqualsOrAsTheNextArgument) {
  auto r = Load({"--max-body-bytes=4096", "--max_stdin_bytes", "8192", "--log-level=debug",
                 "--api-key", "k=v", "--templates-dir=/t=x"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->max_body_bytes, 4096);
  EXPECT_EQ(r->max_stdin_bytes, 8192);
  EXPECT_EQ(r->log_level, "debug");
  EXPECT_EQ(r->api_key, "k=v");
  EXPECT_EQ(r->templates_dir, "/t=x");
}

TEST_F(ConfigTest, TheLastFlagWins) {
  auto r = Load({"--keepalive-seconds=5", "--keepalive-seconds", "7"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->keepalive_seconds, 7);
}

TEST_F(ConfigTest, FileThenEnvironmentThenFlags) {
  const std::string path = WriteFile(
      R"({"listen": "127.0.0.1:7000", "keepalive_seconds": 20, "runtime": "directory",
          "max_timeout_seconds": 3600.5, "exec_default_timeout_seconds": 30,
          "max_body_bytes": "65536", "api_key": "from-file"})");
  SetEnv("SANDSTREAM_KEEPALIVE_SECONDS", "25");
  auto r = Load({"--config", path, "--runtime", "namespace"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->listen, "127.0.0.1:7000");
  EXPECT_EQ(r->keepalive_seconds, 25);
  EXPECT_EQ(r->runtime, "namespace");
  EXPECT_EQ(r->max_timeout_seconds, 3600.5);
  EXPECT_EQ(r->exec_default_timeout_seconds, 30);
  EXPECT_EQ(r->max_body_bytes, 65536);
  EXPECT_EQ(r->api_key, "from-file");
}

TEST_F(ConfigTest, ConfigFileFromEnvironmentOrFlag) {
  const std::string env_file = WriteFile(R"({"max_sandboxes": 3})");
  const std::string flag_file = WriteFile(R"({"max_sandboxes": 4})");
  SetEnv("SANDSTREAM_CONFIG", env_file);
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->max_sandboxes, 3);
  r = Load({"--config=" + flag_file});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->max_sandboxes, 4);
  r = Load({"--config", flag_file});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->max_sandboxes, 4);
}

TEST_F(ConfigTest, ConfigFileProblems) {
  std::string m = Problems({"--config", "/nonexistent/sandstream.json"});
  EXPECT_NE(m.find("config file: "), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/sandstream.json"), std::string::npos) << m;

  m = Problems({"--config", WriteFile("{not json")});
  EXPECT_NE(m.find("not a JSON object"), std::string::npos) << m;
  m = Problems({"--config", WriteFile("[1, 2]")});
  EXPECT_NE(m.find("not a JSON object"), std::string::npos) << m;

  m = Problems({"--config", WriteFile(R"({"nope": 1, "max_pids": "many", "max_sandboxes": true,
                                          "keepalive_seconds": 1.5})")});
  EXPECT_NE(m.find("unknown setting 'nope'"), std::string::npos) << m;
  EXPECT_NE(m.find("max_pids must be a number, got 'many'"), std::string::npos) << m;
  EXPECT_NE(m.find("max_sandboxes must be a number"), std::string::npos) << m;
  EXPECT_NE(m.find("keepalive_seconds must be a number"), std::string::npos) << m;
  EXPECT_EQ(CountProblems(m), 4u) << m;
}

TEST_F(ConfigTest, UnknownFlagsAndStrayArguments) {
  std::string m = Problems({"--no-such-flag", "1"});
  EXPECT_NE(m.find("unknown flag '--no-such-flag'"), std::string::npos) << m;
  EXPECT_NE(m.find("unexpected argument '1'"), std::string::npos) << m;

  m = Problems({"--listen"});
  EXPECT_NE(m.find("flag --listen needs a value"), std::string::npos) << m;
  EXPECT_EQ(CountProblems(m), 1u) << m;

  m = Problems({"-v"});
  EXPECT_NE(m.find("unexpected argument '-v'"), std::string::npos) << m;
}

TEST_F(ConfigTest, ConfigFlagWithoutAValueIsAProblem) {
  const std::string m = Problems({"--config"});
  EXPECT_NE(m.find("--config"), std::string::npos) << m;
}

TEST_F(ConfigTest, EveryProblemIsReportedAtOnce) {
  SetEnv("SANDSTREAM_KEEPALIVE_SECONDS", "soon");
  const std::string m = Problems({"--max-body-bytes=abc", "--bogus=1", "--runtime", "docker",
                                  "--log-level", "loud", "--max-pids=0", "--listen=nocolon"});
  EXPECT_NE(m.find("SANDSTREAM_KEEPALIVE_SECONDS: keepalive_seconds must be a number, got 'soon'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("max_body_bytes must be a number, got 'abc'"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown flag '--bogus=1'"), std::string::npos) << m;
  EXPECT_NE(m.find("runtime must be \"namespace\" or \"directory\""), std::string::npos) << m;
  EXPECT_NE(m.find("log_level must be debug, info, warn or error"), std::string::npos) << m;
  EXPECT_NE(m.find("max_pids must be greater than 0"), std::string::npos) << m;
  // default_pids (256) now exceeds max_pids (0) as well.
  EXPECT_NE(m.find("default_pids must not exceed max_pids"), std::string::npos) << m;
  EXPECT_NE(m.find("listen must be host:port"), std::string::npos) << m;
  EXPECT_EQ(CountProblems(m), 8u) << m;
}

TEST_F(ConfigTest, IntegersMustBeWholePositiveNumbers) {
  for (const char* bad : {"", "12abc", "1.5", "0x10x", "99999999999999999999", "one"}) {
    const std::string m = Problems({"--max-sandboxes", bad});
    EXPECT_NE(m.find("max_sandboxes must be a number, got '" + std::string(bad) + "'"),
              std::string::npos)
        << m;
  }
  EXPECT_NE(Problems({"--max-sandboxes=-1"}).find("max_sandboxes must be greater than 0"),
            std::string::npos);
  EXPECT_NE(Problems({"--keepalive-seconds=0"}).find("keepalive_seconds must be greater than 0"),
            std::string::npos);
  // A TTL of 0 means "none" and is the only integer allowed to be 0.
  auto r = Load({"--sandbox-default-ttl-seconds=0"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NE(Problems({"--sandbox-default-ttl-seconds=-5"})
                .find("sandbox_default_ttl_seconds must be greater than 0"),
            std::string::npos);
  // Each sandbox takes a 65536-id range of its own.
  // (And with egress a /31 each: more than the default pool holds.)
  r = Load({"--max-sandboxes=65535", "--egress-pool=10.0.0.0/15"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->max_sandboxes, 65535);
  EXPECT_NE(
      Problems({"--max-sandboxes=9223372036854775807"}).find("max_sandboxes must be at most 65535"),
      std::string::npos);
}

TEST_F(ConfigTest, Timeouts) {
  auto r = Load({"--exec-default-timeout-seconds=0", "--max-timeout-seconds=0.25"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->exec_default_timeout_seconds, 0);
  EXPECT_EQ(r->max_timeout_seconds, 0.25);
  EXPECT_NE(Problems({"--exec-default-timeout-seconds=-1"})
                .find("exec_default_timeout_seconds must not be negative"),
            std::string::npos);
  EXPECT_NE(
      Problems({"--max-timeout-seconds=0"}).find("max_timeout_seconds must be greater than 0"),
      std::string::npos);
  EXPECT_NE(Problems({"--max-timeout-seconds=5s"}).find("max_timeout_seconds must be a number"),
            std::string::npos);
}

TEST_F(ConfigTest, DurationsAreBoundedSoDeadlinesCannotOverflow) {
  auto r = Load({"--write-timeout-seconds=0.5", "--sandbox-default-ttl-seconds=315360000"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->write_timeout_seconds, 0.5);
  const std::string m = Problems({"--write-timeout-seconds=0", "--max-timeout-seconds=1e10",
                                  "--sandbox-default-ttl-seconds=10000000000"});
  EXPECT_NE(m.find("write_timeout_seconds must be greater than 0 and at most 86400"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("max_timeout_seconds must be at most 315360000"), std::string::npos) << m;
  EXPECT_NE(m.find("sandbox_default_ttl_seconds must be at most 315360000"), std::string::npos)
      << m;
  EXPECT_EQ(CountProblems(m), 3u) << m;
}

TEST_F(ConfigTest, ConnectionLimitLeavesRoomForSandboxes) {
  Config c;
  EXPECT_EQ(c.max_connections, 12000);
  // Plenty of descriptors: the configured limit.
  EXPECT_EQ(ConnectionLimit(c, 1u << 20), 12000);
  // 20000 descriptors, 1000 sandboxes at 10 each and the daemon's own 512.
  EXPECT_EQ(ConnectionLimit(c, 20000), 20000 - 10000 - 512);
  // Too few for max_sandboxes: still a quarter of them.
  EXPECT_EQ(ConnectionLimit(c, 1024), 256);
  c.max_sandboxes = INT64_MAX;
  c.max_connections = INT64_MAX;
  EXPECT_EQ(ConnectionLimit(c, 1u << 20), (1 << 20) / 4);
  c.max_sandboxes = 1000;
  EXPECT_EQ(ConnectionLimit(c, UINT64_MAX), (int64_t{1} << 32) - 10000 - 512);
}

TEST_F(ConfigTest, NotANumberIsNotATimeout) {
  for (const char* flag : {"--max-timeout-seconds=nan", "--exec-default-timeout-seconds=nan"}) {
    auto r = Load({flag});
    EXPECT_FALSE(r.ok()) << flag << " was accepted";
  }
}

TEST_F(ConfigTest, DefaultsMustNotExceedTheirMaximums) {
  const std::string m =
      Problems({"--default-memory-mb=9000", "--default-cpu-percent=900", "--default-disk-mb=70000",
                "--default-open-files=20000", "--log-window-bytes=300000000"});
  EXPECT_NE(m.find("default_memory_mb must not exceed max_memory_mb"), std::string::npos) << m;
  EXPECT_NE(m.find("default_cpu_percent must not exceed max_cpu_percent"), std::string::npos) << m;
  EXPECT_NE(m.find("default_disk_mb must not exceed max_disk_mb"), std::string::npos) << m;
  EXPECT_NE(m.find("default_open_files must not exceed max_open_files"), std::string::npos) << m;
  EXPECT_NE(m.find("log_window_bytes must not exceed log_window_max_bytes"), std::string::npos)
      << m;
  EXPECT_NE(m.find("default_disk_mb must leave a quarter of default_memory_mb"), std::string::npos)
      << m;
  EXPECT_EQ(CountProblems(m), 6u) << m;
  // Equal is fine, and raising the maximum with it is too.
  auto r = Load({"--default-memory-mb=9000", "--max-memory-mb=9000"});
  ASSERT_TRUE(r.ok()) << r.error().message;
}

TEST_F(ConfigTest, PrintConfigHelpAndVersionAreFlags) {
  auto r = Load({"--print-config"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(print_config_);
  EXPECT_FALSE(help_);
  r = Load({"--help"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(help_);
  EXPECT_FALSE(print_config_);
  r = Load({"-h"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(help_);
  r = Load({"--version"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(version_);
  EXPECT_FALSE(help_);
  EXPECT_FALSE(print_config_);
}

TEST_F(ConfigTest, PreviewDomainIsALowercaseDnsName) {
  auto r = Load({"--preview-domain", "preview.example.com"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->preview_domain, "preview.example.com");
  for (const char* bad : {"", "Example.com", ".example.com", "example.com.", "a b", "x:80"}) {
    auto refused = Load({"--preview-domain", bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("preview_domain must be a lowercase DNS name"),
              std::string::npos)
        << refused.error().message;
  }
}

TEST_F(ConfigTest, CgroupParentIsEmptyOrAnAbsoluteCgroupPath) {
  for (const char* good : {"/sandstream", "/kube.slice/sandstream-nodes", "/a_b/c-1.2"}) {
    auto r = Load({"--cgroup-parent", good});
    ASSERT_TRUE(r.ok()) << good << ": " << r.error().message;
    EXPECT_EQ(r->cgroup_parent, good);
  }
  for (const char* bad : {"sandstream", "/", "/a/", "//a", "/a/../b", "/.", "/a b", "/a:b"}) {
    auto refused = Load({"--cgroup-parent", bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("cgroup_parent must be an absolute cgroup path"),
              std::string::npos)
        << refused.error().message;
  }
}

TEST_F(ConfigTest, PublicUrlIsASchemeAndAHost) {
  for (const char* good : {"https://sandstream.example.com", "http://10.0.0.2:8080"}) {
    auto r = Load({"--public-url", good});
    ASSERT_TRUE(r.ok()) << good << ": " << r.error().message;
    EXPECT_EQ(r->public_url, good);
  }
  for (const char* bad : {"sandstream.example.com", "ftp://x", "https://", "https://x/path",
                          "https://user@x", "https://x?y"}) {
    auto refused = Load({"--public-url", bad});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("public_url must be"), std::string::npos)
        << refused.error().message;
  }
}

TEST_F(ConfigTest, EgressPoolResolversAndMarks) {
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(EgressEnabled(*r));
  EXPECT_EQ(EgressMarkMask(*r), 0x0f000000u);
  for (const char* off : {"", "none"}) {
    auto none = Load({"--egress-pool", off});
    ASSERT_TRUE(none.ok()) << off;
    EXPECT_FALSE(EgressEnabled(*none)) << off;
  }
  auto dns = Load({"--egress-dns", "198.18.0.53, 1.1.1.1"});
  ASSERT_TRUE(dns.ok()) << dns.error().message;
  EXPECT_EQ(EgressResolvers(*dns), (std::vector<uint32_t>{0xc6120035u, 0x01010101u}));
  EXPECT_NE(Problems({"--egress-dns", "dns.example"}).find("egress_dns must be IPv4"),
            std::string::npos);
  EXPECT_NE(Problems({"--egress-pool", "10.200.0.1/16"}).find("egress_pool: "), std::string::npos);
  // A /31 per sandbox: 1,000 sandboxes need a /21 at least.
  EXPECT_NE(Problems({"--egress-pool", "10.200.0.0/22"}).find("fewer than max_sandboxes"),
            std::string::npos);
  EXPECT_TRUE(Load({"--egress-pool", "10.200.0.0/21"}).ok());
  EXPECT_TRUE(Load({"--egress-pool", "10.200.0.0/24", "--max-sandboxes", "128"}).ok());
  for (const char* bad : {"0x3", "f0000000", "0x", "0x1ffffffff", "0xzz"}) {
    EXPECT_NE(Problems({"--egress-mark-mask", bad}).find("egress_mark_mask must be"),
              std::string::npos)
        << bad;
  }
  auto mask = Load({"--egress-mark-mask", "0x00700000"});
  ASSERT_TRUE(mask.ok());
  EXPECT_EQ(EgressMarkMask(*mask), 0x00700000u);
}

TEST_F(ConfigTest, RegistryListsAreHostsWithPorts) {
  auto r = Load({"--registry-plain-http", " 127.0.0.1:5000 , registry.local,",
                 "--registry-private-hosts", "[::1]:5000"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(RegistryHosts(r->registry_plain_http),
            (std::vector<std::string>{"127.0.0.1:5000", "registry.local"}));
  EXPECT_EQ(RegistryHosts(r->registry_allow), std::vector<std::string>{});
  const std::string message = Problems({"--registry-allow", "https://registry.local/x"});
  EXPECT_NE(message.find("registry_allow: 'https://registry.local/x' is not a host[:port]"),
            std::string::npos)
      << message;
}

TEST_F(ConfigTest, PrintedConfigHidesTheApiKey) {
  auto r = Load({"--api-key", "hunter2-very-secret", "--listen", "127.0.0.1:1234"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string text = ConfigJson(*r);
  EXPECT_EQ(text.find("hunter2"), std::string::npos) << text;
  const json::object o = json::parse(text).as_object();
  EXPECT_EQ(o.at("api_key"), json::value("(set)"));
  EXPECT_EQ(o.at("listen"), json::value("127.0.0.1:1234"));
  EXPECT_EQ(o.at("max_body_bytes"), json::value(1 << 20));
  EXPECT_EQ(o.at("data_dir"), json::value(r->data_dir));
  EXPECT_EQ(o.at("preview_domain"), json::value("localhost"));
  EXPECT_EQ(o.size(), 71u);

  r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(json::parse(ConfigJson(*r)).as_object().at("api_key"), json::value(""));
}

TEST_F(ConfigTest, PrintedConfigLoadsBackAsTheSameConfig) {
  auto r = Load({"--listen=127.0.0.1:0", "--data-dir=/d", "--max-timeout-seconds=90.5",
                 "--exec-default-timeout-seconds=600", "--max-pids=77", "--default-pids=7",
                 "--log-level=warn", "--sandbox-default-ttl-seconds=0"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string printed = ConfigJson(*r);
  auto again = Load({"--config", WriteFile(printed)});
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(ConfigJson(*again), printed);
  EXPECT_EQ(again->max_timeout_seconds, 90.5);
  EXPECT_EQ(again->exec_default_timeout_seconds, 600);
  EXPECT_EQ(again->max_pids, 77);
}

TEST_F(ConfigTest, HelpListsEverySettingAsAFlagWithItsDefault) {
  const std::string help = ConfigHelp();
  EXPECT_NE(help.find("--listen (default 127.0.0.1:8080)"), std::string::npos) << help;
  EXPECT_NE(help.find("--max-body-bytes (default 1048576)"), std::string::npos) << help;
  EXPECT_NE(help.find("--data-dir (computed)"), std::string::npos) << help;
  EXPECT_NE(help.find("--api-key (computed)"), std::string::npos) << help;
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const json::value printed = json::parse(ConfigJson(*r));
  for (const auto& [key, value] : printed.as_object()) {
    std::string flag = "--" + std::string(key);
    for (char& ch : flag) {
      if (ch == '_') ch = '-';
    }
    EXPECT_NE(help.find(flag + " ("), std::string::npos) << flag;
  }
}

TEST_F(ConfigTest, ReferenceDescribesEverySettingOnOneRow) {
  const std::string reference = ConfigReference();
  EXPECT_TRUE(reference.starts_with("# Configuration reference\n")) << reference;
  EXPECT_NE(reference.find("| `listen` | `127.0.0.1:8080` | address:port to serve HTTP on"),
            std::string::npos)
      << reference;
  EXPECT_NE(reference.find("| `api_key` | generated into `<data_dir>/api_key` |"),
            std::string::npos)
      << reference;
  EXPECT_NE(reference.find("| `node_id` | (none) |"), std::string::npos) << reference;
  EXPECT_NE(reference.find("| `teardown_on_exit` | `false` |"), std::string::npos) << reference;
  auto r = Load({});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const json::value printed = json::parse(ConfigJson(*r));
  size_t rows = 0;
  for (const auto& [key, value] : printed.as_object()) {
    const std::string row = "| `" + std::string(key) + "` | ";
    const size_t at = reference.find(row);
    ASSERT_NE(at, std::string::npos) << key;
    const std::string line = reference.substr(at, reference.find('\n', at) - at);
    // Three cells, each with text: a '|' inside a description would add one.
    EXPECT_EQ(std::count(line.begin(), line.end(), '|'), 4) << line;
    EXPECT_EQ(line.find("|  |"), std::string::npos) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 71u);
}

TEST_F(ConfigTest, TemplateAliasesAndTheMetricsIntervalAreChecked) {
  auto defaults = Load({});
  ASSERT_TRUE(defaults.ok());
  auto aliases = TemplateAliases(*defaults);
  ASSERT_TRUE(aliases.has_value());
  EXPECT_EQ(aliases->at("code-interpreter-v1"), "code-interpreter");
  auto mine = Load({"--e2b-template-aliases", " a=b , c=base"});
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(*TemplateAliases(*mine),
            (std::map<std::string, std::string>{{"a", "b"}, {"c", "base"}}));
  ASSERT_TRUE(Load({"--e2b-template-aliases", ""}).ok());
  for (const char* bad : {"a", "=b", "a=", "a=b,c"}) {
    EXPECT_NE(Problems({"--e2b-template-aliases", bad}).find("e2b_template_aliases must be"),
              std::string::npos)
        << bad;
  }
  EXPECT_DOUBLE_EQ(defaults->metrics_interval_seconds, 5);
  EXPECT_FALSE(defaults->metrics_per_sandbox);
  EXPECT_TRUE(Load({"--metrics-interval-seconds", "0.5"}).ok());
  for (const char* bad : {"0", "0.01", "-1", "3601"}) {
    EXPECT_NE(Problems({"--metrics-interval-seconds", bad}).find("metrics_interval_seconds must"),
              std::string::npos)
        << bad;
  }
}

}  // namespace
}  // namespace sandstream
