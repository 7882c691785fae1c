// Figure 13: pausing and resuming a sandbox that holds a 100 MiB Python process, beside the
// kernel's own cost: the same freezer writes on a bare cgroup holding the same process; then
// pausing to disk (checkpoint) and restoring sandboxes that hold 10 and 100 MiB, beside writing
// (with fsync) and reading the same bytes to and from a file in the daemon's data directory.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "bench.h"

namespace sandstream::bench {
namespace {

// A Python process that holds 100 MiB it has written to (resident), then sleeps.
constexpr const char* kHolder =
    "import time\nb = bytearray(100 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    "print('held', flush=True)\ntime.sleep(600)\n";
constexpr int kCycles = 20;
// Where scripts/install-criu puts CRIU, the daemon's default `criu`.
constexpr const char* kCriu = "/var/cache/sandstream/criu-4.2.1/sbin/criu";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw BenchError("open " + path);
  const bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  ::close(fd);
  if (!ok) throw BenchError("write " + path);
}

// A scratch cgroup with the freezer (v1's hierarchy where the host has one, else v2's
// cgroup.freeze under the bench's own cgroup) and the holder process in it.
class BareFreezer {
 public:
  BareFreezer() {
    const std::string name = "sandstream-bench-freeze-" + std::to_string(::getpid());
    v1_ = std::filesystem::exists("/sys/fs/cgroup/freezer/freezer.state") ||
          std::filesystem::exists("/sys/fs/cgroup/freezer/cgroup.procs");
    if (v1_) {
      dir_ = "/sys/fs/cgroup/freezer/" + name;
    } else {
      const std::string own = ReadText("/proc/self/cgroup");
      const size_t at = own.find("0::");
      if (at == std::string::npos) throw BenchError("no cgroup freezer on this host");
      std::string path = own.substr(at + 3);
      path = path.substr(0, path.find('\n'));
      dir_ = "/sys/fs/cgroup" + path + "/" + name;
    }
    if (::mkdir(dir_.c_str(), 0755) != 0) throw BenchError("mkdir " + dir_);
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) throw BenchError("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string procs = dir_ + "/cgroup.procs";
      const int fd = ::open(procs.c_str(), O_WRONLY);
      if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(127);
      ::dup2(ready[1], STDOUT_FILENO);
      ::execlp("python3", "python3", "-c", kHolder, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(ready[1]);
    char word[8] = {};
    const bool held = ::read(ready[0], word, 4) == 4;
    ::close(ready[0]);
    if (!held) throw BenchError("the bare cgroup's python3 did not start");
  }
  ~BareFreezer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      // Thawed to take the kill; a failed write leaves nothing to do but wait.
      const std::string file = v1_ ? dir_ + "/freezer.state" : dir_ + "/cgroup.freeze";
      const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        (void)::write(fd, v1_ ? "THAWED" : "0", v1_ ? 6 : 1);
        ::close(fd);
      }
      ::waitpid(pid_, nullptr, 0);
    }
    for (int i = 0; i < 100 && ::rmdir(dir_.c_str()) != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  BareFreezer(const BareFreezer&) = delete;
  BareFreezer& operator=(const BareFreezer&) = delete;

  // Asks and waits until the kernel says every task is frozen, as the daemon does.
  void Freeze() {
    WriteText(v1_ ? dir_ + "/freezer.state" : dir_ + "/cgroup.freeze", v1_ ? "FROZEN" : "1");
    for (;;) {
      const std::string state =
          v1_ ? ReadText(dir_ + "/freezer.state") : ReadText(dir_ + "/cgroup.events");
      if (v1_ ? state.starts_with("FROZEN") : state.find("frozen 1") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  void Thaw() {
    WriteText(v1_ ? dir_ + "/freezer.state" : dir_ + "/cgroup.freeze", v1_ ? "THAWED" : "0");
  }

 private:
  bool v1_ = false;
  std::string dir_;
  pid_t pid_ = -1;
};

// Writes `bytes` to a file in `dir` and fsyncs it (ms), then reads it back (ms, from the page
// cache, as a restore right after its checkpoint reads its images).
std::pair<double, double> DiskBaseline(const std::string& dir, size_t bytes) {
  const std::string path = dir + "/bench-disk-baseline";
  std::string block(1 << 20, 'x');
  int64_t t0 = MonotonicNs();
  const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) throw BenchError("open " + path);
  for (size_t done = 0; done < bytes; done += block.size()) {
    if (::write(out, block.data(), block.size()) != static_cast<ssize_t>(block.size())) {
      ::close(out);
      throw BenchError("write " + path);
    }
  }
  ::fsync(out);
  ::close(out);
  const double write_ms = static_cast<double>(MonotonicNs() - t0) / 1e6;
  t0 = MonotonicNs();
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw BenchError("open " + path);
  while (::read(in, block.data(), block.size()) > 0) {
  }
  ::close(in);
  const double read_ms = static_cast<double>(MonotonicNs() - t0) / 1e6;
  ::unlink(path.c_str());
  return {write_ms, read_ms};
}

}  // namespace

// Starts a python3 in the sandbox at `base` that holds `mib` MiB it has written (resident), and
// returns once it does.
void Bench::HoldMemory(const std::string& base, int mib) {
  json::object start{{"cmd", "python3 -c \"import time\nb = bytearray(" + std::to_string(mib) +
                                 " << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
                                 "print('held', flush=True)\ntime.sleep(600)\n\""}};
  const std::string process = StringField(
      ParseObject(http_->Expect(201, "POST", base + "/processes", json::serialize(start))), "id");
  for (int i = 0;; ++i) {
    const json::object logs =
        ParseObject(http_->Expect(200, "GET", base + "/processes/" + process + "/logs"));
    if (json::serialize(logs).find("held") != std::string::npos) return;
    if (i > 300) throw BenchError("the sandbox's python3 did not hold its memory in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// 13c-f: sandboxes whose python3 holds `mib` MiB, paused to disk and restored, beside the disk.
void Bench::CheckpointRestore(int mib, int cycles, const std::string& row_c,
                              const std::string& row_r) {
  const std::string sb = CreateSandbox();
  const std::string base = "/v1/sandboxes/" + sb;
  HoldMemory(base, mib);
  Samples checkpoint_ms;
  Samples restore_ms;
  for (int i = 0; i < cycles; ++i) {
    int64_t t0 = MonotonicNs();
    const json::object paused =
        ParseObject(http_->Expect(200, "POST", base + "/pause", R"({"mode":"checkpoint"})"));
    checkpoint_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    if (paused.at("pause_mode") != "checkpoint") {
      throw BenchError("pause answered " + json::serialize(paused));
    }
    t0 = MonotonicNs();
    const json::object resumed = ParseObject(http_->Expect(200, "POST", base + "/resume"));
    restore_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    if (resumed.at("status") != "running") {
      throw BenchError("resume answered " + json::serialize(resumed));
    }
  }
  DeleteSandbox(sb);
  Samples write_ms;
  Samples read_ms;
  for (int i = 0; i < cycles; ++i) {
    const auto [w, r] = DiskBaseline(daemon_->data_dir(), static_cast<size_t>(mib) << 20);
    write_ms.Add(w);
    read_ms.Add(r);
  }
  rows_.push_back({row_c, Ms(checkpoint_ms.P(.5)) + " (" + Ms(checkpoint_ms.P(.9)) + ")",
                   "writing " + std::to_string(mib) + " MiB to a file there, with fsync",
                   Ms(write_ms.P(.5)), Ratio(checkpoint_ms.P(.5), write_ms.P(.5)),
                   "<= 1.5x" + Met(checkpoint_ms.P(.5) <= 1.5 * write_ms.P(.5))});
  const bool small = mib <= 10;
  rows_.push_back({row_r, Ms(restore_ms.P(.5)) + " (" + Ms(restore_ms.P(.9)) + ")",
                   "reading them back (page cache)", Ms(read_ms.P(.5)),
                   Ratio(restore_ms.P(.5), read_ms.P(.5)),
                   small ? "<= 40 ms" + Met(restore_ms.P(.5) <= 40.0)
                         : "<= 1.5x" + Met(restore_ms.P(.5) <= 1.5 * read_ms.P(.5))});
}

// 13g-h: forks with memory of a sandbox whose python3 holds 10 MiB, one and ten at a time,
// beside reading the same bytes back from the page cache (what a restore reads).
void Bench::Forks(int cycles) {
  const std::string sb = CreateSandbox();
  const std::string base = "/v1/sandboxes/" + sb;
  HoldMemory(base, 10);
  const auto fork = [&](int count, Samples& ms) {
    const int64_t t0 = MonotonicNs();
    const json::object made = ParseObject(
        http_->Expect(201, "POST", base + "/fork", "{\"count\":" + std::to_string(count) + "}"));
    ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    const json::value* list = made.if_contains("sandboxes");
    if (!list || !list->is_array() || list->as_array().size() != static_cast<size_t>(count)) {
      throw BenchError("fork answered " + json::serialize(made));
    }
    for (const json::value& f : list->as_array()) DeleteSandbox(StringField(f.as_object(), "id"));
  };
  Samples one_ms;
  Samples ten_ms;
  for (int i = 0; i < cycles; ++i) fork(1, one_ms);
  for (int i = 0; i < cycles; ++i) fork(10, ten_ms);
  DeleteSandbox(sb);
  Samples read_ms;
  for (int i = 0; i < cycles; ++i) read_ms.Add(DiskBaseline(daemon_->data_dir(), 10 << 20).second);
  rows_.push_back({"13g. fork with memory of a sandbox holding 10 MiB",
                   Ms(one_ms.P(.5)) + " (" + Ms(one_ms.P(.9)) + ")",
                   "reading 10 MiB back (page cache)", Ms(read_ms.P(.5)),
                   Ratio(one_ms.P(.5), read_ms.P(.5)), "<= 100 ms" + Met(one_ms.P(.5) <= 100.0)});
  const double each = ten_ms.P(.5) / 10;
  rows_.push_back({"13h. 10 forks of it at once, per fork", Ms(each),
                   "reading 10 MiB back (page cache)", Ms(read_ms.P(.5)),
                   Ratio(each, read_ms.P(.5)), "<= 10 ms" + Met(each <= 10.0)});
  Detail("13g-h", std::to_string(cycles) +
                      " forks of each, over HTTP: CRIU's dump of the running sandbox (stopped for "
                      "it), then each fork's restore under its own ids and hostname, made at once");
}

// 13: a sandbox whose python3 holds 100 MiB, paused and resumed kCycles times over HTTP,
// beside the freezer writes alone on a bare cgroup holding the same process.
void Bench::PauseResume() {
  const std::string sb = CreateSandbox();
  const std::string base = "/v1/sandboxes/" + sb;
  HoldMemory(base, 100);
  Samples pause_ms;
  Samples resume_ms;
  for (int i = 0; i < kCycles; ++i) {
    int64_t t0 = MonotonicNs();
    const json::object paused = ParseObject(http_->Expect(200, "POST", base + "/pause", "{}"));
    pause_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    if (paused.at("status") != "paused")
      throw BenchError("pause answered " + json::serialize(paused));
    t0 = MonotonicNs();
    const json::object resumed = ParseObject(http_->Expect(200, "POST", base + "/resume"));
    resume_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    if (resumed.at("status") != "running") {
      throw BenchError("resume answered " + json::serialize(resumed));
    }
  }
  DeleteSandbox(sb);

  Samples freeze_ms;
  Samples thaw_ms;
  {
    BareFreezer bare;
    for (int i = 0; i < kCycles; ++i) {
      int64_t t0 = MonotonicNs();
      bare.Freeze();
      freeze_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
      t0 = MonotonicNs();
      bare.Thaw();
      thaw_ms.Add(static_cast<double>(MonotonicNs() - t0) / 1e6);
    }
  }
  rows_.push_back({"13a. pause (freeze) of a sandbox holding 100 MiB, over HTTP",
                   Ms(pause_ms.P(.5)) + " (" + Ms(pause_ms.P(.9)) + ")",
                   "the freezer write and wait on a bare cgroup holding the same",
                   Ms(freeze_ms.P(.5)), Ratio(pause_ms.P(.5), freeze_ms.P(.5)), "-"});
  rows_.push_back({"13b. resume (thaw) of that sandbox, over HTTP",
                   Ms(resume_ms.P(.5)) + " (" + Ms(resume_ms.P(.9)) + ")",
                   "the thaw write on the bare cgroup", Ms(thaw_ms.P(.5)),
                   Ratio(resume_ms.P(.5), thaw_ms.P(.5)), "<= 2 ms" + Met(resume_ms.P(.5) <= 2.0)});
  Detail("13", std::to_string(kCycles) +
                   " cycles each; the HTTP figures include the request on a kept loopback "
                   "connection, the journal and the store write; the process's memory stays "
                   "resident (freeze keeps it in place)");
  if (::access(kCriu, X_OK) != 0) {
    Detail("13c-f", std::string("skipped: no CRIU at ") + kCriu + " (scripts/install-criu)");
    return;
  }
  const int cycles = options_.quick ? 1 : 5;
  CheckpointRestore(10, cycles, "13c. pause to disk (checkpoint) of a sandbox holding 10 MiB",
                    "13d. restore of that sandbox (resume)");
  CheckpointRestore(100, cycles, "13e. checkpoint of a sandbox holding 100 MiB",
                    "13f. restore of that sandbox");
  Detail("13c-f", std::to_string(cycles) +
                      " cycles each, over HTTP: CRIU's dump of the whole tree with the sandbox's "
                      "writable layer and a sync of the images' filesystem, then its restore in "
                      "the sandbox's cgroups and the daemon taking it back");
  Forks(cycles);
}

}  // namespace sandstream::bench
