// The image store: OCI and Docker images turned into content-addressed, unpacked layers, each
// one directory that the daemon mounts as an overlay lower layer (idmapped; owners on disk are
// the image's own ids). Blocking file I/O on untrusted input: call it from a worker thread.
// Every import is all or nothing: a refused or failed one leaves nothing in the store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "image/manifest.h"
#include "image/stream.h"
#include "platform/unique_fd.h"

namespace sandstream::image {

struct LayerRef {
  std::string digest;   // of the blob as shipped (compressed or not)
  std::string diff_id;  // of the uncompressed tar: the layer's name in the store
  uint64_t size = 0;    // of the blob
};

struct Image {
  std::string manifest_digest;  // of the manifest chosen (a docker save without one: of the
                                // OCI manifest the store wrote for it)
  std::string config_digest;
  ImageConfig config;
  std::vector<LayerRef> layers;         // bottom first
  std::vector<std::string> repo_tags;   // from docker save's manifest.json or the index's
                                        // annotation, if any
};

struct StoreLimits {
  uint64_t max_archive_bytes = 0;   // an archive to import
  uint64_t max_unpacked_bytes = 0;  // what one import unpacks (the uncompressed tar streams)
  uint64_t max_entries = 0;         // tar entries per layer
};

// Progress of an import: step "download" (a layer's blob from a registry), "verify" (hashing
// a layer's blob), "unpack" (reading it into its directory), "done" (the layer is in place, or
// was already); the layer's digest; bytes of the blob done and its size.
using Progress = std::function<void(std::string_view step, std::string_view digest,
                                    uint64_t done, uint64_t total)>;

class StagedTree;
class Registry;

// On disk, under root (<data_dir>/images):
//   blobs/sha256/<hex>   manifests and configs (JSON), by digest
//   layers/sha256/<hex>  unpacked layers, by diff_id
//   tmp/                 imports in progress (and what a crash left; Collect removes it)
//   pulled/<hex>         a registry's blob verified to unpack to a layer: the layer's diff_id,
//                        named by PulledName(registry, blob digest); a pull reuses a layer
//                        without downloading it only on such a record
// Safe to use from several threads at once.
class Store {
 public:
  // Creates the directories that are missing.
  static Result<std::unique_ptr<Store>> Open(std::string root, StoreLimits limits);

  // Imports the archive in `archive_fd` (a seekable regular file): an OCI image layout tar
  // (oci-layout, index.json, blobs/sha256/...) or a `docker save` tar (manifest.json, the
  // config, layer tars; the newer kind with an OCI layout beside manifest.json too). An index
  // is read for linux/amd64, or its only image. Every blob's digest and size is checked before
  // it is used, every layer's diff_id against the config; layers already in the store are
  // reused. Errors: kInvalidRequest for bad input (naming the blob or the entry),
  // kUnsupportedMediaType, kPayloadTooLarge for a limit (naming it), kInternal for the host.
  Result<Image> ImportArchive(int archive_fd, const Progress& progress);

  // Pulls the image `registry` names (registry.h): its tag's (or digest's) manifest, or the
  // manifest its index picks as ImportArchive does, the config and the layers the store does
  // not have, each checked as an archive's are. Errors as ImportArchive's, and kNotFound (no
  // such image), kBadGateway (the registry failed or answered wrong), kForbidden (the policy
  // refused its address); max_archive_bytes bounds the sum of the layers' sizes.
  Result<Image> Pull(Registry& registry, const Progress& progress);

  // Imports one layer blob (e.g. fetched from a registry into `blob_fd`): checks `digest`,
  // decompresses per `media_type`, checks `diff_id`, unpacks. Reuses the layer if present.
  // `budget`: what is left of the image's max_unpacked_bytes when a caller imports an image
  // layer by layer (NewBudget() once, then the same one for each); nullptr: a budget of its own.
  Result<LayerRef> ImportLayer(int blob_fd, std::string_view media_type, std::string_view digest,
                               std::string_view diff_id, const Progress& progress,
                               Budget* budget = nullptr);
  Budget NewBudget() const {
    return Budget{limits_.max_unpacked_bytes, limits_.max_unpacked_bytes};
  }

  // A layer of the directory tree `dir` (a sandbox's overlay upper directory): its canonical
  // tar (tar.h) names it, and the tree is copied in as that tar would unpack. Overlay whiteouts
  // (char 0:0) and opaque directories (user.overlay.opaque or trusted.overlay.opaque "y") stay
  // what they are; owners shift: host id uid_base + k (k < uid_count) is stored as k, any other
  // as 65534. Sockets are left out; device nodes and names starting ".wh." are refused. The
  // returned digest is the diff_id (the tar is not compressed, and not kept). A sparse file's
  // holes stay holes in the layer, but its full size counts: files of more than
  // `max_file_bytes` in all (the sandbox's disk) are kPayloadTooLarge.
  Result<LayerRef> LayerFromDirectory(const std::string& dir, uint32_t uid_base, uint32_t uid_count,
                                      uint64_t max_file_bytes = UINT64_MAX);

  // The unpacked layer's directory ("" for a malformed diff_id).
  std::string LayerPath(std::string_view diff_id) const;
  bool HasLayer(std::string_view diff_id) const;
  // A stored manifest or config.
  Result<std::string> ReadBlob(std::string_view digest) const;
  // An unnamed file in tmp/ for an archive on its way in (for ImportArchive): gone once closed,
  // whatever happens, and never seen by Collect.
  Result<UniqueFd> NewArchiveFile() const;

  // Removes every layer whose diff_id and every blob whose digest is not in `keep` (and the
  // pull records of the layers removed), and what is left in tmp/ by a crash. An import in flight
  // keeps what it uses; a caller must still not collect between an import's return and the
  // recording of what it returned.
  Result<void> Collect(const std::set<std::string>& keep);

  const StoreLimits& limits() const { return limits_; }

 private:
  friend class StagedTree;
  friend class Import;
  Store(std::string root, StoreLimits limits, UniqueFd blobs, UniqueFd layers, UniqueFd tmp,
        UniqueFd pulled)
      : root_(std::move(root)),
        limits_(limits),
        blobs_(std::move(blobs)),
        layers_(std::move(layers)),
        tmp_(std::move(tmp)),
        pulled_(std::move(pulled)) {}

  // Marks `digest` in use by an import (Collect leaves it) and says whether the layer is there.
  bool PinLayer(const std::string& diff_id);
  void Unpin(const std::string& digest);
  // The name of the record that `registry` served blob `digest`, and the diff_id it holds
  // ("" for none).
  static std::string PulledName(std::string_view registry, std::string_view digest);
  std::string PulledLayer(const std::string& name) const;

  std::string root_;
  StoreLimits limits_;
  UniqueFd blobs_;   // blobs/sha256
  UniqueFd layers_;  // layers/sha256
  UniqueFd tmp_;
  UniqueFd pulled_;  // pulled/
  mutable std::mutex mu_;
  std::multiset<std::string> pinned_;  // diff_ids imports in flight use
  std::set<std::string> staging_;      // names in tmp/ imports in flight own
};

}  // namespace sandstream::image
