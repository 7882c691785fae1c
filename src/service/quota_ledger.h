// What each tenant holds on this node, as its quotas (access.h) count it: its sandboxes, live
// and being made, with their limits; its open streams; its templates' storage. The checks that
// refuse past a quota read it. Updated by the Service as sandboxes are made and freed, and by
// the API as streams open and close; never a walk over every sandbox.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "base/result.h"
#include "sandbox/runtime.h"
#include "service/access.h"
#include "service/templates.h"

namespace sandstream {

class QuotaLedger {
 public:
  // `access` (null: no tenants) holds the tenants and their quotas.
  explicit QuotaLedger(Access* access) : access_(access) {}

  // The tenant's record when it has one (quotas), else null (the admin's sandboxes).
  const Tenant* TenantOf(std::string_view tenant) const;
  // The cluster's tenants, when `tenant` is one of them and tenants are shared.
  SharedTenants* SharedFor(std::string_view tenant) const;

  // A sandbox of `tenant` with `limits` being made: counted from Reserve to Unreserve (whether
  // it was made or not). Past a quota of the tenant's, Reserve counts nothing and says which.
  using Reservation = std::multimap<std::string, sandbox::Limits>::iterator;
  Result<Reservation> Reserve(const std::string& tenant, const sandbox::Limits& limits);
  void Unreserve(Reservation reservation);
  size_t creating() const { return creating_.size(); }

  // A live sandbox of `tenant` with `limits`, from Hold (made, or taken back at a restart) to
  // Release (freed).
  void Hold(const std::string& tenant, const sandbox::Limits& limits);
  void Release(const std::string& tenant, const sandbox::Limits& limits);
  // A held sandbox was paused: it counts its disk (and itself) only, not its memory or CPU,
  // until Unpause. Unpause with `check` refuses (kQuotaExceeded, nothing changed) when taking
  // them back would pass a quota of the tenant's; without, it takes them back regardless (the
  // sandbox is being deleted, which releases them).
  void Pause(const std::string& tenant, const sandbox::Limits& limits);
  Result<void> Unpause(const std::string& tenant, const sandbox::Limits& limits, bool check);

  // What `tenant`'s live sandboxes take (sandboxes, memory_mb, cpu_percent, disk_mb) and its
  // open streams; running processes are the Service's to add.
  TenantUsage Usage(std::string_view tenant) const;
  // What each tenant's sandboxes here take, those being made included: what a cluster counts
  // against its quotas for this node. The admin's are not counted.
  std::map<std::string, TenantUsage, std::less<>> Committed() const;

  // A streaming response (SSE, WebSocket) of `tenant` opens or ends: its streams quota's
  // measure (the server refuses a stream's request past it).
  void StreamOpened(const std::string& tenant);
  void StreamClosed(const std::string& tenant);
  int64_t StreamsOf(std::string_view tenant) const;

  // Whether `tenant`'s templates in `templates` leave room (`adding` 0: any; else that many
  // bytes more) within its template_storage_mb: kQuotaExceeded naming it if not.
  Result<void> CheckTemplateStorage(const Templates& templates, std::string_view tenant,
                                    uint64_t adding) const;

 private:
  Access* access_;
  std::map<std::string, TenantUsage, std::less<>> held_;  // live sandboxes, by tenant
  std::multimap<std::string, sandbox::Limits> creating_;  // sandboxes being made, by tenant
  std::map<std::string, int64_t, std::less<>> streams_;   // open streams, by tenant
};

}  // namespace sandstream
