// What the coroutine tests share: running an awaitable on the test's io_context with a bound in
// real time (a hang fails the test instead of stalling the suite), and sandboxes of the real
// directory runtime in a temporary directory. No mocks, no sleeps beyond what a case measures.
#pragma once

#include <signal.h>
#include <stdlib.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "process/process.h"
#include "sandbox/directory_runtime.h"
#include "sandbox/op.h"

namespace sandstream::unit {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// How long any one wait of a test may take before it fails: far above what a case needs even
// on a loaded machine, far below what a hang would take.
inline constexpr std::chrono::milliseconds kLimit = 20s;

// Runs `io` until `done()` holds; false when `limit` passed first.
inline bool RunUntil(asio::io_context& io, const std::function<bool()>& done,
                     std::chrono::milliseconds limit = kLimit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_for(10ms);
  }
  return true;
}

// Runs `io` for `time` (for the other side's coroutines to make progress).
inline void RunFor(asio::io_context& io, std::chrono::milliseconds time) {
  const auto deadline = std::chrono::steady_clock::now() + time;
  while (std::chrono::steady_clock::now() < deadline) {
    if (io.stopped()) io.restart();
    io.run_one_until(deadline);
  }
}

namespace detail {

template <class T>
struct Outcome {
  bool done = false;
  std::exception_ptr error;
  std::optional<T> value;
};

// A Result<T> has no default value, which co_spawn's handler for an awaitable<T> would need:
// the value is stored from inside instead.
template <class T>
asio::awaitable<void> Keep(asio::awaitable<T> task, std::shared_ptr<Outcome<T>> outcome) {
  outcome->value.emplace(co_await std::move(task));
}

}  // namespace detail

// Runs `task` to its end on `io`; throws (failing the test) when it takes longer than `limit`.
template <class T>
T RunTask(asio::io_context& io, asio::awaitable<T> task,
          std::chrono::milliseconds limit = kLimit) {
  // Shared with the completion handler, which may run after a timed-out RunTask() returned.
  auto outcome = std::make_shared<detail::Outcome<T>>();
  asio::co_spawn(io, detail::Keep(std::move(task), outcome), [outcome](std::exception_ptr e) {
    outcome->done = true;
    outcome->error = e;
  });
  if (!RunUntil(io, [&] { return outcome->done; }, limit)) throw std::runtime_error("timed out");
  if (outcome->error) std::rethrow_exception(outcome->error);
  return std::move(*outcome->value);
}

inline void RunTask(asio::io_context& io, asio::awaitable<void> task,
                    std::chrono::milliseconds limit = kLimit) {
  auto outcome = std::make_shared<std::pair<bool, std::exception_ptr>>();
  asio::co_spawn(io, std::move(task), [outcome](std::exception_ptr e) {
    outcome->first = true;
    outcome->second = e;
  });
  if (!RunUntil(io, [&] { return outcome->first; }, limit)) throw std::runtime_error("timed out");
  if (outcome->second) std::rethrow_exception(outcome->second);
}

inline asio::awaitable<void> Sleep(std::chrono::steady_clock::duration time) {
  asio::steady_timer timer(co_await asio::this_coro::executor, time);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  (void)ec;
}

// A directory of its own under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/sandstream-unit.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A test's writes to a pipe or socket whose reader is gone must fail, not kill the test.
inline void IgnoreSigpipe() { ::signal(SIGPIPE, SIG_IGN); }

// `script` for /bin/sh, in the sandbox's /workspace.
inline CommandSpec Sh(std::string script, std::string id = "proc_test") {
  CommandSpec spec;
  spec.id = std::move(id);
  spec.sandbox_id = "sb_test";
  spec.cmd = script;
  spec.argv = {"/bin/sh", "-c", std::move(script)};
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"};
  spec.cwd = "/workspace";
  return spec;
}

// A process that was never started, with its `start` entry: a log the test writes itself.
inline std::shared_ptr<Process> BareProcess(asio::io_context& io, LogLimits limits = {}) {
  CommandSpec spec = Sh("true");
  spec.log_limits = limits;
  ProcessOptions options;
  options.persistent_log = false;
  auto p = std::make_shared<Process>(io.get_executor(), spec, options);
  p->log().Append(EntryKind::kStart, {});
  return p;
}

// The concatenated bytes of the retained entries of `kind`.
inline std::string Output(const OutputLog& log, EntryKind kind = EntryKind::kStdout) {
  std::string out;
  for (const LogEntry& e : log.entries()) {
    if (e.kind == kind) out += e.data;
  }
  return out;
}

// Whether any process of group `pgid` still runs (zombies, which whoever inherited them may
// not have reaped yet, do not count).
inline bool GroupAlive(pid_t pgid) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so from the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    pid_t pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp)) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') return true;
  }
  return false;
}

// One sandbox of the directory runtime (plain child processes in a private directory).
class DirectorySandbox {
 public:
  DirectorySandbox() : runtime_(dir_.path()) {
    IgnoreSigpipe();
    sandbox::SandboxSpec spec;
    spec.id = "sb_test";
    spec.template_name = "base";
    auto created = sandbox::RunBlocking(runtime_.Create(spec));
    if (!created) throw std::runtime_error("sandbox: " + created.error().message);
    sandbox_ = std::move(*created);
  }
  const std::shared_ptr<sandbox::Sandbox>& get() const { return sandbox_; }
  // Where the sandbox's /workspace is on the host.
  std::string workspace() const { return dir_.path() + "/sb_test/workspace"; }

 private:
  TempDir dir_;
  sandbox::DirectoryRuntime runtime_;
  std::shared_ptr<sandbox::Sandbox> sandbox_;
};

}  // namespace sandstream::unit
