#include "service/quota_ledger.h"

#include <utility>

namespace sandstream {
namespace {

void Add(TenantUsage& u, const sandbox::Limits& limits, int64_t sign) {
  u.sandboxes += sign;
  u.memory_mb += sign * limits.memory_mb;
  u.cpu_percent += sign * limits.cpu_percent;
  u.disk_mb += sign * limits.disk_mb;
}

}  // namespace

const Tenant* QuotaLedger::TenantOf(std::string_view tenant) const {
  if (tenant.empty() || !access_) return nullptr;
  return access_->FindTenant(tenant);
}

SharedTenants* QuotaLedger::SharedFor(std::string_view tenant) const {
  if (tenant.empty() || !access_) return nullptr;
  return access_->shared();
}

Result<QuotaLedger::Reservation> QuotaLedger::Reserve(const std::string& tenant,
                                                      const sandbox::Limits& limits) {
  if (const Tenant* t = TenantOf(tenant)) {
    // What it holds here, sandboxes still being made included, and this one.
    const auto committed = Committed();
    const auto held = committed.find(tenant);
    TenantUsage after = held == committed.end() ? TenantUsage{} : held->second;
    Add(after, limits, 1);
    if (auto over = PastCreateQuota(tenant, t->quotas, after)) return std::move(*over);
  }
  return creating_.emplace(tenant, limits);
}

void QuotaLedger::Unreserve(Reservation reservation) {
  creating_.erase(reservation);
}

void QuotaLedger::Hold(const std::string& tenant, const sandbox::Limits& limits) {
  Add(held_[tenant], limits, 1);
}

void QuotaLedger::Release(const std::string& tenant, const sandbox::Limits& limits) {
  auto it = held_.find(tenant);
  if (it == held_.end()) return;
  Add(it->second, limits, -1);
  if (it->second.sandboxes <= 0) held_.erase(it);
}

void QuotaLedger::Pause(const std::string& tenant, const sandbox::Limits& limits) {
  TenantUsage& u = held_[tenant];
  u.memory_mb -= limits.memory_mb;
  u.cpu_percent -= limits.cpu_percent;
}

Result<void> QuotaLedger::Unpause(const std::string& tenant, const sandbox::Limits& limits,
                                  bool check) {
  const Tenant* t = check ? TenantOf(tenant) : nullptr;
  if (t) {
    const auto committed = Committed();
    const auto held = committed.find(tenant);
    TenantUsage after = held == committed.end() ? TenantUsage{} : held->second;
    after.memory_mb += limits.memory_mb;
    after.cpu_percent += limits.cpu_percent;
    // Only what resuming takes back: its count and disk were held all along.
    Quotas taken = t->quotas;
    taken.sandboxes = 0;
    taken.disk_mb = 0;
    if (auto over = PastCreateQuota(tenant, taken, after, " resumed")) return std::move(*over);
  }
  TenantUsage& u = held_[tenant];
  u.memory_mb += limits.memory_mb;
  u.cpu_percent += limits.cpu_percent;
  return Ok{};
}

TenantUsage QuotaLedger::Usage(std::string_view tenant) const {
  auto it = held_.find(tenant);
  TenantUsage u = it == held_.end() ? TenantUsage{} : it->second;
  u.streams = StreamsOf(tenant);
  return u;
}

std::map<std::string, TenantUsage, std::less<>> QuotaLedger::Committed() const {
  std::map<std::string, TenantUsage, std::less<>> out;
  for (const auto& [tenant, usage] : held_) {
    if (!tenant.empty()) out[tenant] = usage;
  }
  for (const auto& [tenant, limits] : creating_) {
    if (!tenant.empty()) Add(out[tenant], limits, 1);
  }
  return out;
}

void QuotaLedger::StreamOpened(const std::string& tenant) {
  if (!tenant.empty()) ++streams_[tenant];
}

void QuotaLedger::StreamClosed(const std::string& tenant) {
  if (tenant.empty()) return;
  auto it = streams_.find(tenant);
  if (it != streams_.end() && --it->second <= 0) streams_.erase(it);
}

int64_t QuotaLedger::StreamsOf(std::string_view tenant) const {
  auto it = streams_.find(tenant);
  return it == streams_.end() ? 0 : it->second;
}

Result<void> QuotaLedger::CheckTemplateStorage(const Templates& templates, std::string_view tenant,
                                               uint64_t adding) const {
  const Tenant* t = TenantOf(tenant);
  if (!t || t->quotas.template_storage_mb <= 0) return Ok{};
  uint64_t used = 0;
  for (const Template* tmpl : templates.List()) {
    if (tmpl->tenant == tenant && tmpl->ready) used += tmpl->size_bytes;
  }
  const uint64_t quota = static_cast<uint64_t>(t->quotas.template_storage_mb) << 20;
  const auto mib = [](uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20); };
  const std::string head = "tenant '" + std::string(tenant) + "' ";
  const std::string named =
      "quota template_storage_mb " + std::to_string(t->quotas.template_storage_mb);
  if (adding == 0 && used >= quota) {
    return Error{ErrorCode::kQuotaExceeded,
                 head + "is at its " + named + " (its templates take " + mib(used) + " MiB)"};
  }
  if (adding > 0 && used + adding > quota) {
    return Error{ErrorCode::kQuotaExceeded, head + "would pass its " + named + " (" +
                                                mib(used + adding) + " MiB with this template)"};
  }
  return Ok{};
}

}  // namespace sandstream
