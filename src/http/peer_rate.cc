#include "http/peer_rate.h"

#include <algorithm>
#include <chrono>
#include <iterator>

namespace sandstream::http {

bool PeerRate::Take(std::string_view peer, SteadyTime now) {
  auto refill = [&](Bucket& b) {
    const double seconds = std::chrono::duration<double>(now - b.refilled).count();
    b.tokens = std::min(burst_, b.tokens + std::max(0.0, seconds) * per_second_);
    b.refilled = now;
  };
  if (buckets_.size() >= prune_at_) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      refill(it->second);
      it = it->second.tokens >= burst_ ? buckets_.erase(it) : std::next(it);
    }
    prune_at_ = std::max<size_t>(1024, 2 * buckets_.size());
  }
  auto it = buckets_.find(peer);
  if (it == buckets_.end()) it = buckets_.emplace(std::string(peer), Bucket{burst_, now}).first;
  Bucket& b = it->second;
  refill(b);
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace sandstream::http
