// Each live sandbox's use of CPU, memory and disk over its life: sampled every interval (5 s)
// from its cgroups and its writable filesystem into a series of its own, which GET
// /v1/sandboxes/{id}/metrics (and E2B's get_metrics) read. A series is bounded: once it holds
// kMaxSamples, its older half is merged pair by pair, so a long-lived sandbox keeps its whole
// life at a coarser grain the further back it goes. Kept in memory only: a daemon started
// again begins each series afresh.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "base/async.h"
#include "base/clock.h"
#include "sandbox/runtime.h"

namespace sandstream {

class Service;
struct SandboxEntry;

struct ResourceSample {
  SystemTime at;
  double cpu_used_pct = 0;  // of the sandbox's CPUs (its cpu limit), 0 to 100
  uint64_t memory_used = 0;
  uint64_t memory_cache = 0;
  uint64_t disk_used = 0;
};

struct ResourceSeries {
  double cpu_count = 1;  // its cpu limit in CPUs (cpu_percent / 100)
  uint64_t memory_total = 0;
  uint64_t disk_total = 0;
  std::vector<ResourceSample> samples;  // oldest first
  // The reading the next sample's CPU use is measured from.
  uint64_t last_cpu_usec = 0;
  SystemTime last_at;
};

// One reading of `sb` at `now` appended to `series` (a CPU share from the previous reading, or
// from its creation for the first); nothing for a sandbox whose runtime accounts nothing.
void AppendSample(ResourceSeries& series, const SandboxEntry& sb, SystemTime now);

class ResourceSampler {
 public:
  static constexpr size_t kMaxSamples = 720;  // 1 hour at 5 s before the oldest are merged
  // Sandboxes read per turn of the event loop, which is let go between batches.
  static constexpr size_t kBatch = 64;

  ResourceSampler(Service& service, const boost::asio::any_io_executor& ex,
                  std::chrono::milliseconds interval);

  // Samples every sandbox of the service every interval until Stop; the series of a sandbox
  // that is gone goes at the next round.
  void Start();
  void Stop();
  // The series of sandbox `id`, or null before its first sample.
  const ResourceSeries* Find(std::string_view id) const;
  std::chrono::milliseconds interval() const { return interval_; }

 private:
  boost::asio::awaitable<void> Run();
  void Round(SystemTime now, const std::vector<std::string>& ids, size_t from, size_t to);

  Service& service_;
  boost::asio::any_io_executor ex_;
  std::chrono::milliseconds interval_;
  std::map<std::string, ResourceSeries, std::less<>> series_;
  AsyncSignal stop_;
  bool running_ = false;
  bool stopped_ = false;
};

}  // namespace sandstream
