// What each figure is compared with, measured in the same run: the same work done without the
// daemon (a plain fork+exec, a raw pipe, a bare C streaming chain, the sandbox runtime called
// in-process). Failures throw BenchError.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
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
