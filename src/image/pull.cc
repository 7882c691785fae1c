// Store::Pull: an image from a registry. The documents come first (a tag's manifest or index,
// the manifest it picks, the config), each checked against its digest; then each layer the
// store does not have is downloaded to an unnamed file in tmp/ and imported as an archive's
// would be. A layer the store has already is not downloaded only when the same registry
// served the same blob for it before, verified (the store's pulled/ records): a config naming
// a stored diff_id is no proof that its author has the layer. Scoped by registry: one that
// holds the blob serves it only to who may read it, and one that never served it has not
// shown that it has it.
#include "image/import.h"
#include "image/registry.h"
#include "image/store.h"

namespace sandstream::image {

Result<Image> Store::Pull(Registry& registry, const Progress& progress) {
  auto top = registry.Top();
  if (!top) return std::move(top).error();
  const FetchDocument fetch = [&](const Descriptor& d, std::string_view kind) {
    return registry.Fetch(d, kind);
  };
  auto kind = DocumentKindOf(top->content);
  if (!kind) return std::move(kind).error();
  Descriptor named;
  named.media_type = top->media_type;
  named.digest = top->digest;
  named.size = top->content.size();
  auto resolved = *kind == DocumentKind::kIndex ? FollowIndex(top->content, fetch)
                                                : ReadManifest(named, std::move(top->content));
  if (!resolved) return std::move(resolved).error();
  const Manifest& manifest = resolved->manifest;

  uint64_t total = 0;
  for (const auto& layer : manifest.layers) total += layer.size;
  if (total > limits_.max_archive_bytes) {
    return Error{ErrorCode::kPayloadTooLarge,
                 "image " + registry.reference().String() + ": its layers are " +
                     std::to_string(total) + " bytes, more than the limit of " +
                     std::to_string(limits_.max_archive_bytes) + " (max_image_bytes)"};
  }
  auto config = registry.Fetch(manifest.config, "config");
  if (!config) return std::move(config).error();

  Image image;
  image.manifest_digest = resolved->descriptor.digest;
  image.config_digest = manifest.config.digest;
  image.repo_tags = {registry.reference().String()};
  std::vector<LayerSpec> specs;
  for (const auto& layer : manifest.layers) {
    LayerSpec spec;
    spec.digest = layer.digest;
    spec.compression = *LayerCompression(layer.media_type);
    spec.what = "layer " + layer.digest;
    spec.registry = registry.reference().ApiHost();
    specs.push_back(std::move(spec));
  }
  const LayerSource layer = [&](Import& import, size_t i,
                                const LayerSpec& spec) -> Result<LayerRef> {
    const Descriptor& d = manifest.layers[i];
    if (auto reused = import.Reuse(spec, d.size)) return *reused;
    auto file = NewArchiveFile();
    if (!file) return std::move(file).error();
    uint64_t reported = 0;
    auto report = [&](uint64_t done) {
      if (!progress || (done - reported < kProgressStep && done != d.size)) return;
      progress("download", d.digest, done, d.size);
      reported = done;
    };
    if (auto ok = registry.Download(d, file->get(), report); !ok) return std::move(ok).error();
    return import.Layer(file->get(), 0, d.size, spec);
  };
  return AssembleImage(*this, std::move(image), std::move(resolved->text), std::move(*config),
                       std::move(specs), layer, progress);
}

}  // namespace sandstream::image
