#include "net/egress.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "net/conntrack.h"
#include "net/nft.h"
#include "net/rtnl.h"
#include "platform/fd.h"

namespace sandstream::net {

namespace {

// The three lowest bits of the mask, in order: named, resolver, allowed.
Marks MarksOf(uint32_t mask) {
  Marks m;
  m.mask = mask;
  uint32_t bits[3] = {};
  for (uint32_t& bit : bits) {
    bit = mask & (~mask + 1);
    mask &= ~bit;
  }
  m.named = bits[0];
  m.resolver = bits[1];
  m.allowed = bits[2];
  return m;
}

Result<void> EnableForwarding() {
  auto current = ReadFile("/proc/sys/net/ipv4/ip_forward");
  if (current && current->starts_with("1")) return Ok{};
  UniqueFd fd(::open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC));
  if (!fd || ::write(fd.get(), "1", 1) != 1) {
    return SysError(ErrorCode::kSandboxSetupFailed, "net: sysctl: net.ipv4.ip_forward", errno);
  }
  log::Info("egress: turned on IPv4 forwarding (net.ipv4.ip_forward=1)");
  return Ok{};
}

// A route of the host (not one of ours) into the pool: sandboxes would shadow that network.
Result<void> CheckPoolAgainstRoutes(const Ipv4Prefix& pool) {
  auto table = ReadFile("/proc/net/route");
  if (!table) return Ok{};
  std::istringstream lines(*table);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string iface, dest_hex, gateway_hex, flags, refcnt, use, metric, mask_hex;
    if (!(fields >> iface >> dest_hex >> gateway_hex >> flags >> refcnt >> use >> metric >>
          mask_hex)) {
      continue;
    }
    if (iface.starts_with("ss-")) continue;
    // Network byte order, printed as the host's (little-endian) integer.
    const uint32_t dest = ntohl(static_cast<uint32_t>(std::stoul(dest_hex, nullptr, 16)));
    const uint32_t mask = ntohl(static_cast<uint32_t>(std::stoul(mask_hex, nullptr, 16)));
    if (mask == 0) continue;  // the default route covers everything, and that is fine
    const Ipv4Prefix route{dest & mask, static_cast<uint8_t>(std::popcount(mask))};
    if (route.Overlaps(pool)) {
      return Error{ErrorCode::kSandboxSetupFailed,
                   "net: egress_pool " + FormatPrefix(pool) + " overlaps the host's route to " +
                       FormatPrefix(route) + " on " + iface + ": choose another egress_pool"};
    }
  }
  return Ok{};
}

}  // namespace

std::vector<uint32_t> HostAddresses() {
  std::vector<uint32_t> out;
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (auto* a = list; a; a = a->ifa_next) {
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
      out.push_back(ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr));
    }
  }
  ::freeifaddrs(list);
  return out;
}

OwnAddresses HostOwnAddresses() {
  OwnAddresses out;
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (auto* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    if (a->ifa_addr->sa_family == AF_INET) {
      out.v4.push_back(ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const uint8_t* b = reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr.s6_addr;
      std::array<uint8_t, 16> bytes{};
      std::copy(b, b + 16, bytes.begin());
      out.v6.push_back(bytes);
    }
  }
  ::freeifaddrs(list);
  return out;
}

Egress::Egress(EgressOptions options) : options_(std::move(options)) {}
Egress::~Egress() = default;

void Egress::SetApiPort(uint16_t port) {
  std::lock_guard lock(mu_);
  if (api_port_ != port) prepared_ = false;
  api_port_ = port;
}

Result<void> Egress::Prepare() {
  std::lock_guard lock(mu_);
  return PrepareLocked();
}

Result<Nftables*> Egress::NftLocked() {
  if (!nft_) {
    auto nft = Nftables::Open();
    if (!nft) return std::move(nft).error();
    nft_ = std::make_unique<Nftables>(std::move(*nft));
  }
  return nft_.get();
}

Result<void> Egress::PrepareLocked() {
  if (prepared_) return Ok{};
  if (auto r = CheckPoolAgainstRoutes(options_.pool); !r) return r;
  if (auto r = EnableForwarding(); !r) return r;
  auto nft = NftLocked();
  if (!nft) return std::move(nft).error();
  SharedTable shared;
  shared.pool = options_.pool;
  if (api_port_ != 0) shared.api_ports.push_back(api_port_);
  shared.marks = MarksOf(options_.mark_mask);
  shared.conn_limit = options_.max_connections;
  if (auto r = (*nft)->LoadShared(shared); !r) return r;
  host_addresses_ = HostAddresses();
  prepared_ = true;
  return Ok{};
}

Result<void> Egress::Attach(uint32_t slot, int netns_fd, const EgressPolicy& policy) {
  {
    std::lock_guard lock(mu_);
    if (auto r = PrepareLocked(); !r) return r;
  }
  const std::string device = Device(slot);
  // The kernel removes a dead namespace's veth some tens of milliseconds after it.
  for (int i = 0; i < 200 && LinkExists(device); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  VethSpec veth{device, netns_fd, Gateway(slot), Address(slot)};
  if (Faulted()) return SysError(ErrorCode::kSandboxSetupFailed, "net: veth: add " + device, errno);
  if (auto r = CreateVeth(veth); !r) return r;
  const EgressSets sets = [&] {
    std::lock_guard lock(mu_);
    return CompileEgress(policy, options_.pool, host_addresses_);
  }();
  SandboxTable table;
  table.name = Table(slot);
  table.device = device;
  table.gateway = Gateway(slot);
  table.address = Address(slot);
  table.allow = sets.allow;
  table.allow_private = sets.allow_private;
  table.deny = sets.deny;
  table.never = sets.never;
  table.marks = MarksOf(options_.mark_mask);
  std::lock_guard lock(mu_);
  pins_.erase(slot);
  adopted_.erase(slot);
  auto nft = NftLocked();
  if (!nft) {
    (void)DeleteLink(device);
    return std::move(nft).error();
  }
  Result<void> added = (*nft)->AddSandbox(table);
  if (added && Faulted()) {
    added = SysError(ErrorCode::kSandboxSetupFailed, "net: nft: add table " + table.name, errno);
    (void)(*nft)->DeleteSandbox(table.name);
  }
  if (!added) {
    (void)DeleteLink(device);
    return added;
  }
  return Ok{};
}

Result<void> Egress::Update(uint32_t slot, const EgressPolicy& policy) {
  {
    std::lock_guard lock(mu_);
    const EgressSets sets = CompileEgress(policy, options_.pool, host_addresses_);
    SandboxTable table;
    table.name = Table(slot);
    table.allow = sets.allow;
    table.allow_private = sets.allow_private;
    table.deny = sets.deny;
    table.never = sets.never;
    auto nft = NftLocked();
    if (!nft) return std::move(nft).error();
    if (auto r = (*nft)->ReplaceSandboxSets(table); !r) return r;
    pins_.erase(slot);
    adopted_.erase(slot);
  }
  // After the sets: what the sandbox sends from here on meets the new rules, so no entry
  // made under the old ones can appear behind the flush.
  auto flushed = FlushConntrackFrom(Address(slot));
  if (!flushed) return std::move(flushed).error();
  return Ok{};
}

Result<void> Egress::Detach(uint32_t slot) {
  {
    std::lock_guard lock(mu_);
    pins_.erase(slot);
    adopted_.erase(slot);
    auto nft = NftLocked();
    if (!nft) return std::move(nft).error();
    if (auto r = (*nft)->DeleteSandbox(Table(slot)); !r) return r;
  }
  // After the table: from here on nothing the sandbox sends is let through, so no new entry
  // can appear behind the flush.
  auto flushed = FlushConntrackFrom(Address(slot));
  if (!flushed) return std::move(flushed).error();
  return Ok{};
}

Result<void> Egress::Pin(uint32_t slot, uint32_t addr, std::chrono::seconds ttl) {
  const auto clamped = std::clamp(ttl, kMinPin, kMaxTtl) + kPinGrace;
  const auto now = std::chrono::steady_clock::now();
  const auto until = now + clamped;
  std::lock_guard lock(mu_);
  auto& pins = pins_[slot];
  if (pins.size() >= kMaxPins && !pins.contains(addr)) {
    std::erase_if(pins, [now](const auto& pin) { return pin.second <= now; });
    if (pins.size() >= kMaxPins) {
      return Error{ErrorCode::kQuotaExceeded, "net: pins: " + std::to_string(kMaxPins) +
                                                  " addresses are open for this sandbox already"};
    }
  }
  auto [it, fresh] = pins.try_emplace(addr, until);
  // A pin that outlasts this one already: nothing to do (expiries only grow: one address may
  // serve several names with different TTLs).
  if (!fresh && it->second >= until - std::chrono::seconds(1)) return Ok{};
  auto nft = NftLocked();
  if (!nft) return std::move(nft).error();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clamped).count();
  // A longer pin of an address already open replaces its element: on 6.1 a plain add would
  // keep the old expiry. So does the first of a sandbox an earlier daemon pinned for (this
  // one's memory starts empty). A new address is a plain add: a replacement of an element that
  // is not there fails, and the kernel takes milliseconds to abort that transaction.
  const bool refresh = !fresh || adopted_.contains(slot);
  Result<void> pinned = (*nft)->Pin(Table(slot), addr, static_cast<uint32_t>(ms), refresh);
  if (!pinned) {
    if (fresh) pins.erase(it);
    return pinned;
  }
  it->second = until;
  return Ok{};
}

void Egress::Adopted(uint32_t slot) {
  std::lock_guard lock(mu_);
  adopted_.insert(slot);
}

void Egress::CleanupLeftovers(const std::vector<uint32_t>& live) {
  // The slot a name of ours ("ss_7", "ss-7") is for; nullopt for a name that is not ours.
  auto slot_of = [](std::string_view name, std::string_view prefix) -> std::optional<uint32_t> {
    if (!name.starts_with(prefix)) return std::nullopt;
    const std::string digits(name.substr(prefix.size()));
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return static_cast<uint32_t>(std::stoul(digits));
  };
  auto is_live = [&](std::string_view name, std::string_view prefix) {
    const auto slot = slot_of(name, prefix);
    return !slot || std::find(live.begin(), live.end(), *slot) != live.end();
  };
  std::lock_guard lock(mu_);
  auto nft = NftLocked();
  if (nft) {
    if (auto tables = (*nft)->ListTables("ss_", Family::kNetdev); tables) {
      for (const auto& name : *tables) {
        if (is_live(name, "ss_")) continue;
        log::Info("egress: removing a leftover table", {{"table", name}});
        (void)(*nft)->DeleteSandbox(name);
        (void)FlushConntrackFrom(Address(*slot_of(name, "ss_")));
      }
    }
  }
  if (auto links = ListLinks("ss-"); links) {
    for (const auto& name : *links) {
      if (is_live(name, "ss-")) continue;
      log::Info("egress: removing a leftover link", {{"link", name}});
      (void)DeleteLink(name);
    }
  }
}

}  // namespace sandstream::net
