// sandstream-nsrun: runs one command in a fresh sandbox of the namespace runtime, for trying
// the isolation by hand. Prints the command's output, then its exit and the setup costs.
//   sandstream-nsrun [--state DIR] [--template DIR] [--memory MB] [--pids N] [--disk MB]
//                    [--root] [--nested-userns] [--repeat N] [--creates N] -- command [args...]
// --creates N first creates and destroys N sandboxes and prints the median create cost.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/namespace_runtime.h"

namespace {

using sandstream::sandbox::NamespaceRuntime;
using sandstream::sandbox::NamespaceRuntimeOptions;
using sandstream::sandbox::ProcessSpec;
using sandstream::sandbox::SandboxSpec;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Copies the process's output to ours until both pipes close, then waits for it.
int Pump(sandstream::sandbox::SpawnedProcess& p) {
  pollfd fds[2] = {{p.stdout_fd.get(), POLLIN, 0}, {p.stderr_fd.get(), POLLIN, 0}};
  int open = 2;
  char buf[65536];
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (void)!::write(i + 1, buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EAGAIN) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  NamespaceRuntimeOptions options;
  options.state_dir = "/tmp/sandstream-nsrun";
  options.cgroup_parent = "sandstream-nsrun";
  SandboxSpec spec;
  spec.id = "sb_nsrun" + std::to_string(::getpid());
  spec.template_name = "base";
  ProcessSpec process;
  int repeat = 1;
  int creates = 0;
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--state") options.state_dir = value, ++i;
    else if (arg == "--template") spec.layers.emplace_back(value), ++i;
    else if (arg == "--memory") spec.limits.memory_mb = std::atoll(value), ++i;
    else if (arg == "--pids") spec.limits.pids = std::atoll(value), ++i;
    else if (arg == "--disk") spec.limits.disk_mb = std::atoll(value), ++i;
    else if (arg == "--repeat") repeat = std::atoi(value), ++i;
    else if (arg == "--creates") creates = std::atoi(value), ++i;
    else if (arg == "--root") process.as_root = true;
    else if (arg == "--nested-userns") spec.allow_nested_userns = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  for (++i; i < argc; ++i) process.argv.push_back(argv[i]);
  if (process.argv.empty()) process.argv = {"sh", "-c", "id; hostname; ps -ef"};
  process.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "TERM=dumb"};
  process.open_stdin = false;

  NamespaceRuntime runtime(options);
  if (!runtime.ready()) {
    std::fprintf(stderr, "runtime: %s\n", runtime.ready().error().message.c_str());
    return 1;
  }
  if (creates > 0) {
    std::vector<double> create_ms, destroy_ms;
    for (int n = 0; n < creates; ++n) {
      SandboxSpec s = spec;
      s.id += "_" + std::to_string(n);
      const auto c0 = Clock::now();
      auto sb = RunBlocking(runtime.Create(s));
      const auto c1 = Clock::now();
      if (!sb) {
        std::fprintf(stderr, "create: %s\n", sb.error().message.c_str());
        return 1;
      }
      (void)RunBlocking((*sb)->Destroy());
      create_ms.push_back(Ms(c1 - c0));
      destroy_ms.push_back(Ms(Clock::now() - c1));
    }
    std::sort(create_ms.begin(), create_ms.end());
    std::sort(destroy_ms.begin(), destroy_ms.end());
    std::fprintf(stderr, "create p50 %.2f ms p90 %.2f ms; destroy p50 %.2f ms (%d sandboxes)\n",
                 create_ms[create_ms.size() / 2], create_ms[create_ms.size() * 9 / 10],
                 destroy_ms[destroy_ms.size() / 2], creates);
  }
  const auto t0 = Clock::now();
  auto sandbox = RunBlocking(runtime.Create(spec));
  const auto t1 = Clock::now();
  if (!sandbox) {
    std::fprintf(stderr, "create: %s\n", sandbox.error().message.c_str());
    return 1;
  }
  int code = 0;
  double spawn_ms = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto s0 = Clock::now();
    auto p = RunBlocking((*sandbox)->Spawn(process));
    spawn_ms += Ms(Clock::now() - s0);
    if (!p) {
      std::fprintf(stderr, "spawn: %s\n", p.error().message.c_str());
      return 1;
    }
    code = Pump(*p);
  }
  const auto t2 = Clock::now();
  const uint64_t oom_kills = (*sandbox)->OomKills();
  (void)RunBlocking((*sandbox)->Destroy());
  const auto t3 = Clock::now();
  for (const auto& parent : runtime.CgroupParents()) ::rmdir(parent.c_str());
  std::fprintf(stderr, "exit %d; create %.2f ms, spawn %.3f ms (mean of %d), destroy %.2f ms, oom kills %llu\n",
               code, Ms(t1 - t0), spawn_ms / repeat, repeat, Ms(t3 - t2),
               static_cast<unsigned long long>(oom_kills));
  return code;
}
