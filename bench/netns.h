// A network namespace of the bench's own for the egress figure, so that the daemon under test
// turns forwarding on and loads its nftables tables there, never in the host's; a stub upstream
// DNS server in it; and a host process whose resolver is that stub. Failures throw BenchError.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace sandstream::bench {

// Runs `body` on a thread of its own that first moves into a new network namespace and brings
// its `lo` up (unshare(CLONE_NEWNET) moves only the calling thread). The processes the body
// forks (the daemon) and the sockets it makes belong to that namespace, which goes when the
// last of them has. Rethrows what `body` threw. Needs CAP_SYS_ADMIN.
void RunInPrivateNetns(const std::function<void()>& body);

// An upstream DNS server: UDP on `address`:53 of the calling thread's network namespace,
// answering every A query with `answer` (TTL 300) and other types with no records, on a
// thread of its own until destroyed.
class StubDns {
 public:
  StubDns(const std::string& address, uint32_t answer);
  ~StubDns();
  StubDns(const StubDns&) = delete;
  StubDns& operator=(const StubDns&) = delete;

  uint64_t answered() const { return answered_.load(); }

 private:
  void Serve();

  int fd_ = -1;
  uint32_t answer_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

// Runs `argv` on the host, in the calling thread's network namespace and in a mount namespace
// of its own where /etc/resolv.conf reads `resolv_conf`; returns its stdout, and throws unless
// it exits 0.
std::string RunWithResolvConf(const std::string& resolv_conf, const std::vector<std::string>& argv);

}  // namespace sandstream::bench
