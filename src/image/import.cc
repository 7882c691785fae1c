#include "image/import.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>

#include "image/digest.h"
#include "image/tar.h"
#include "image/tree.h"
#include "image/unpack.h"

namespace sandstream::image {

Result<std::unique_ptr<StagedTree>> StagedTree::Make(Store& store, std::string_view what) {
  std::lock_guard lock(store.mu_);
  auto name = MakeRandomDir(store.tmp_.get(), what);
  if (!name) return std::move(name).error();
  UniqueFd fd(::openat(store.tmp_.get(), name->c_str(),
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    ::unlinkat(store.tmp_.get(), name->c_str(), AT_REMOVEDIR);
    return SysError(ErrorCode::kInternal, std::string(what) + ": open staging directory", err);
  }
  store.staging_.insert(*name);
  return std::unique_ptr<StagedTree>(new StagedTree(store, std::move(*name), std::move(fd)));
}

StagedTree::~StagedTree() {
  fd_.reset();
  // Nothing to report to: a tree that cannot go now is left for Collect.
  (void)RemoveTree(store_.tmp_.get(), name_, "tmp/" + name_);
  std::lock_guard lock(store_.mu_);
  store_.staging_.erase(name_);
}

Result<void> StagedTree::Commit(int dir, const std::string& hex, const std::string& entry) {
  const int from = entry.empty() ? store_.tmp_.get() : fd_.get();
  const std::string& name = entry.empty() ? name_ : entry;
  if (::renameat2(from, name.c_str(), dir, hex.c_str(), RENAME_NOREPLACE) == 0) return Ok{};
  if (errno == EEXIST || errno == ENOTEMPTY) return Ok{};
  return SysError(ErrorCode::kInternal, "commit " + hex + ": rename", errno);
}

Import::~Import() {
  for (const auto& pin : pins_) store_.Unpin(pin);
}

Result<std::string> Import::Hash(int fd, uint64_t offset, uint64_t length,
                                 const LayerSpec& spec) {
  const std::string& shown = spec.digest.empty() ? spec.diff_id : spec.digest;
  FileSource file(fd, offset, length, spec.what);
  ProgressSource progress(file, [&](uint64_t done) { Report("verify", shown, done, length); });
  HashingSource hashed(progress);
  if (auto ok = Drain(hashed); !ok) return std::move(ok).error();
  return hashed.Digest();
}

Result<std::string> Import::Unpack(int fd, uint64_t offset, uint64_t length,
                                   const LayerSpec& spec, int root) {
  const std::string& shown = spec.digest.empty() ? spec.diff_id : spec.digest;
  const bool unpack = root >= 0;
  FileSource file(fd, offset, length, spec.what);
  ProgressSource progress(
      file, [&](uint64_t done) { Report(unpack ? "unpack" : "verify", shown, done, length); });
  HashingSource blob(progress);
  auto plain = Decompress(blob, spec.compression, spec.what);
  HashingSource uncompressed(*plain);
  BudgetSource budgeted(uncompressed, budget_, spec.what);
  if (unpack) {
    TarReader tar(budgeted, spec.what);
    const UnpackLimits limits{store_.limits_.max_entries, &budget_};
    if (auto ok = UnpackLayer(tar, root, spec.what, limits); !ok) return std::move(ok).error();
  }
  // The diff_id covers the whole stream, zeros after the end of the archive included.
  if (auto ok = Drain(budgeted); !ok) return std::move(ok).error();
  if (!spec.digest.empty() && blob.Digest() != spec.digest) {
    return Error{ErrorCode::kInvalidRequest, spec.what + ": the blob changed while it was read"};
  }
  if (uncompressed.Digest() != spec.diff_id) {
    return Error{ErrorCode::kInvalidRequest,
                 spec.what + ": diff_id mismatch: the layer unpacks to " +
                     uncompressed.Digest() + ", the image's config says " + spec.diff_id};
  }
  return blob.Digest();
}

Result<std::string> Import::Verify(int fd, uint64_t offset, uint64_t length,
                                   const LayerSpec& spec) {
  return Unpack(fd, offset, length, spec, /*root=*/-1);
}

std::optional<LayerRef> Import::Reuse(const LayerSpec& spec, uint64_t size) {
  if (spec.registry.empty() || spec.digest.empty()) return std::nullopt;
  const std::string name = Store::PulledName(spec.registry, spec.digest);
  const auto here = pulled_.find(name);
  const bool proven = here != pulled_.end() ? here->second == spec.diff_id
                                            : store_.PulledLayer(name) == spec.diff_id;
  if (!proven) return std::nullopt;
  const bool ready = ready_.count(spec.diff_id) != 0;
  if (!ready) pins_.push_back(spec.diff_id);
  if (!ready && !store_.PinLayer(spec.diff_id)) return std::nullopt;
  ready_.insert(spec.diff_id);
  Report("done", spec.digest, size, size);
  return LayerRef{spec.digest, spec.diff_id, size};
}

Result<LayerRef> Import::Layer(int fd, uint64_t offset, uint64_t length, const LayerSpec& spec) {
  LayerRef ref{spec.digest, spec.diff_id, length};
  // The blob is hashed whole before any of it is decompressed: no decompressor ever reads bytes
  // that its digest does not vouch for. Checked even when the layer is stored already: an
  // archive whose blob is not what it names is refused whatever the store holds.
  if (!spec.digest.empty()) {
    auto digest = Hash(fd, offset, length, spec);
    if (!digest) return std::move(digest).error();
    if (*digest != spec.digest) {
      return Error{ErrorCode::kInvalidRequest,
                   spec.what + ": digest mismatch: the blob hashes to " + *digest};
    }
  }
  const bool ready = ready_.count(spec.diff_id) != 0;
  if (!ready) pins_.push_back(spec.diff_id);
  if (ready || store_.PinLayer(spec.diff_id)) {
    // Not unpacked again, but the blob must hold the layer: a config naming a stored diff_id
    // proves nothing (and whether the store has one is then nobody's business either).
    auto digest = Verify(fd, offset, length, spec);
    if (!digest) return std::move(digest).error();
    ref.digest = std::move(*digest);
    ready_.insert(spec.diff_id);
  } else {
    auto staged = StagedTree::Make(store_, spec.what);
    if (!staged) return std::move(staged).error();
    auto digest = Unpack(fd, offset, length, spec, (*staged)->fd());
    if (!digest) return std::move(digest).error();
    ref.digest = std::move(*digest);
    layers_.emplace_back(std::string(DigestHex(spec.diff_id)), std::move(*staged));
    ready_.insert(spec.diff_id);
  }
  if (!spec.registry.empty()) {
    pulled_.insert_or_assign(Store::PulledName(spec.registry, ref.digest), spec.diff_id);
  }
  Report("done", ref.digest, length, length);
  return ref;
}

Result<void> Import::Place(int dir, const std::string& name, const std::string& content,
                           const std::string& what) {
  auto tree = StagedTree::Make(store_, what);
  if (!tree) return std::move(tree).error();
  UniqueFd fd(::openat((*tree)->fd(), "file", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return SysError(ErrorCode::kInternal, what + ": create", errno);
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SysError(ErrorCode::kInternal, what + ": write", errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return SysError(ErrorCode::kInternal, what + ": fsync", errno);
  return (*tree)->Commit(dir, name, "file");
}

Result<void> Import::Commit() {
  if (layers_.empty() && blobs_.empty() && pulled_.empty()) return Ok{};
  // Written through before anything is renamed into place: a crash leaves a layer whole or
  // in tmp/, never a torn one under its name.
  if (::syncfs(store_.tmp_.get()) != 0) return SysError(ErrorCode::kInternal, "syncfs", errno);
  for (const auto& [hex, tree] : layers_) {
    if (auto ok = tree->Commit(store_.layers_.get(), hex); !ok) return ok;
  }
  for (const auto& [digest, content] : blobs_) {
    if (auto ok =
            Place(store_.blobs_.get(), std::string(DigestHex(digest)), content, "blob " + digest);
        !ok) {
      return ok;
    }
  }
  // After the layers they name: a record never names a layer that is not in place.
  for (const auto& [name, diff_id] : pulled_) {
    if (auto ok = Place(store_.pulled_.get(), name, diff_id, "pulled " + diff_id); !ok) return ok;
  }
  return Ok{};
}

namespace {

namespace json = boost::json;

std::string LayerTypeFor(Compression c) {
  switch (c) {
    case Compression::kGzip: return std::string(kOciLayerType) + "+gzip";
    case Compression::kZstd: return std::string(kOciLayerType) + "+zstd";
    case Compression::kNone: break;
  }
  return std::string(kOciLayerType);
}

// The OCI manifest of an image that came without one (an older docker save).
std::string SynthesizeManifest(const std::string& config_digest, uint64_t config_size,
                               const std::vector<LayerRef>& layers,
                               const std::vector<LayerSpec>& specs) {
  json::object m;
  m["schemaVersion"] = 2;
  m["mediaType"] = kOciManifestType;
  m["config"] = {{"mediaType", kOciConfigType}, {"digest", config_digest}, {"size", config_size}};
  json::array list;
  for (size_t i = 0; i < layers.size(); ++i) {
    list.push_back(json::object{{"mediaType", LayerTypeFor(specs[i].compression)},
                                {"digest", layers[i].digest},
                                {"size", layers[i].size}});
  }
  m["layers"] = std::move(list);
  return json::serialize(m);
}

}  // namespace

Result<ResolvedManifest> ReadManifest(const Descriptor& d, std::string text) {
  auto manifest = ParseManifest(text);
  if (!manifest) {
    return Error{manifest.error().code, "manifest " + d.digest + ": " + manifest.error().message};
  }
  return ResolvedManifest{d, d, std::move(text), std::move(*manifest)};
}

Result<ResolvedManifest> FollowIndex(std::string_view index_text, const FetchDocument& fetch) {
  auto picked = PickFromIndex(index_text);
  if (!picked) return std::move(picked).error();
  const Descriptor first = *picked;
  for (int depth = 0; IsIndexType(picked->media_type); ++depth) {
    if (depth == 4) return Error{ErrorCode::kInvalidRequest, "indexes nest too deep"};
    auto text = fetch(*picked, "index");
    if (!text) return std::move(text).error();
    auto next = PickFromIndex(*text);
    if (!next) {
      return Error{next.error().code, "index " + picked->digest + ": " + next.error().message};
    }
    picked = std::move(next);
  }
  if (!IsManifestType(picked->media_type)) {
    return Error{ErrorCode::kInvalidRequest,
                 "the index points at '" + picked->media_type + "', not an image manifest"};
  }
  auto text = fetch(*picked, "manifest");
  if (!text) return std::move(text).error();
  auto resolved = ReadManifest(*picked, std::move(*text));
  if (resolved) resolved->first = first;
  return resolved;
}

Result<Image> AssembleImage(Store& store, Image image, std::string manifest_text,
                            std::string config_text, std::vector<LayerSpec> specs,
                            const LayerSource& layer, const Progress& progress) {
  auto config = ParseConfig(config_text);
  if (!config) {
    return Error{config.error().code, "config " + image.config_digest + ": " +
                                          config.error().message};
  }
  image.config = std::move(config->config);
  if (config->diff_ids.size() != specs.size()) {
    return Error{ErrorCode::kInvalidRequest,
                 "the manifest lists " + std::to_string(specs.size()) + " layers and the config " +
                     std::to_string(config->diff_ids.size()) + " diff_ids"};
  }
  Budget budget = store.NewBudget();
  Import import(store, progress, budget);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].diff_id = config->diff_ids[i];
    if (specs[i].digest.empty()) specs[i].what = "layer " + specs[i].diff_id;
    auto ref = layer(import, i, specs[i]);
    if (!ref) return std::move(ref).error();
    image.layers.push_back(std::move(*ref));
  }
  if (manifest_text.empty()) {
    manifest_text = SynthesizeManifest(image.config_digest, config_text.size(), image.layers,
                                       specs);
    image.manifest_digest = Sha256Of(manifest_text);
  }
  import.Blob(image.manifest_digest, std::move(manifest_text));
  import.Blob(image.config_digest, std::move(config_text));
  if (auto ok = import.Commit(); !ok) return std::move(ok).error();
  return image;
}

}  // namespace sandstream::image
