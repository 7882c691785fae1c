// Runs the real sandstreamd for the benchmarks: a temporary data dir, port 0, a private cgroup
// (its memory, sandboxes included, read apart from the bench's; nothing it leaves in cgroupfs
// outlives the run), and an orderly stop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sandstream::bench {

// Private cgroup v1 directories under the caller's own memory, pids and cpu cgroups:
// <own>/sandstream-bench-<pid>/{bench,daemon}. Empty (and a no-op) where that is impossible
// (cgroup v2 only, or not root): the figures that need it then fall back to /proc/meminfo.
class BenchCgroups {
 public:
  BenchCgroups();
  ~BenchCgroups();
  BenchCgroups(const BenchCgroups&) = delete;
  BenchCgroups& operator=(const BenchCgroups&) = delete;

  bool available() const { return !roots_.empty(); }
  // Moves the calling process into the "bench" leaf (it returns to its old cgroup on exit).
  void EnterBench();
  // For a forked child before exec: joins the "daemon" leaf. Async-signal-safe.
  void EnterDaemonInChild() const;
  // memory.usage_in_bytes of a leaf ("bench" or "daemon") with its descendants; -1 if unknown.
  int64_t MemoryUsage(const char* leaf) const;

 private:
  std::vector<std::string> roots_;         // one per hierarchy: <mount><own>/sandstream-bench-<pid>
  std::vector<std::string> daemon_procs_;  // <root>/daemon/cgroup.procs
  std::vector<std::string> own_procs_;     // the original <mount><own>/cgroup.procs
  std::string memory_root_;
  bool entered_ = false;
};

struct DaemonOptions {
  std::string binary;
  std::string runtime;
  std::string api_key;
  std::vector<std::string> extra_args;  // more --flags
  // The directory of an earlier Daemon to start on (its data and log), which stays its
  // owner's; empty: a fresh temporary one, removed with this Daemon.
  std::string dir;
};

class Daemon {
 public:
  // Starts the daemon and waits for its "listening on" line; throws BenchError.
  Daemon(const DaemonOptions& options, const BenchCgroups& cgroups);
  // SIGTERM, then SIGKILL after a grace; removes the data dir it made.
  ~Daemon();
  // SIGKILL, as a crash: the sandboxes it leaves run on, the data dir stays.
  void Kill();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& log_path() const { return log_path_; }
  // The daemon's resident set (VmRSS) in bytes.
  int64_t Rss() const;
  // Whether the daemon process is still running (reaps it if not).
  bool Alive();
  // The last `bytes` of the daemon's stderr log.
  std::string LogTail(size_t bytes) const;

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  uint16_t port_ = 0;
  std::string data_dir_;
  std::string log_path_;
  bool owns_dir_ = true;
};

// One etcd member (Debian's etcd-server) on free loopback ports with a temporary data dir, for
// the figures of a cluster; stopped and removed with this object.
class EtcdServer {
 public:
  // Where etcd is installed; empty when it is not (those figures are skipped).
  static std::string Binary();
  // Starts it and waits until /health answers; throws BenchError.
  EtcdServer();
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // http://127.0.0.1:<client port>
  const std::string& url() const { return url_; }

 private:
  pid_t pid_ = -1;
  std::string dir_;
  std::string url_;
};

// Reads a field of /proc/meminfo ("MemAvailable", "Slab") in bytes.
int64_t MemInfo(const char* field);
// CPU time (user + system) a process has used so far, in seconds, without its children.
double ProcessCpuSeconds(pid_t pid);
// VmRSS of a process in bytes (0 if unknown).
int64_t ProcessRss(pid_t pid);
// How many descriptors a process has open (its /proc/<pid>/fd entries; -1 if unknown).
int ProcessFds(pid_t pid);

}  // namespace sandstream::bench
