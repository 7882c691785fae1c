// The DNS resolver of a sandbox with egress (docs/network/egress-design.md §3.6): UDP and TCP
// on port 53 of its gateway, in the daemon's event loop. It answers names its policy does not
// allow NXDOMAIN itself, forwards the rest to the upstream resolvers with an ID of its own,
// follows a CNAME chain the upstream left unresolved, and, when the policy lists what may be
// reached, pins every address on the chain into the sandbox's table before it replies, so the
// client's first connection finds it open. AAAA, HTTPS and SVCB get no answer (NODATA): egress
// is IPv4 only, and their address hints would bypass the pins.
//
// What a sandbox sends is bounded: queries per second, queries in flight, TCP connections and
// their idle time; an upstream that does not answer in time gives SERVFAIL.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/thread_pool.hpp>

#include "base/result.h"
#include "net/egress.h"
#include "net/policy.h"
#include "service/metrics.h"

namespace sandstream {

class SandboxResolver {
 public:
  struct Options {
    std::shared_ptr<net::Egress> egress;
    std::vector<uint32_t> upstreams;
    boost::asio::thread_pool* pool = nullptr;  // where pins are made (netlink)
    Metrics* metrics = nullptr;                // dns_queries_total
  };

  // Binds port 53 of `gateway` (UDP and TCP) and starts answering.
  static Result<std::shared_ptr<SandboxResolver>> Start(const boost::asio::any_io_executor& ex,
                                                        Options options, std::string sandbox_id,
                                                        uint32_t slot, uint32_t gateway,
                                                        net::EgressPolicy policy);
  ~SandboxResolver();
  // Closes its sockets; queries in flight end without an answer.
  void Stop();
  // Answers by `policy` from now on: a query in flight is judged again before its answers are
  // pinned. Set it before the sandbox's table changes (on the pool pins are made on, after
  // any pin already asked for), so no pin of the old rules outlives the change.
  void SetPolicy(net::EgressPolicy policy);

  // Limits per sandbox.
  static constexpr int kQueriesPerSecond = 200;
  static constexpr int kBurst = 400;
  static constexpr int kInFlight = 64;
  static constexpr int kTcpConnections = 8;

  struct State;

 private:
  explicit SandboxResolver(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace sandstream
