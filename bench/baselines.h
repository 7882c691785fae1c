// What each figure is compared with, measured in the same run: the same work done without the
// daemon (a plain fork+exec, a raw pipe, a bare C streaming chain, the sandbox runtime called
// in-process). Failures throw BenchError.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sandstream::sandbox {
class Runtime;
class Sandbox;
}  // namespace sandstream::sandbox

namespace sandstream::bench {

// fork + exec of `sh -c cmd` on the host, stdout read from a pipe to EOF, wait. Returns the
// output; *ms is the whole cost.
std::string RunShell(const std::string& cmd, double* ms);

// Runs `bash -c script` on the host with stdout on a pipe and, for every stamp line it reads,
// records (now - stamp) in microseconds.
std::vector<double> PipeStampLatencies(const std::string& script);

// sh -c cmd -> pipe -> epoll -> SSE framing (a copy) -> loopback TCP -> a reader thread that
// discards. Returns process-output bytes per second; throws unless `expected_bytes` arrived.
double BareChainThroughput(const std::string& cmd, uint64_t expected_bytes);

// The host pid of the process whose argv holds `word` (a marker passed to a sandboxed server),
// found in /proc; throws if there is none.
pid_t FindProcessWithArg(const std::string& word);

// `n` TCP sockets, not connected, in the network namespace of process `pid`, made the way the
// daemon makes its sockets to exposed ports (setns, socket), by a thread of their own so that
// the bench's threads stay in the host's namespace. Needs CAP_SYS_ADMIN.
std::vector<int> SocketsInNetns(pid_t pid, size_t n);

// One GET through a bare relay in the bench: a thread accepts the client on a loopback port,
// connects `upstream_fd` (a socket of the sandbox's namespace, which it closes) to `port`,
// passes the request on and copies the answer back through a 64 KiB buffer, a read then a
// write, as the daemon's relay does, with blocking calls and nothing else. Returns the seconds
// from the client's connect() to the end of the body; throws unless `expected` bytes arrived.
// Figure 10b's baseline: `bytes` of random data in a tmpfs file (a memfd), copied with 1 MiB
// reads and writes to a new file in `dir`, then fsync'd and removed; ms of the copy and sync.
double CopyAndSync(size_t bytes, const std::string& dir);

double BareRelayGet(int upstream_fd, uint16_t port, std::string_view request, uint64_t expected);

// The sandbox runtime the daemon uses ("namespace" or "directory"), driven in-process with no
// HTTP, store or supervision around it.
class RawRuntime {
 public:
  RawRuntime(const std::string& kind, const std::string& state_dir, uint32_t max_sandboxes);
  ~RawRuntime();
  RawRuntime(const RawRuntime&) = delete;
  RawRuntime& operator=(const RawRuntime&) = delete;

  // Create + Spawn(sh -c 'echo hi') + read its output + wait (*run_ms), then Destroy
  // (*destroy_ms).
  void CreateEchoDestroy(double* run_ms, double* destroy_ms);
  // Creates `n` sandboxes and keeps them idle.
  void CreateIdle(int n);
  void DestroyIdle();

 private:
  std::unique_ptr<sandbox::Sandbox> Create();

  std::unique_ptr<sandbox::Runtime> runtime_;
  std::vector<std::unique_ptr<sandbox::Sandbox>> idle_;
  std::vector<std::string> cgroup_parents_;
  uint64_t next_ = 0;
};

}  // namespace sandstream::bench
