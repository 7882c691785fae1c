// The JSON documents of OCI and Docker images: an index (a manifest list), a manifest, an image
// config. Strict: a field of the wrong type is an error naming the document and the field, never
// a guess. Shared by the archive import and the registry client.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "image/stream.h"

namespace sandstream::image {

inline constexpr std::string_view kOciIndexType = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciManifestType = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kDockerManifestListType =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerManifestType =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view kOciConfigType = "application/vnd.oci.image.config.v1+json";
inline constexpr std::string_view kOciLayerType = "application/vnd.oci.image.layer.v1.tar";

// index.json, manifest.json, an index, a manifest, a config: at most this big.
inline constexpr size_t kMaxDocumentBytes = 4 << 20;

struct Platform {
  std::string os;  // "" when the descriptor has none
  std::string architecture;
  std::string variant;
};

struct Descriptor {
  std::string media_type;
  std::string digest;  // "sha256:<hex>"
  uint64_t size = 0;
  Platform platform;  // in an index
  std::map<std::string, std::string> annotations;
};

struct Manifest {
  std::string media_type;  // as the document says ("" when it says nothing)
  Descriptor config;
  std::vector<Descriptor> layers;  // bottom first; media types ones LayerCompression knows
};

// The parts of an image's config that a sandbox runs with (its "config" object).
struct ImageConfig {
  std::vector<std::string> env;  // "K=V"
  std::string working_dir;
  std::string user;  // as written: "1000", "app", "1000:1000", ""
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
};

struct ConfigDocument {
  ImageConfig config;
  std::vector<std::string> diff_ids;  // rootfs.diff_ids, bottom first
};

enum class DocumentKind { kIndex, kManifest };

// An index or a manifest, by its mediaType, or without one by whether it lists "manifests".
Result<DocumentKind> DocumentKindOf(std::string_view json);
// The manifest an index picks: the only image it lists, or the one for linux/amd64. Attestation
// manifests (platform unknown/unknown, or a vnd.docker.reference.type annotation) do not count.
// The result may be an index itself (its media type says so).
Result<Descriptor> PickFromIndex(std::string_view json);
Result<Manifest> ParseManifest(std::string_view json);
Result<ConfigDocument> ParseConfig(std::string_view json);
// How a layer of `media_type` is compressed; an unknown type is kUnsupportedMediaType.
Result<Compression> LayerCompression(std::string_view media_type);
bool IsIndexType(std::string_view media_type);
bool IsManifestType(std::string_view media_type);

}  // namespace sandstream::image
