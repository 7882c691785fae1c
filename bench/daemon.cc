// Starting and stopping sandstreamd for sandstream-bench, and reading memory figures.
#include "daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "client.h"

extern char** environ;

namespace sandstream::bench {

namespace fs = std::filesystem;

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool WriteText(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

bool HasToken(const std::string& list, const std::string& token) {
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == token) return true;
  }
  return false;
}

// Removes a cgroup directory and its descendants (cgroup dirs go with rmdir only); an exiting
// process may still hold one for a moment, so retry briefly.
void RemoveCgroupTree(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) RemoveCgroupTree(entry.path().string());
  }
  for (int attempt = 0; attempt < 100 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

BenchCgroups::BenchCgroups() {
  if (::geteuid() != 0) return;
  std::map<std::string, std::string> mounts;  // v1 controller -> mount point
  std::istringstream mountinfo(ReadText("/proc/self/mountinfo"));
  for (std::string line; std::getline(mountinfo, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, options;
    left >> id >> parent >> dev >> root >> point;
    right >> fstype >> source >> options;
    if (fstype != "cgroup" || root != "/") continue;
    for (const char* ctrl : {"memory", "pids", "cpu"}) {
      if (HasToken(options, ctrl)) mounts[ctrl] = point;
    }
  }
  std::map<std::string, std::string> own;  // v1 controller -> own path
  std::istringstream self(ReadText("/proc/self/cgroup"));
  for (std::string line; std::getline(self, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    for (const char* ctrl : {"memory", "pids", "cpu"}) {
      if (HasToken(line.substr(a + 1, b - a - 1), ctrl)) own[ctrl] = line.substr(b + 1);
    }
  }
  const std::string name = "sandstream-bench-" + std::to_string(::getpid());
  for (const char* ctrl : {"memory", "pids", "cpu"}) {
    if (!mounts.count(ctrl) || !own.count(ctrl)) break;
    const std::string base = mounts[ctrl] + (own[ctrl] == "/" ? "" : own[ctrl]);
    const std::string root = base + "/" + name;
    if (std::find(roots_.begin(), roots_.end(), root) != roots_.end()) continue;
    if (::mkdir(root.c_str(), 0755) != 0) break;
    roots_.push_back(root);
    if (::mkdir((root + "/bench").c_str(), 0755) != 0 ||
        ::mkdir((root + "/daemon").c_str(), 0755) != 0) {
      break;
    }
    daemon_procs_.push_back(root + "/daemon/cgroup.procs");
    own_procs_.push_back(base + "/cgroup.procs");
    if (std::string(ctrl) == "memory") memory_root_ = root;
    if (std::string(ctrl) == "cpu") {
      // A group weighs as much as one task of its parent: give it the weight of the three
      // tasks it runs at once (bench, daemon, sandboxed process), as they would have ungrouped.
      WriteText(root + "/cpu.shares", "3072");
      WriteText(root + "/daemon/cpu.shares", "2048");
    }
  }
  if (daemon_procs_.size() != 3) {
    for (const auto& root : roots_) RemoveCgroupTree(root);
    roots_.clear();
    daemon_procs_.clear();
    own_procs_.clear();
    memory_root_.clear();
  }
}

BenchCgroups::~BenchCgroups() {
  if (entered_) {
    for (const auto& procs : own_procs_) WriteText(procs, std::to_string(::getpid()));
  }
  for (const auto& root : roots_) RemoveCgroupTree(root);
}

void BenchCgroups::EnterBench() {
  for (const auto& root : roots_) {
    if (WriteText(root + "/bench/cgroup.procs", std::to_string(::getpid()))) entered_ = true;
  }
}

void BenchCgroups::EnterDaemonInChild() const {
  for (const auto& procs : daemon_procs_) {
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)!::write(fd, "0", 1);
    ::close(fd);
  }
}

int64_t BenchCgroups::MemoryUsage(const char* leaf) const {
  if (memory_root_.empty()) return -1;
  const std::string text = ReadText(memory_root_ + "/" + leaf + "/memory.usage_in_bytes");
  return text.empty() ? -1 : std::strtoll(text.c_str(), nullptr, 10);
}

namespace {

int OpenLog(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw BenchError("open " + path + ": " + std::strerror(errno));
  return fd;
}

// Forks and execs `args` with `env`, its stdout and stderr on those descriptors, in the
// daemon's cgroup leaf when `cgroups` is given; the child ends with the bench.
pid_t Start(std::vector<std::string>& args, std::vector<std::string>& env, int out, int err,
            const BenchCgroups* cgroups) {
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw BenchError("fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    if (cgroups) cgroups->EnterDaemonInChild();
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

Daemon::Daemon(const DaemonOptions& options, const BenchCgroups& cgroups) {
  if (options.dir.empty()) {
    char dir_template[] = "/tmp/sandstream-bench.XXXXXX";
    if (::mkdtemp(dir_template) == nullptr)
      throw BenchError("mkdtemp: " + std::string(std::strerror(errno)));
    data_dir_ = dir_template;
  } else {
    data_dir_ = options.dir;
    owns_dir_ = false;
  }
  log_path_ = data_dir_ + "/sandstreamd.log";

  std::vector<std::string> args = {options.binary,      "--listen",  "127.0.0.1:0",  "--data-dir",
                                   data_dir_ + "/data", "--runtime", options.runtime};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!std::string_view(*e).starts_with("SANDSTREAM_API_KEY=")) env.emplace_back(*e);
  }
  env.push_back("SANDSTREAM_API_KEY=" + options.api_key);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw BenchError("pipe2: " + std::string(std::strerror(errno)));
  const int log_fd = OpenLog(log_path_);
  pid_ = Start(args, env, out[1], log_fd, &cgroups);
  ::close(out[1]);
  ::close(log_fd);
  stdout_fd_ = out[0];

  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    const size_t at = seen.find("listening on http://");
    const size_t eol = at == std::string::npos ? at : seen.find('\n', at);
    if (eol != std::string::npos) {
      const size_t colon = seen.rfind(':', eol);
      port_ = static_cast<uint16_t>(std::atoi(seen.c_str() + colon + 1));
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{stdout_fd_, POLLIN, 0};
    char buf[512];
    ssize_t n = -1;
    if (left.count() > 0 && ::poll(&p, 1, static_cast<int>(left.count())) > 0) {
      n = ::read(stdout_fd_, buf, sizeof buf);
    }
    if (n <= 0) {
      throw BenchError("sandstreamd did not report listening (" + options.binary + "); see " +
                       log_path_ + ": " + ReadText(log_path_).substr(0, 600));
    }
    seen.append(buf, static_cast<size_t>(n));
  }
  if (port_ == 0) throw BenchError("cannot parse the listening line: " + seen);
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    bool reaped = false;
    for (int i = 0; i < 3000 && !reaped; ++i) {  // 30 s
      reaped = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!reaped) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  if (owns_dir_ && !data_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(data_dir_, ec);
  }
}

void Daemon::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

namespace {

// A loopback port nobody listens on now (etcd binds it a moment later).
uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw BenchError("no free loopback port: " + std::string(std::strerror(errno)));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

std::string EtcdServer::Binary() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return {};
}

EtcdServer::EtcdServer() {
  const std::string binary = Binary();
  if (binary.empty()) throw BenchError("etcd is not installed (Debian's etcd-server)");
  char dir_template[] = "/tmp/sandstream-bench-etcd.XXXXXX";
  if (::mkdtemp(dir_template) == nullptr)
    throw BenchError("mkdtemp: " + std::string(std::strerror(errno)));
  dir_ = dir_template;
  const uint16_t client = FreePort(), peer = FreePort();
  url_ = "http://127.0.0.1:" + std::to_string(client);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
  std::vector<std::string> args = {binary,
                                   "--name=bench",
                                   "--data-dir=" + dir_ + "/data",
                                   "--listen-client-urls=" + url_,
                                   "--advertise-client-urls=" + url_,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=bench=" + peer_url};
  const std::string log = dir_ + "/etcd.log";
  const int log_fd = OpenLog(log);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  pid_ = Start(args, env, log_fd, log_fd, nullptr);
  ::close(log_fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    try {
      HttpClient health(client, "");
      if (health.Request("GET", "/health").status == 200) return;
    } catch (const BenchError&) {
      // not listening yet
    }
    if (std::chrono::steady_clock::now() > deadline) {
      const std::string said = ReadText(log).substr(0, 600);
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      std::error_code ec;
      fs::remove_all(dir_, ec);
      throw BenchError("etcd did not start: " + said);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

EtcdServer::~EtcdServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

int64_t Daemon::Rss() const { return ProcessRss(pid_); }

bool Daemon::Alive() {
  int status = 0;
  if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
  return pid_ > 0;
}

std::string Daemon::LogTail(size_t bytes) const {
  const std::string text = ReadText(log_path_);
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

int64_t MemInfo(const char* field) {
  std::istringstream in(ReadText("/proc/meminfo"));
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key)) return std::strtoll(line.c_str() + key.size(), nullptr, 10) * 1024;
  }
  return 0;
}

double ProcessCpuSeconds(pid_t pid) {
  const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int64_t ProcessRss(pid_t pid) {
  std::istringstream in(ReadText("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::strtoll(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

int ProcessFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

}  // namespace sandstream::bench
