#include "service/resource_series.h"

#include <algorithm>
#include <cmath>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/log.h"
#include "service/sandbox_entry.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;

namespace {

// Halves the resolution of the older half of `samples`: each pair becomes its mean (at the
// later one's time, which covers both).
void MergeOlderHalf(std::vector<ResourceSample>& samples) {
  const size_t half = samples.size() / 2;
  std::vector<ResourceSample> merged;
  merged.reserve(samples.size() - half / 2);
  size_t i = 0;
  for (; i + 1 < half; i += 2) {
    const ResourceSample& a = samples[i];
    const ResourceSample& b = samples[i + 1];
    ResourceSample m = b;
    m.cpu_used_pct = (a.cpu_used_pct + b.cpu_used_pct) / 2;
    m.memory_used = a.memory_used / 2 + b.memory_used / 2;
    m.memory_cache = a.memory_cache / 2 + b.memory_cache / 2;
    m.disk_used = a.disk_used / 2 + b.disk_used / 2;
    merged.push_back(m);
  }
  merged.insert(merged.end(), samples.begin() + static_cast<ptrdiff_t>(i), samples.end());
  samples = std::move(merged);
}

}  // namespace

void AppendSample(ResourceSeries& series, const SandboxEntry& sb, SystemTime now) {
  if (!sb.runtime) return;
  const std::optional<sandbox::ResourceUsage> use = sb.runtime->Usage();
  if (!use) return;
  series.cpu_count = static_cast<double>(std::max<int64_t>(sb.limits.cpu_percent, 1)) / 100;
  series.memory_total = static_cast<uint64_t>(sb.limits.memory_mb) << 20;
  if (series.last_at == SystemTime{}) series.last_at = sb.created_at;
  ResourceSample s;
  // To the millisecond, as it is shown: a window bounded by a sample's time holds it.
  s.at = FromUnixMillis(ToUnixMillis(now));
  const double wall_usec = static_cast<double>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - series.last_at).count());
  const uint64_t cpu =
      use->cpu_usec >= series.last_cpu_usec ? use->cpu_usec - series.last_cpu_usec : 0;
  if (wall_usec > 0) {
    s.cpu_used_pct =
        std::clamp(static_cast<double>(cpu) / (wall_usec * series.cpu_count) * 100, 0.0, 100.0);
  }
  series.last_cpu_usec = use->cpu_usec;
  series.last_at = now;
  s.memory_used = use->memory_bytes;
  s.memory_cache = use->cache_bytes;
  if (use->disk) {
    series.disk_total = use->disk->total_bytes;
    s.disk_used = use->disk->used_bytes;
  }
  series.samples.push_back(s);
  if (series.samples.size() >= ResourceSampler::kMaxSamples) MergeOlderHalf(series.samples);
}

ResourceSampler::ResourceSampler(Service& service, const asio::any_io_executor& ex,
                                 std::chrono::milliseconds interval)
    : service_(service), ex_(ex), interval_(interval), stop_(ex) {}

void ResourceSampler::Start() {
  if (running_ || stopped_) return;
  running_ = true;
  asio::co_spawn(ex_, Run(), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::Error("resource sampler failed", {{"error", ex.what()}});
    }
  });
}

void ResourceSampler::Stop() {
  stopped_ = true;
  stop_.Notify();
}

const ResourceSeries* ResourceSampler::Find(std::string_view id) const {
  auto it = series_.find(id);
  return it == series_.end() ? nullptr : &it->second;
}

void ResourceSampler::Round(SystemTime now, const std::vector<std::string>& ids, size_t from,
                            size_t to) {
  for (size_t i = from; i < to; ++i) {
    const SandboxEntry* sb = service_.Find(ids[i]);
    // A lost sandbox's PID 1 is gone: its root path may name another process's by now.
    if (!sb || sb->deleting || sb->lost) continue;
    auto [it, made] = series_.try_emplace(ids[i]);
    AppendSample(it->second, *sb, now);
    // A runtime that accounts nothing (or a cgroup that could not be read) has no series.
    if (it->second.samples.empty()) series_.erase(it);
  }
}

asio::awaitable<void> ResourceSampler::Run() {
  while (!stopped_) {
    if (co_await stop_.Wait(interval_) || stopped_) break;
    std::vector<std::string> ids;
    for (const SandboxEntry* sb : service_.List()) ids.push_back(sb->id);
    std::erase_if(series_, [&](const auto& kv) { return service_.Find(kv.first) == nullptr; });
    const SystemTime now = SystemNow();
    for (size_t from = 0; from < ids.size() && !stopped_; from += kBatch) {
      Round(now, ids, from, std::min(ids.size(), from + kBatch));
      co_await asio::post(ex_, asio::use_awaitable);
    }
  }
  running_ = false;
}

}  // namespace sandstream
