#include "service/access.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <algorithm>
#include <charconv>

#include <boost/json.hpp>

#include "base/base64.h"
#include "base/log.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::string_view kKeyPrefix = "ssk_";
constexpr std::string_view kTokenPrefix = "sst_";

std::string Hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(buf.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return Hex(buf.data(), bytes);
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  return Hex(digest, size);
}

// Constant time in the length of `b` (both are hex digests of one length here).
bool Same(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// "ssk_<16 hex>_<64 hex>": the record's id ("key_<16 hex>") and whether it has that shape.
std::optional<std::string> IdOf(std::string_view credential, std::string_view prefix,
                                std::string_view id_prefix) {
  if (!credential.starts_with(prefix) || credential.size() != prefix.size() + 16 + 1 + 64 ||
      credential[prefix.size() + 16] != '_') {
    return std::nullopt;
  }
  return std::string(id_prefix) + std::string(credential.substr(prefix.size(), 16));
}

json::object TenantJson(const Tenant& t) {
  return {{"name", t.name},
          {"quotas", QuotasJson(t.quotas)},
          {"created_at", FormatRfc3339(t.created_at)}};
}

json::object KeyJson(const KeyInfo& k) {
  return {{"tenant", k.tenant}, {"hash", k.hash}, {"created_at", FormatRfc3339(k.created_at)}};
}

json::object TokenJson(const TokenInfo& t) {
  json::array scopes;
  for (const auto& name : ScopeNames(t.grant)) scopes.emplace_back(name);
  return {{"tenant", t.tenant},
          {"sandbox", t.sandbox},
          {"scopes", std::move(scopes)},
          {"hash", t.hash},
          {"created_at", FormatRfc3339(t.created_at)},
          {"expires_at", FormatRfc3339(t.expires_at)}};
}

std::string Text(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

SystemTime Time(const json::object& o, std::string_view key) {
  return ParseRfc3339(Text(o, key)).value_or(SystemTime{});
}

struct QuotaField {
  const char* name;
  int64_t Quotas::*field;
};
constexpr QuotaField kQuotaFields[] = {
    {"sandboxes", &Quotas::sandboxes},
    {"running_processes", &Quotas::running_processes},
    {"memory_mb", &Quotas::memory_mb},
    {"cpu_percent", &Quotas::cpu_percent},
    {"disk_mb", &Quotas::disk_mb},
    {"streams", &Quotas::streams},
    {"requests_per_second", &Quotas::requests_per_second},
    {"template_storage_mb", &Quotas::template_storage_mb},
    {"volume_storage_mb", &Quotas::volume_storage_mb},
    {"watches", &Quotas::watches},
};

}  // namespace

Result<Grant> ParseScopes(const std::vector<std::string>& names) {
  Grant g;
  if (names.empty())
    return Error{ErrorCode::kInvalidRequest, "scopes must name at least one scope"};
  for (const auto& name : names) {
    if (name == "read") {
      g.scopes |= kScopeRead;
    } else if (name == "exec") {
      g.scopes |= kScopeExec;
    } else if (name == "terminal") {
      g.scopes |= kScopeTerminal;
    } else if (name == "files:read") {
      g.scopes |= kScopeFilesRead;
    } else if (name == "files:write") {
      g.scopes |= kScopeFilesWrite;
    } else if (name.starts_with("port:")) {
      const std::string_view digits = std::string_view(name).substr(5);
      uint32_t port = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
      if (ec != std::errc() || end != digits.data() + digits.size() || port < 1 || port > 65535 ||
          digits.front() == '0') {
        return Error{ErrorCode::kInvalidRequest, "scope '" + name + "': a port is 1 to 65535"};
      }
      g.scopes |= kScopePort;
      if (std::find(g.ports.begin(), g.ports.end(), port) == g.ports.end()) {
        g.ports.push_back(static_cast<uint16_t>(port));
      }
    } else {
      return Error{
          ErrorCode::kInvalidRequest,
          "unknown scope '" + name + "' (read, exec, terminal, files:read, files:write, port:N)"};
    }
  }
  return g;
}

std::vector<std::string> ScopeNames(const Grant& grant) {
  std::vector<std::string> out;
  const std::pair<Scope, const char*> names[] = {{kScopeRead, "read"},
                                                 {kScopeExec, "exec"},
                                                 {kScopeTerminal, "terminal"},
                                                 {kScopeFilesRead, "files:read"},
                                                 {kScopeFilesWrite, "files:write"}};
  for (const auto& [scope, name] : names) {
    if (grant.scopes & scope) out.emplace_back(name);
  }
  for (uint16_t port : grant.ports) out.push_back("port:" + std::to_string(port));
  return out;
}

std::optional<Error> PastCreateQuota(std::string_view tenant, const Quotas& quotas,
                                     const TenantUsage& after, std::string_view where) {
  const struct {
    const char* name;
    int64_t quota;
    int64_t after;
  } checks[] = {{"sandboxes", quotas.sandboxes, after.sandboxes},
                {"memory_mb", quotas.memory_mb, after.memory_mb},
                {"cpu_percent", quotas.cpu_percent, after.cpu_percent},
                {"disk_mb", quotas.disk_mb, after.disk_mb}};
  for (const auto& c : checks) {
    if (c.quota > 0 && c.after > c.quota) {
      return Error{ErrorCode::kQuotaExceeded,
                   "tenant '" + std::string(tenant) + "' would pass its quota " + c.name + " " +
                       std::to_string(c.quota) + " (" + std::to_string(c.after) +
                       " with this sandbox" + std::string(where) + ")"};
    }
  }
  return std::nullopt;
}

json::object QuotasJson(const Quotas& q) {
  json::object o;
  for (const auto& f : kQuotaFields) o[f.name] = q.*(f.field);
  return o;
}

Result<Quotas> QuotasFromJson(const json::value& v) {
  Quotas q;
  if (v.is_null()) return q;
  if (!v.is_object()) return Error{ErrorCode::kInvalidRequest, "quotas must be an object"};
  for (const auto& [name, value] : v.as_object()) {
    const QuotaField* field = nullptr;
    for (const auto& f : kQuotaFields) {
      if (name == f.name) field = &f;
    }
    if (!field) {
      return Error{ErrorCode::kInvalidRequest,
                   "unknown quota '" + std::string(name) +
                       "' (sandboxes, running_processes, memory_mb, cpu_percent, disk_mb, "
                       "streams, requests_per_second, template_storage_mb, volume_storage_mb, "
                       "watches)"};
    }
    if (value.is_null()) continue;
    if (!value.is_int64() || value.as_int64() < 0 || value.as_int64() > (int64_t{1} << 40)) {
      return Error{ErrorCode::kInvalidRequest,
                   "quotas." + std::string(name) + " must be an integer from 0 (none) up"};
    }
    q.*(field->field) = value.as_int64();
  }
  return q;
}

bool Access::ValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && (c == '-' || c == '_'));
    if (!ok) return false;
  }
  return true;
}

Result<void> Access::Load() {
  if (!store_) return Ok{};
  auto rows = store_->AccessRows();
  if (!rows) return std::move(rows).error();
  for (const auto& row : *rows) {
    if (shared_ && (row.kind == "tenant" || row.kind == "key")) {
      unshared_.push_back({row.kind, row.id, row.record});
      continue;
    }
    Apply(row.kind, row.id, row.record);
  }
  DropExpiredTokens();
  return Ok{};
}

void Access::Replace(const std::vector<Record>& records) {
  tenants_.clear();
  keys_.clear();
  for (const Record& r : records) {
    if (r.kind == "tenant" || r.kind == "key") Apply(r.kind, r.id, r.text);
  }
}

void Access::Adopted(const Record& record) {
  if (store_) {
    if (auto r = store_->DeleteAccess(record.kind, record.id); !r) {
      log::Warn("access: could not delete a record the cluster took in",
                {{"kind", record.kind}, {"id", record.id}, {"error", r.error().message}});
    }
  }
  std::erase_if(unshared_,
                [&record](const Record& r) { return r.kind == record.kind && r.id == record.id; });
}

void Access::Apply(std::string_view kind, const std::string& id, const std::string& text) {
  json::object o;
  try {
    o = json::parse(text).as_object();
  } catch (const std::exception&) {
    log::Warn("access: unreadable record", {{"kind", std::string(kind)}, {"id", id}});
    return;
  }
  if (kind == "tenant") {
    auto quotas = QuotasFromJson(o["quotas"]);
    tenants_[id] = Tenant{id, quotas ? *quotas : Quotas{}, Time(o, "created_at")};
  } else if (kind == "key") {
    keys_[id] = KeyInfo{id, Text(o, "tenant"), Text(o, "hash"), Time(o, "created_at")};
  } else if (kind == "token") {
    std::vector<std::string> names;
    if (auto* a = o.if_contains("scopes"); a && a->is_array()) {
      for (const auto& n : a->as_array()) {
        if (n.is_string()) names.emplace_back(n.as_string());
      }
    }
    auto grant = ParseScopes(names);
    if (!grant) return;
    tokens_[id] = TokenInfo{id,
                            Text(o, "tenant"),
                            Text(o, "sandbox"),
                            *grant,
                            Text(o, "hash"),
                            Time(o, "created_at"),
                            Time(o, "expires_at")};
  }
}

void Access::DropExpiredTokens() const {
  const SystemTime now = SystemNow();
  for (auto it = tokens_.begin(); it != tokens_.end();) {
    if (it->second.expires_at > now) {
      ++it;
      continue;
    }
    if (store_) (void)store_->DeleteAccess("token", it->first);
    it = tokens_.erase(it);
  }
}

Result<Principal> Access::Authenticate(std::string_view credential) const {
  if (credential.empty()) {
    return Error{ErrorCode::kUnauthorized,
                 "missing API key: send Authorization: Bearer <key> (or ?access_token=<key>)"};
  }
  const std::string hash = Sha256Hex(credential);
  Principal p;
  if (Same(hash, Sha256Hex(admin_key_))) {
    p.credential = "admin";
    return p;
  }
  if (auto id = IdOf(credential, kKeyPrefix, "key_")) {
    auto it = keys_.find(*id);
    if (it != keys_.end() && Same(hash, it->second.hash) && tenants_.contains(it->second.tenant)) {
      p.kind = Principal::Kind::kTenant;
      p.tenant = it->second.tenant;
      p.credential = it->first;
      p.key = it->first;
      return p;
    }
  } else if (auto tid = IdOf(credential, kTokenPrefix, "tok_")) {
    auto it = tokens_.find(*tid);
    if (it != tokens_.end() && Same(hash, it->second.hash)) {
      if (it->second.expires_at <= SystemNow()) {
        return Error{ErrorCode::kUnauthorized, "token " + it->first + " has expired"};
      }
      p.kind = Principal::Kind::kToken;
      p.tenant = it->second.tenant;
      p.credential = it->first;
      p.sandbox = it->second.sandbox;
      p.grant = it->second.grant;
      p.expires_at = it->second.expires_at;
      return p;
    }
  }
  return Error{ErrorCode::kUnauthorized, "wrong API key (or a revoked key or token)"};
}

bool Access::UnknownKey(std::string_view credential) const {
  const auto id = IdOf(credential, kKeyPrefix, "key_");
  return id && !keys_.contains(*id);
}

const Tenant* Access::FindTenant(std::string_view name) const {
  auto it = tenants_.find(name);
  return it == tenants_.end() ? nullptr : &it->second;
}

asio::awaitable<Result<void>> Access::KeepTenant(const Tenant& t, bool create) {
  std::string text = json::serialize(TenantJson(t));
  if (shared_) co_return co_await shared_->PutTenant(t.name, std::move(text), create);
  if (store_) co_return store_->PutAccess("tenant", t.name, text);
  co_return Ok{};
}

asio::awaitable<Result<Tenant>> Access::CreateTenant(std::string name, Quotas quotas) {
  if (!ValidTenantName(name)) {
    co_return Error{ErrorCode::kInvalidRequest, "a tenant's name is [a-z0-9][a-z0-9_-]{0,62}"};
  }
  if (tenants_.contains(name)) {
    co_return Error{ErrorCode::kConflict, "tenant '" + name + "' exists already"};
  }
  const Tenant t{name, quotas, SystemNow()};
  if (auto kept = co_await KeepTenant(t, true); !kept) {
    co_return std::move(kept).error();
  }
  tenants_[name] = t;
  co_return t;
}

asio::awaitable<Result<Tenant>> Access::SetQuotas(std::string name, Quotas quotas) {
  auto it = tenants_.find(name);
  if (it == tenants_.end()) co_return Error{ErrorCode::kNotFound, "no tenant '" + name + "'"};
  Tenant t = it->second;
  t.quotas = quotas;
  if (auto kept = co_await KeepTenant(t, false); !kept) {
    co_return std::move(kept).error();
  }
  tenants_[name] = t;
  co_return t;
}

asio::awaitable<Result<void>> Access::DeleteTenant(std::string name) {
  if (!tenants_.contains(name)) co_return Error{ErrorCode::kNotFound, "no tenant '" + name + "'"};
  std::vector<std::string> key_ids;
  for (const auto& key : Keys(name)) key_ids.push_back(key.id);
  if (shared_) {
    if (auto deleted = co_await shared_->DeleteTenant(name); !deleted) {
      co_return std::move(deleted).error();
    }
  } else if (store_) {
    for (const auto& id : key_ids) {
      if (auto r = store_->DeleteAccess("key", id); !r) co_return r;
    }
    if (auto r = store_->DeleteAccess("tenant", name); !r) co_return r;
  }
  for (const auto& id : key_ids) keys_.erase(id);
  tenants_.erase(name);
  co_return Ok{};
}

asio::awaitable<Result<std::pair<KeyInfo, std::string>>> Access::CreateKey(std::string tenant) {
  if (!tenants_.contains(tenant)) {
    co_return Error{ErrorCode::kNotFound, "no tenant '" + tenant + "'"};
  }
  const std::string short_id = RandomHex(8);
  const std::string key = std::string(kKeyPrefix) + short_id + "_" + RandomHex(32);
  KeyInfo info{"key_" + short_id, tenant, Sha256Hex(key), SystemNow()};
  std::string text = json::serialize(KeyJson(info));
  Result<void> kept = Ok{};
  if (shared_) {
    kept = co_await shared_->PutKey(tenant, info.id, std::move(text));
  } else if (store_) {
    kept = store_->PutAccess("key", info.id, text);
  }
  if (!kept) co_return std::move(kept).error();
  keys_[info.id] = info;
  co_return std::pair{info, key};
}

std::vector<KeyInfo> Access::Keys(std::string_view tenant) const {
  std::vector<KeyInfo> out;
  for (const auto& [id, k] : keys_) {
    if (k.tenant == tenant) out.push_back(k);
  }
  return out;
}

bool Access::KeyLive(std::string_view id, std::string_view tenant) const {
  auto it = keys_.find(id);
  return it != keys_.end() && (tenant.empty() || it->second.tenant == tenant) &&
         tenants_.contains(it->second.tenant);
}

asio::awaitable<Result<void>> Access::RevokeKey(std::string tenant, std::string id) {
  auto it = keys_.find(id);
  if (it == keys_.end() || it->second.tenant != tenant) {
    co_return Error{ErrorCode::kNotFound, "no key '" + id + "' of tenant '" + tenant + "'"};
  }
  if (shared_) {
    if (auto r = co_await shared_->DeleteKey(tenant, id); !r) co_return r;
  } else if (store_) {
    if (auto r = store_->DeleteAccess("key", id); !r) co_return r;
  }
  keys_.erase(id);
  co_return Ok{};
}

Result<std::pair<TokenInfo, std::string>> Access::CreateToken(const std::string& tenant,
                                                              const std::string& sandbox,
                                                              const Grant& grant,
                                                              std::chrono::seconds ttl) {
  DropExpiredTokens();
  const std::string short_id = RandomHex(8);
  const std::string token = std::string(kTokenPrefix) + short_id + "_" + RandomHex(32);
  const SystemTime now = SystemNow();
  TokenInfo info{"tok_" + short_id, tenant, sandbox, grant, Sha256Hex(token), now, now + ttl};
  if (store_) {
    if (auto r = store_->PutAccess("token", info.id, json::serialize(TokenJson(info))); !r) {
      return std::move(r).error();
    }
  }
  tokens_[info.id] = info;
  return std::pair{info, token};
}

std::vector<TokenInfo> Access::Tokens(std::string_view sandbox) const {
  DropExpiredTokens();
  std::vector<TokenInfo> out;
  for (const auto& [id, t] : tokens_) {
    if (t.sandbox == sandbox) out.push_back(t);
  }
  return out;
}

Result<void> Access::RevokeToken(std::string_view sandbox, const std::string& id) {
  auto it = tokens_.find(id);
  if (it == tokens_.end() || it->second.sandbox != sandbox) {
    return Error{ErrorCode::kNotFound,
                 "no token '" + id + "' of sandbox '" + std::string(sandbox) + "'"};
  }
  if (store_) {
    if (auto r = store_->DeleteAccess("token", id); !r) return r;
  }
  tokens_.erase(it);
  return Ok{};
}

void Access::ForgetSandbox(std::string_view sandbox) {
  for (const auto& t : Tokens(sandbox)) (void)RevokeToken(sandbox, t.id);
}

bool Access::TokenLive(std::string_view id) const {
  auto it = tokens_.find(id);
  return it != tokens_.end() && it->second.expires_at > SystemNow();
}

namespace {

constexpr std::string_view kAccessTokenPrefix = "sbt_";

// The HMAC of an access token: of sandbox `sandbox` for `holder`, under `secret`.
std::string AccessTokenMac(std::string_view secret, std::string_view sandbox,
                           std::string_view holder) {
  const std::string message = "e2b-envd:" + std::string(sandbox) + ":" + std::string(holder);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &size);
  return Hex(digest, size);
}

}  // namespace

std::string SandboxAccessToken(std::string_view secret, std::string_view sandbox,
                               std::string_view holder) {
  const std::string_view shown = holder.starts_with("key_") ? holder.substr(4) : holder;
  return std::string(kAccessTokenPrefix) + std::string(shown) + "_" +
         AccessTokenMac(secret, sandbox, holder);
}

std::optional<std::string> AccessTokenHolder(std::string_view secret, std::string_view sandbox,
                                             std::string_view token) {
  if (!token.starts_with(kAccessTokenPrefix)) return std::nullopt;
  token.remove_prefix(kAccessTokenPrefix.size());
  const size_t sep = token.find('_');
  if (sep == std::string_view::npos || token.size() - sep - 1 != 64) return std::nullopt;
  const std::string_view shown = token.substr(0, sep);
  std::string holder;
  if (shown == kAdminHolder) {
    holder = kAdminHolder;
  } else if (shown.size() == 16 && std::all_of(shown.begin(), shown.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
             })) {
    holder = "key_" + std::string(shown);
  } else {
    return std::nullopt;
  }
  if (!Same(token.substr(sep + 1), AccessTokenMac(secret, sandbox, holder))) return std::nullopt;
  return holder;
}

std::string FileUrlSignature(std::string_view path, std::string_view operation,
                             std::string_view user, std::string_view token,
                             std::string_view expiration) {
  std::string message = std::string(path) + ":" + std::string(operation) + ":" + std::string(user) +
                        ":" + std::string(token);
  if (!expiration.empty()) message += ":" + std::string(expiration);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(message.data(), message.size(), digest, &size, EVP_sha256(), nullptr);
  std::string encoded = Base64(std::string_view(reinterpret_cast<const char*>(digest), size));
  while (!encoded.empty() && encoded.back() == '=') encoded.pop_back();
  return "v1_" + encoded;
}

}  // namespace sandstream
