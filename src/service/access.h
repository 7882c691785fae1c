// Who may do what. Three kinds of credential open the API:
//  - the admin key (the daemon's api_key: the single key of earlier versions keeps working, as
//    the admin's): every sandbox, and the tenants and their keys;
//  - a tenant's key: that tenant's sandboxes only (another's is a 404, as if it did not exist),
//    within the tenant's quotas;
//  - a scoped token: one sandbox, for the scopes it names, until it expires, is revoked or the
//    sandbox is deleted; made for a browser, where whatever is in a URL is in its history.
// Keys and tokens are random secrets shown once when made; the daemon keeps their SHA-256 only.
// One io_context thread uses it (no locks); the store keeps every change. In a cluster, tenants
// and keys are the cluster's (SharedTenants, in etcd) and this is their mirror; tokens, which
// name one sandbox, stay with the node that holds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "service/store.h"

namespace sandstream {

// What a scoped token may do in its sandbox.
enum Scope : uint32_t {
  kScopeRead = 1,         // the sandbox, its processes, sessions and contexts, logs and events
  kScopeExec = 2,         // run commands, processes, code; stdin and signals
  kScopeTerminal = 4,     // terminals (exec/pty)
  kScopeFilesRead = 8,    // list, read, stat and watch files
  kScopeFilesWrite = 16,  // write, delete, make directories, move
  kScopePort = 32,        // the exposed ports it names
};
using Scopes = uint32_t;

// "read", "exec", "terminal", "files:read", "files:write", "port:N".
struct Grant {
  Scopes scopes = 0;
  std::vector<uint16_t> ports;
};
Result<Grant> ParseScopes(const std::vector<std::string>& names);
std::vector<std::string> ScopeNames(const Grant& grant);

// Per tenant; 0 means none.
struct Quotas {
  int64_t sandboxes = 0;          // live sandboxes
  int64_t running_processes = 0;  // in all its sandboxes
  int64_t memory_mb = 0;          // the sum of its sandboxes' memory limits
  int64_t cpu_percent = 0;        // the sum of their CPU limits
  int64_t disk_mb = 0;            // the sum of their disk limits
  int64_t streams = 0;            // open streaming responses (SSE, WebSockets, relays)
  int64_t requests_per_second = 0;
  int64_t template_storage_mb = 0;  // its image and snapshot templates' size_bytes, on a node
  int64_t volume_storage_mb = 0;    // the sum of its volumes' sizes, on a node
  // File watches open at once in its sandboxes; 0: the default share (a quarter of the
  // daemon's). Never more than the daemon's.
  int64_t watches = 0;
};

// What a tenant's sandboxes take (its quotas' measure).
struct TenantUsage {
  int64_t sandboxes = 0;
  int64_t running_processes = 0;
  int64_t memory_mb = 0;
  int64_t cpu_percent = 0;
  int64_t disk_mb = 0;
  int64_t streams = 0;
  int64_t volume_storage_mb = 0;  // on this node (volumes.h)
};

struct Tenant {
  std::string name;
  Quotas quotas;
  SystemTime created_at;
};

struct KeyInfo {
  std::string id;  // "key_" + 16 hex digits; the key itself starts with it
  std::string tenant;
  std::string hash;  // hex SHA-256 of the key
  SystemTime created_at;
};

struct TokenInfo {
  std::string id;  // "tok_" + 16 hex digits
  std::string tenant;
  std::string sandbox;
  Grant grant;
  std::string hash;
  SystemTime created_at;
  SystemTime expires_at;
};

// Who a request is.
struct Principal {
  enum class Kind { kAdmin, kTenant, kToken };
  Kind kind = Kind::kAdmin;
  std::string tenant;      // the tenant it acts for; "" for the admin
  std::string credential;  // "admin", a key id or a token id: who did it, for the audit
  // A token's:
  std::string sandbox;
  Grant grant;
  SystemTime expires_at{};
  // A sandbox's access token (SandboxAccessToken): no record of its own; it ends with the
  // sandbox, or with the key it was handed to.
  bool derived = false;
  // The tenant key it stands on (a key's own id, or the one an access token was handed to):
  // what it opened, streams included, ends when that key is revoked. Empty for the admin's.
  std::string key;

  bool admin() const { return kind == Kind::kAdmin; }
  // Whether a sandbox of `owner` named `id` exists for this principal at all.
  bool Sees(std::string_view owner, std::string_view id) const {
    switch (kind) {
      case Kind::kAdmin:
        return true;
      case Kind::kTenant:
        return owner == tenant;
      case Kind::kToken:
        return owner == tenant && id == sandbox;
    }
    return false;
  }
};

// Tenants and keys kept for a whole cluster rather than in one node's store, and what each
// tenant takes on every node, so that its quotas hold across them (cluster::EtcdTenants).
class SharedTenants {
 public:
  virtual ~SharedTenants() = default;
  // A tenant's record: when `create`, only if it has none yet (kConflict), else only if it has
  // one (kNotFound).
  virtual boost::asio::awaitable<Result<void>> PutTenant(std::string name, std::string record,
                                                         bool create) = 0;
  // Deletes tenant `name` and its keys; kConflict while it has sandboxes on any node.
  virtual boost::asio::awaitable<Result<void>> DeleteTenant(std::string name) = 0;
  // A new key's record, if its tenant still exists (kNotFound).
  virtual boost::asio::awaitable<Result<void>> PutKey(std::string tenant, std::string id,
                                                      std::string record) = 0;
  virtual boost::asio::awaitable<Result<void>> DeleteKey(std::string tenant, std::string id) = 0;
  // Publishes what `tenant` takes on this node now (sandboxes being made included); with
  // `quotas`, only if its sandboxes, memory_mb, cpu_percent and disk_mb over every node then
  // stay within them (else kQuotaExceeded naming the quota, and nothing is published).
  virtual boost::asio::awaitable<Result<void>> Commit(std::string tenant,
                                                      std::optional<Quotas> quotas) = 0;
  // What `tenant` takes on this node has gone down: published soon, in the background.
  virtual void Changed(std::string tenant) = 0;
  // Reads tenants and keys (and usage) now, for an admin about to change or show them: another
  // node may have changed them a moment ago.
  virtual boost::asio::awaitable<void> Reread() = 0;
  // What `tenant` takes on every node, as last read: sandboxes, memory_mb, cpu_percent, disk_mb.
  virtual TenantUsage Total(std::string_view tenant) const = 0;
};

class Access {
 public:
  // `store` may be null (nothing is kept: tests and tools).
  Access(std::string admin_key, Store* store) : admin_key_(std::move(admin_key)), store_(store) {}

  // Tenants and keys are `shared`'s from now on (set before Load).
  void Share(SharedTenants* shared) { shared_ = shared; }
  SharedTenants* shared() const { return shared_; }

  // The tenants, keys and tokens the store holds (tokens only, when shared); expired tokens
  // are dropped.
  Result<void> Load();
  // A shared record: `kind` "tenant" or "key", its id and its JSON text.
  struct Record {
    std::string kind, id, text;
  };
  // The tenants and keys are these records now (the shared store's, as read).
  void Replace(const std::vector<Record>& records);
  // Shared: the tenants and keys this node's store held from before (Load), for the shared
  // store to take in; each one taken is then deleted from this node's store.
  const std::vector<Record>& unshared() const { return unshared_; }
  void Adopted(const Record& record);

  // The principal a credential (a bearer token, an access_token) names, or a 401 saying why.
  Result<Principal> Authenticate(std::string_view credential) const;
  // Whether `credential` has a tenant key's shape with an id this node does not know (made on
  // another node a moment ago, say).
  bool UnknownKey(std::string_view credential) const;

  // Tenant names: [a-z0-9][a-z0-9_-]{0,62}.
  const std::map<std::string, Tenant, std::less<>>& tenants() const { return tenants_; }
  const Tenant* FindTenant(std::string_view name) const;
  // These change the shared store first, when there is one.
  boost::asio::awaitable<Result<Tenant>> CreateTenant(std::string name, Quotas quotas);
  boost::asio::awaitable<Result<Tenant>> SetQuotas(std::string name, Quotas quotas);
  // With its keys; the caller has made sure it has no sandbox left on this node (the shared
  // store refuses while it has any on another).
  boost::asio::awaitable<Result<void>> DeleteTenant(std::string name);

  // A new key of `tenant`: its record, and the key itself, which is never shown again.
  boost::asio::awaitable<Result<std::pair<KeyInfo, std::string>>> CreateKey(std::string tenant);
  std::vector<KeyInfo> Keys(std::string_view tenant) const;
  // Whether key `id` (of `tenant`, when one is named) exists, so it still opens the API.
  bool KeyLive(std::string_view id, std::string_view tenant = {}) const;
  boost::asio::awaitable<Result<void>> RevokeKey(std::string tenant, std::string id);

  // A token for `sandbox` (of `tenant`) with `grant` for `ttl`: its record and the token.
  static constexpr std::chrono::seconds kMaxTokenTtl{7 * 24 * 3600};
  Result<std::pair<TokenInfo, std::string>> CreateToken(const std::string& tenant,
                                                        const std::string& sandbox,
                                                        const Grant& grant,
                                                        std::chrono::seconds ttl);
  std::vector<TokenInfo> Tokens(std::string_view sandbox) const;
  Result<void> RevokeToken(std::string_view sandbox, const std::string& id);
  // The sandbox is deleted: its tokens go with it.
  void ForgetSandbox(std::string_view sandbox);
  // Whether token `id` still opens its sandbox (streams opened with it end when it does not).
  bool TokenLive(std::string_view id) const;

  static bool ValidTenantName(std::string_view name);

 private:
  void DropExpiredTokens() const;
  // Takes in one stored record (Load, Replace).
  void Apply(std::string_view kind, const std::string& id, const std::string& text);
  // Writes a tenant's record where tenants are kept: the shared store, else this node's.
  boost::asio::awaitable<Result<void>> KeepTenant(const Tenant& t, bool create);

  std::string admin_key_;
  Store* store_;
  SharedTenants* shared_ = nullptr;
  std::vector<Record> unshared_;
  std::map<std::string, Tenant, std::less<>> tenants_;
  std::map<std::string, KeyInfo, std::less<>> keys_;
  mutable std::map<std::string, TokenInfo, std::less<>> tokens_;
};

// The quota among sandboxes, memory_mb, cpu_percent and disk_mb that `after` (what `tenant`
// would take with a new sandbox) passes, as kQuotaExceeded naming it; `where` ends the message
// (", over every node" in a cluster).
std::optional<Error> PastCreateQuota(std::string_view tenant, const Quotas& quotas,
                                     const TenantUsage& after, std::string_view where = "");

// Quotas as JSON ({"sandboxes": 10, ...}, 0 for none) and back (unknown names and negative
// numbers refused, absent ones 0).
boost::json::object QuotasJson(const Quotas& q);
Result<Quotas> QuotasFromJson(const boost::json::value& v);

// The access token of sandbox `sandbox` that E2B's SDKs send to its envd (X-Access-Token), as
// handed to `holder`: kAdminHolder, or the id of the tenant key that asked for it. "sbt_" +
// the holder ("admin", or the key's 16 hex digits) + "_" + an HMAC-SHA256 of the sandbox and
// the holder under `secret` (the admin key). It needs no record and no other sandbox's token
// can be made from it; it ends with the sandbox, and a key's with the key (whoever uses it
// checks that its holder is still a key of the sandbox's tenant: AccessTokenHolder).
inline constexpr std::string_view kAdminHolder = "admin";
std::string SandboxAccessToken(std::string_view secret, std::string_view sandbox,
                               std::string_view holder);
// The holder an access token of sandbox `sandbox` names (kAdminHolder or "key_<16 hex>"),
// if `token` is that sandbox's token for it under `secret`; nothing for any other string.
// Whether the holder is still live is the caller's to check.
std::optional<std::string> AccessTokenHolder(std::string_view secret, std::string_view sandbox,
                                             std::string_view token);

// The signature of a file URL of that sandbox's envd (the SDKs' download_url and upload_url):
// "v1_" + unpadded base64 of SHA-256("path:operation:user:token"), ":expiration" appended when
// the URL has one. `operation` is "read" or "write"; `user` "" for the default user.
std::string FileUrlSignature(std::string_view path, std::string_view operation,
                             std::string_view user, std::string_view token,
                             std::string_view expiration);

}  // namespace sandstream
