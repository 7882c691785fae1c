// Inside the store (not for the daemon): a directory staged in tmp/ that goes away unless
// committed, an import as one transaction of layers and blobs, committed only whole, and the
// steps an archive's import and a registry's pull share (an index followed to its manifest,
// the config and layers assembled into an image).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "image/manifest.h"
#include "image/store.h"

namespace sandstream::image {

class StagedTree {
 public:
  static Result<std::unique_ptr<StagedTree>> Make(Store& store, std::string_view what);
  ~StagedTree();
  StagedTree(const StagedTree&) = delete;
  StagedTree& operator=(const StagedTree&) = delete;

  int fd() const { return fd_.get(); }
  // Renames the tree (or, with `entry`, that entry of it) to `hex` in `dir`. One already there
  // (another import's, of the same content) is kept and ours goes.
  Result<void> Commit(int dir, const std::string& hex, const std::string& entry = "");

 private:
  StagedTree(Store& store, std::string name, UniqueFd fd)
      : store_(store), name_(std::move(name)), fd_(std::move(fd)) {}
  Store& store_;
  std::string name_;
  UniqueFd fd_;
};

// What a layer blob is, as far as the import knows before reading it.
struct LayerSpec {
  std::string digest;  // of the blob; "" when nothing names it (a docker save's layer.tar)
  std::string diff_id;
  Compression compression = Compression::kNone;
  std::string what;      // how errors name the layer: "layer sha256:..."
  std::string registry;  // the registry (API host) a pull downloads it from; "" in an archive
};

class Import {
 public:
  Import(Store& store, const Progress& progress, Budget& budget)
      : store_(store), progress_(progress), budget_(budget) {}
  ~Import();
  Import(const Import&) = delete;
  Import& operator=(const Import&) = delete;

  // The layer `spec` names, pinned for the import, when the store (or this import) has it and
  // its registry served this blob for it before, verified (a pull's records, Commit writes
  // them); nullopt when the blob must be fetched and read. A config that names a stored
  // diff_id proves nothing: whoever knows a layer's diff_id must not get it this way.
  std::optional<LayerRef> Reuse(const LayerSpec& spec, uint64_t size);
  // Makes ready the layer whose blob is `length` bytes of `fd` at `offset`: checked, then
  // unpacked into tmp/. When the store or this import has it already it is not unpacked again,
  // but the blob is still decompressed and hashed against the diff_id (an importer must hold
  // the layer's content to get it).
  Result<LayerRef> Layer(int fd, uint64_t offset, uint64_t length, const LayerSpec& spec);
  // A manifest or config to store with the layers.
  void Blob(std::string digest, std::string content) {
    blobs_.emplace_back(std::move(digest), std::move(content));
  }
  // Moves every staged layer and blob into place.
  Result<void> Commit();

 private:
  void Report(std::string_view step, std::string_view digest, uint64_t done, uint64_t total) {
    if (progress_) progress_(step, digest, done, total);
  }
  Result<std::string> Hash(int fd, uint64_t offset, uint64_t length, const LayerSpec& spec);
  // The blob's digest, once its decompressed stream is unpacked into `root` (below 0: only
  // read) and found to hash to spec.diff_id.
  Result<std::string> Unpack(int fd, uint64_t offset, uint64_t length, const LayerSpec& spec,
                             int root);
  // Unpack without a root: for a layer already stored.
  Result<std::string> Verify(int fd, uint64_t offset, uint64_t length, const LayerSpec& spec);
  // A file of `content` staged, then renamed to `name` in `dir`.
  Result<void> Place(int dir, const std::string& name, const std::string& content,
                     const std::string& what);

  Store& store_;
  const Progress& progress_;
  Budget& budget_;
  std::vector<std::string> pins_;
  std::set<std::string> ready_;  // diff_ids in the store or staged
  std::vector<std::pair<std::string, std::unique_ptr<StagedTree>>> layers_;  // hex, tree
  std::vector<std::pair<std::string, std::string>> blobs_;                   // digest, content
  std::map<std::string, std::string> pulled_;  // record name -> diff_id, verified here
};

// An image's documents, wherever they come from (an archive, a registry): the blob `d` names,
// checked against its size and digest. `kind` names it in errors ("index", "manifest").
using FetchDocument =
    std::function<Result<std::string>(const Descriptor& d, std::string_view kind)>;

struct ResolvedManifest {
  Descriptor first;       // what the top index picked (its annotations may name the image)
  Descriptor descriptor;  // the manifest's
  std::string text;
  Manifest manifest;
};

// The image manifest the index `index_text` picks (linux/amd64, or its only image), indexes it
// points at followed (at most 4 deep).
Result<ResolvedManifest> FollowIndex(std::string_view index_text, const FetchDocument& fetch);
// The manifest `d` names, read from `text` (errors name its digest).
Result<ResolvedManifest> ReadManifest(const Descriptor& d, std::string text);

// Obtains layer `i` of an image (one of `spec`) into `import`: Import::Layer on its blob.
using LayerSource = std::function<Result<LayerRef>(Import& import, size_t i,
                                                   const LayerSpec& spec)>;

// The rest of an import once an image's manifest (`manifest_text`, "" when the image came with
// none: one is written for it) and config are read: the config parsed into `image`, each layer
// of `specs` (their diff_ids filled from the config, which must list as many) obtained by
// `layer`, and everything committed to the store at once.
Result<Image> AssembleImage(Store& store, Image image, std::string manifest_text,
                            std::string config_text, std::vector<LayerSpec> specs,
                            const LayerSource& layer, const Progress& progress);

}  // namespace sandstream::image
