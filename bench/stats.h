// Samples and their percentiles, the clocks the figures use, and the timestamp lines that the
// first-byte figure's producer prints (bash's $EPOCHREALTIME: seconds.microseconds).
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string_view>
#include <vector>

namespace sandstream::bench {

inline int64_t MonotonicNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The clock $EPOCHREALTIME reads; it is not namespaced, so a sandbox shares it with the host.
inline int64_t RealtimeNs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// "1700000000.123456" -> ns; false if the text is not such a stamp.
inline bool ParseStamp(std::string_view text, int64_t* ns) {
  int64_t seconds = 0, micros = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    seconds = seconds * 10 + (text[i] - '0');
  }
  if (i == 0 || i >= text.size() || text[i] != '.') return false;
  const size_t frac = ++i;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    micros = micros * 10 + (text[i] - '0');
  }
  if (i - frac != 6) return false;
  *ns = seconds * 1'000'000'000 + micros * 1000;
  return true;
}

class Samples {
 public:
  void Add(double v) {
    values_.push_back(v);
    sorted_ = false;
  }
  size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }
  double Sum() const { return std::accumulate(values_.begin(), values_.end(), 0.0); }
  // Nearest-rank percentile, q in [0, 1].
  double P(double q) {
    if (values_.empty()) return 0;
    if (!sorted_) std::sort(values_.begin(), values_.end());
    sorted_ = true;
    const size_t rank = static_cast<size_t>(q * static_cast<double>(values_.size() - 1) + 0.5);
    return values_[std::min(rank, values_.size() - 1)];
  }

 private:
  std::vector<double> values_;
  bool sorted_ = true;
};

}  // namespace sandstream::bench
