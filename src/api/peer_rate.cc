#include "api/peer_rate.h"

#include <algorithm>
#include <chrono>

namespace sandstream::api {

bool PeerRate::Take(std::string_view peer, SteadyTime now) {
  auto refill = [&](Bucket& b) {
    const double seconds = std::chrono::duration<double>(now - b.refilled).count();
    b.tokens = std::min(burst_, b.tokens + std::max(0.0, seconds) * per_second_);
    b.refilled = now;
  };
  if (buckets_.size() >= prune_at_) {
    std::erase_if(buckets_, [&](auto& entry) {
      refill(entry.second);
      return entry.second.tokens >= burst_;
    });
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

}  // namespace sandstream::api
