// The nf_tables side of egress over netlink (libnftnl + libmnl): the shared `table inet` that
// accepts or rejects by mark with conntrack and masquerades, and one `table netdev ss_<slot>`
// per sandbox that marks its packets at the veth's ingress (docs/network/egress-design.md
// §3.4). Blocking calls for a worker thread; one transaction per call, never libnftables (it
// fetches the whole ruleset per command).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "net/ipv4.h"

struct mnl_socket;

namespace sandstream::net {

// The packet mark bits egress owns, and what each means.
struct Marks {
  uint32_t mask = 0x0f000000;      // all of ours; cleared on entry, the rest is left alone
  uint32_t named = 0x01000000;     // a rule named this private or host address
  uint32_t resolver = 0x02000000;  // the sandbox's own DNS endpoint (gateway:53)
  uint32_t allowed = 0x04000000;   // an allowed public destination (CIDR or pinned answer)
};

// `table inet <name>`: docs/network.md ("The nftables tables, as text") with these values.
struct SharedTable {
  std::string name = "sandstream";
  std::string device_glob = "ss-*";  // the host ends; a trailing '*' matches any suffix
  Ipv4Prefix pool;                   // every sandbox's /31 lies in it
  std::vector<uint16_t> api_ports;   // refused to sandboxes on every host address
  Marks marks;
  uint32_t conn_limit = 1024;  // new connections beyond this many per sandbox are rejected
};

// `table netdev <name>`: docs/network.md ("The nftables tables, as text"), its second table.
struct SandboxTable {
  std::string name;    // "ss_7"
  std::string device;  // "ss-7", must exist (pitfall §4.10: device first, table second)
  uint32_t gateway = 0;
  uint32_t address = 0;
  std::vector<Ipv4Prefix> allow;          // allowed world (never reaches never4)
  std::vector<Ipv4Prefix> allow_private;  // named private/host ranges
  std::vector<Ipv4Prefix> deny;           // beats everything
  std::vector<Ipv4Prefix> never;          // the default-deny ranges (must cover the pool)
  Marks marks;
};

enum class Family : uint8_t { kInet = 1, kNetdev = 5 };  // NFPROTO_INET, NFPROTO_NETDEV

struct Ipv4Range {
  uint32_t first = 0;
  uint32_t last = 0;
  bool operator==(const Ipv4Range&) const = default;
};
// Sorted, with overlapping and adjacent prefixes joined: the kernel refuses overlapping
// intervals in one set.
std::vector<Ipv4Range> MergePrefixes(std::vector<Ipv4Prefix> prefixes);

// One NETLINK_NETFILTER socket. Not thread-safe: one per worker.
class Nftables {
 public:
  static Result<Nftables> Open();
  Nftables(Nftables&& other) noexcept;
  Nftables& operator=(Nftables&& other) noexcept;
  Nftables(const Nftables&) = delete;
  Nftables& operator=(const Nftables&) = delete;
  ~Nftables();

  // Creates the table or replaces its whole content, atomically (add, delete, add again in one
  // transaction), so a restart with another pool or API port just works.
  Result<void> LoadShared(const SharedTable& table);
  // A missing table is success.
  Result<void> DeleteShared(const std::string& name);

  // Fails with EEXIST when the table exists: a re-apply would append duplicate rules.
  Result<void> AddSandbox(const SandboxTable& table);
  // A missing table is success. Its pins go with it.
  Result<void> DeleteSandbox(std::string_view table);
  // Replaces the address sets of an existing sandbox table (allow, allowpriv, deny, never) with
  // `table`'s and drops its pins, in one transaction: no packet sees a mix of old and new.
  Result<void> ReplaceSandboxSets(const SandboxTable& table);
  // addr into the sandbox's dns4 for timeout_ms. Linux 6.1 keeps an existing element's old
  // expiry on re-add, so when the element may exist and the new expiry is later, pass refresh:
  // the element is deleted and re-added in one transaction.
  Result<void> Pin(std::string_view table, uint32_t addr, uint32_t timeout_ms,
                   bool refresh = false);

  // The names of this netns's tables of family that start with prefix.
  Result<std::vector<std::string>> ListTables(std::string_view prefix, Family family);

 private:
  explicit Nftables(mnl_socket* nl);

  mnl_socket* nl_ = nullptr;
  uint32_t seq_ = 0;
};

}  // namespace sandstream::net
