// A rate per client address, for what a caller without a credential can make costly (a signed
// file URL's lookup hashes once per sandbox): each address has a bucket of `burst` requests
// that refills at `per_second`. For the API server and for a gateway; one I/O thread, no locks.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "base/clock.h"

namespace sandstream::http {

class PeerRate {
 public:
  PeerRate(double per_second, double burst) : per_second_(per_second), burst_(burst) {}

  // Whether `peer` may have one more now; if so, it is counted.
  bool Take(std::string_view peer, SteadyTime now = SteadyNow());

 private:
  struct Bucket {
    double tokens = 0;
    SteadyTime refilled{};
  };
  double per_second_;
  double burst_;
  std::map<std::string, Bucket, std::less<>> buckets_;
  size_t prune_at_ = 1024;  // past this many addresses, those with a full bucket are forgotten
};

// How many signed-URL lookups that check every sandbox (no E2b-Sandbox-Id) one client address
// may make: a burst of this many, then this many a second.
inline constexpr double kSignatureScanBurst = 20;
inline constexpr double kSignatureScansPerSecond = 10;

}  // namespace sandstream::http
