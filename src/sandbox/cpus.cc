// CPU lists: parsing and formatting the kernel's "0-3,8" form, and picking a sandbox's CPUs.
#include "sandbox/cpus.h"

#include <algorithm>
#include <charconv>
#include <set>

namespace sandstream::sandbox {
namespace {

// A kernel has at most this many CPUs (NR_CPUS of the largest configurations).
constexpr int kMaxCpus = 8192;

std::optional<int> ParseCpu(std::string_view text) {
  int value = -1;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err != std::errc() || end != text.data() + text.size() || value < 0 || value >= kMaxCpus) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::optional<std::vector<int>> ParseCpuList(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::set<int> cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) return std::nullopt;  // "0,"
    const size_t dash = item.find('-');
    const auto first = ParseCpu(item.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : ParseCpu(item.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.insert(cpu);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> PickCpus(const std::vector<int>& available, int64_t cpu_percent, uint32_t slot) {
  const int64_t wanted = std::max<int64_t>(1, (cpu_percent + 99) / 100);
  if (available.empty() || wanted >= static_cast<int64_t>(available.size())) return available;
  const size_t count = static_cast<size_t>(wanted);
  std::vector<int> picked;
  const size_t first = (static_cast<size_t>(slot) * count) % available.size();
  for (size_t i = 0; i < count; ++i) picked.push_back(available[(first + i) % available.size()]);
  std::sort(picked.begin(), picked.end());
  return picked;
}

}  // namespace sandstream::sandbox
