// Volumes: storage that outlives sandboxes. Each is an ext4 filesystem in a sparse image file
// of the volume's size, so that the size holds against whatever a sandbox writes and a
// tenant's volume_storage_mb is a sum of sizes. The image is attached to a loop device and
// mounted under the daemon's data directory while the daemon runs (a restart mounts it again,
// finding the loop device a sandbox still holds). Sandboxes mount it idmapped: its files keep
// the template's ids, 0 the sandbox's root and 1000 its user, whichever sandbox wrote them.
// Several sandboxes may mount one volume at once; they share one filesystem, as processes on
// one host do. The event loop does the bookkeeping here; the disk work runs on the blocking
// pool.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "service/quota_ledger.h"
#include "service/store.h"

namespace sandstream {

struct Volume {
  std::string id;      // "vol_..."
  std::string name;    // unique among its tenant's
  std::string tenant;  // "" for the admin's
  int64_t size_mb = 0;
  SystemTime created_at;
  // Its filesystem is mounted at MountPath (a start that could not mount it says why in the
  // log): until it is, nothing may use that path, a directory of the host's.
  bool mounted = false;
};

// What a volume's filesystem holds now (statfs).
struct VolumeUsage {
  uint64_t used_bytes = 0;
  uint64_t total_bytes = 0;
};

class Volumes {
 public:
  // The smallest volume: room for ext4's journal and metadata, and some files.
  static constexpr int64_t kMinSizeMb = 16;

  // `dir`: where volumes are kept (one directory each); `node_id`: this daemon's in a
  // cluster, which each volume's id names (vol_{node}_{hex}) so that a gateway routes by it;
  // `quotas` outlives this.
  Volumes(std::string dir, const std::string& node_id, Store& store, const QuotaLedger& quotas,
          boost::asio::thread_pool& pool);

  // Loads the records and mounts each volume that is not mounted. Blocking: at the start.
  void Load();
  // Unmounts every volume (sandboxes that mount one keep theirs). Blocking: at the end.
  void UnmountAll();

  // Volume `name` of `tenant`, of `size_mb`, within its volume_storage_mb.
  boost::asio::awaitable<Result<const Volume*>> Create(std::string name, std::string tenant,
                                                       int64_t size_mb);
  // By id, or by name among `tenant`'s; another tenant's volume is not found (the admin sees
  // every volume by id, and its own by name).
  const Volume* Find(std::string_view tenant, bool admin, std::string_view id_or_name) const;
  std::vector<const Volume*> List(std::string_view tenant, bool admin) const;
  // The sum of `tenant`'s volumes' sizes: its volume_storage_mb's measure.
  int64_t StorageMb(std::string_view tenant) const;
  // Deletes volume `id` and everything on it. `used_by`: a sandbox that mounts it, which
  // refuses the deletion (kConflict), as a sandbox being made with it does.
  boost::asio::awaitable<Result<void>> Delete(std::string id, std::string used_by);

  // A sandbox is being made with volume `id`: it cannot be deleted until Unpin.
  void Pin(const std::string& id) { ++pins_[id]; }
  void Unpin(const std::string& id);

  // Where the volume's filesystem is mounted on the host.
  std::string MountPath(const Volume& v) const;
  // MountPath, if the volume's filesystem is mounted there; else kUnavailable.
  Result<std::string> Root(const Volume& v) const;
  // Blocking (statfs): run it on the blocking pool.
  static Result<VolumeUsage> UsageOf(const std::string& mount_path);

  static bool ValidName(std::string_view name);
  static constexpr std::string_view kNameRule =
      "name must be 1 to 63 of A-Z a-z 0-9 . _ - (not . or .., not starting vol_)";
  static boost::json::object Json(const Volume& v);

 private:
  std::string DirOf(const std::string& id) const { return dir_ + "/" + id; }
  const Volume* ByName(std::string_view tenant, std::string_view name) const;
  Result<void> CheckQuota(std::string_view tenant, int64_t adding_mb) const;

  std::string dir_;
  std::string id_prefix_;
  Store& store_;
  const QuotaLedger& quotas_;
  boost::asio::thread_pool& pool_;
  std::map<std::string, Volume, std::less<>> volumes_;  // by id
  // Being made, by (tenant, name): their sizes, which count against the quota already.
  std::map<std::pair<std::string, std::string>, int64_t> making_;
  std::set<std::string, std::less<>> deleting_;
  std::map<std::string, int, std::less<>> pins_;
};

}  // namespace sandstream
