#include "image/manifest.h"

#include <boost/json.hpp>

#include "image/digest.h"

namespace sandstream::image {
namespace {

namespace json = boost::json;

Error Bad(std::string_view at, std::string_view why) {
  return Error{ErrorCode::kInvalidRequest, std::string(at) + ": " + std::string(why)};
}

Result<json::object> ParseObject(std::string_view text, std::string_view doc) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return Bad(doc, "not valid JSON (" + ec.message() + ")");
  if (!v.is_object()) return Bad(doc, "not a JSON object");
  return std::move(v.as_object());
}

std::string At(std::string_view at, std::string_view key) {
  return std::string(at) + "." + std::string(key);
}

// A string member; missing or null is "" unless `required`.
Result<std::string> String(const json::object& o, std::string_view key, std::string_view at,
                           bool required) {
  const json::value* v = o.if_contains(json::string_view(key.data(), key.size()));
  if (!v || v->is_null()) {
    if (required) return Bad(At(at, key), "missing");
    return std::string();
  }
  if (!v->is_string()) return Bad(At(at, key), "must be a string");
  return std::string(v->as_string());
}

// An array of strings; missing or null is empty.
Result<std::vector<std::string>> Strings(const json::object& o, std::string_view key,
                                         std::string_view at) {
  std::vector<std::string> out;
  const json::value* v = o.if_contains(json::string_view(key.data(), key.size()));
  if (!v || v->is_null()) return out;
  if (!v->is_array()) return Bad(At(at, key), "must be an array of strings");
  for (const auto& item : v->as_array()) {
    if (!item.is_string()) return Bad(At(at, key), "must be an array of strings");
    out.emplace_back(item.as_string());
  }
  return out;
}

Result<void> CheckSchemaVersion(const json::object& o, std::string_view doc) {
  const json::value* v = o.if_contains("schemaVersion");
  if (!v || !v->is_int64() || v->as_int64() != 2) {
    return Bad(At(doc, "schemaVersion"), "must be the number 2");
  }
  return Ok{};
}

Result<Descriptor> ParseDescriptor(const json::value& v, const std::string& at) {
  if (!v.is_object()) return Bad(at, "must be an object");
  const json::object& o = v.as_object();
  Descriptor d;
  auto media = String(o, "mediaType", at, true);
  if (!media) return std::move(media).error();
  d.media_type = std::move(*media);
  auto digest = String(o, "digest", at, true);
  if (!digest) return std::move(digest).error();
  if (!ValidDigest(*digest)) return Bad(At(at, "digest"), "not a sha256 digest");
  d.digest = std::move(*digest);
  const json::value* size = o.if_contains("size");
  if (!size || !(size->is_int64() || size->is_uint64()) ||
      (size->is_int64() && size->as_int64() < 0)) {
    return Bad(At(at, "size"), "must be a whole number of bytes");
  }
  d.size = size->is_int64() ? static_cast<uint64_t>(size->as_int64()) : size->as_uint64();
  if (const json::value* p = o.if_contains("platform"); p && !p->is_null()) {
    if (!p->is_object()) return Bad(At(at, "platform"), "must be an object");
    const std::string pat = At(at, "platform");
    for (auto [key, field] : {std::pair{"os", &d.platform.os},
                              std::pair{"architecture", &d.platform.architecture},
                              std::pair{"variant", &d.platform.variant}}) {
      auto s = String(p->as_object(), key, pat, false);
      if (!s) return std::move(s).error();
      *field = std::move(*s);
    }
  }
  if (const json::value* a = o.if_contains("annotations"); a && !a->is_null()) {
    if (!a->is_object()) return Bad(At(at, "annotations"), "must be an object of strings");
    for (const auto& [key, value] : a->as_object()) {
      if (!value.is_string()) return Bad(At(at, "annotations"), "must be an object of strings");
      d.annotations.emplace(std::string(key), std::string(value.as_string()));
    }
  }
  return d;
}

std::string PlatformName(const Platform& p) {
  if (p.os.empty()) return "(no platform)";
  return p.os + "/" + p.architecture + (p.variant.empty() ? "" : "/" + p.variant);
}

}  // namespace

bool IsIndexType(std::string_view media_type) {
  return media_type == kOciIndexType || media_type == kDockerManifestListType;
}

bool IsManifestType(std::string_view media_type) {
  return media_type == kOciManifestType || media_type == kDockerManifestType;
}

Result<Compression> LayerCompression(std::string_view media_type) {
  static constexpr std::pair<std::string_view, Compression> kTypes[] = {
      {"application/vnd.oci.image.layer.v1.tar", Compression::kNone},
      {"application/vnd.oci.image.layer.v1.tar+gzip", Compression::kGzip},
      {"application/vnd.oci.image.layer.v1.tar+zstd", Compression::kZstd},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar", Compression::kNone},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", Compression::kGzip},
      {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", Compression::kZstd},
      {"application/vnd.docker.image.rootfs.diff.tar", Compression::kNone},
      {"application/vnd.docker.image.rootfs.diff.tar.gzip", Compression::kGzip},
      {"application/vnd.docker.image.rootfs.diff.tar.zstd", Compression::kZstd},
  };
  for (const auto& [type, c] : kTypes) {
    if (type == media_type) return c;
  }
  return Error{ErrorCode::kUnsupportedMediaType,
               "layer media type '" + std::string(media_type) + "' is not supported"};
}

Result<DocumentKind> DocumentKindOf(std::string_view text) {
  auto o = ParseObject(text, "manifest");
  if (!o) return std::move(o).error();
  auto media = String(*o, "mediaType", "manifest", false);
  if (!media) return std::move(media).error();
  if (IsIndexType(*media)) return DocumentKind::kIndex;
  if (IsManifestType(*media)) return DocumentKind::kManifest;
  if (!media->empty()) {
    return Error{ErrorCode::kUnsupportedMediaType,
                 "manifest: media type '" + *media + "' is not an image index or manifest"};
  }
  return o->contains("manifests") ? DocumentKind::kIndex : DocumentKind::kManifest;
}

Result<Descriptor> PickFromIndex(std::string_view text) {
  auto parsed = ParseObject(text, "index");
  if (!parsed) return std::move(parsed).error();
  const json::object& o = *parsed;
  if (auto ok = CheckSchemaVersion(o, "index"); !ok) return std::move(ok).error();
  auto media = String(o, "mediaType", "index", false);
  if (!media) return std::move(media).error();
  if (!media->empty() && !IsIndexType(*media)) {
    return Bad("index.mediaType", "'" + *media + "' is not an image index");
  }
  const json::value* list = o.if_contains("manifests");
  if (!list || !list->is_array()) return Bad("index.manifests", "must be an array");
  std::vector<Descriptor> images;
  for (size_t i = 0; i < list->as_array().size(); ++i) {
    auto d = ParseDescriptor(list->as_array()[i], "index.manifests[" + std::to_string(i) + "]");
    if (!d) return std::move(d).error();
    const bool attestation = d->platform.os == "unknown" ||
                             d->annotations.count("vnd.docker.reference.type") != 0;
    if (attestation || !(IsManifestType(d->media_type) || IsIndexType(d->media_type))) continue;
    images.push_back(std::move(*d));
  }
  if (images.empty()) return Bad("index", "lists no image manifest");
  if (images.size() == 1) return std::move(images.front());
  for (auto& d : images) {
    if (d.platform.os == "linux" && d.platform.architecture == "amd64") return std::move(d);
  }
  std::string listed;
  for (const auto& d : images) listed += (listed.empty() ? "" : ", ") + PlatformName(d.platform);
  return Bad("index", "lists " + std::to_string(images.size()) +
                          " images and none for linux/amd64 (" + listed + ")");
}

Result<Manifest> ParseManifest(std::string_view text) {
  auto parsed = ParseObject(text, "manifest");
  if (!parsed) return std::move(parsed).error();
  const json::object& o = *parsed;
  if (auto ok = CheckSchemaVersion(o, "manifest"); !ok) return std::move(ok).error();
  Manifest m;
  auto media = String(o, "mediaType", "manifest", false);
  if (!media) return std::move(media).error();
  if (!media->empty() && !IsManifestType(*media)) {
    return Bad("manifest.mediaType", "'" + *media + "' is not an image manifest");
  }
  m.media_type = std::move(*media);
  const json::value* config = o.if_contains("config");
  if (!config) return Bad("manifest.config", "missing");
  auto c = ParseDescriptor(*config, "manifest.config");
  if (!c) return std::move(c).error();
  m.config = std::move(*c);
  const json::value* layers = o.if_contains("layers");
  if (!layers || !layers->is_array()) return Bad("manifest.layers", "must be an array");
  for (size_t i = 0; i < layers->as_array().size(); ++i) {
    const std::string at = "manifest.layers[" + std::to_string(i) + "]";
    auto d = ParseDescriptor(layers->as_array()[i], at);
    if (!d) return std::move(d).error();
    if (auto known = LayerCompression(d->media_type); !known) {
      return Error{known.error().code, at + ": " + known.error().message};
    }
    m.layers.push_back(std::move(*d));
  }
  return m;
}

Result<ConfigDocument> ParseConfig(std::string_view text) {
  auto parsed = ParseObject(text, "config");
  if (!parsed) return std::move(parsed).error();
  const json::object& o = *parsed;
  ConfigDocument doc;
  const json::value* rootfs = o.if_contains("rootfs");
  if (!rootfs || !rootfs->is_object()) return Bad("config.rootfs", "must be an object");
  auto type = String(rootfs->as_object(), "type", "config.rootfs", true);
  if (!type) return std::move(type).error();
  if (*type != "layers") return Bad("config.rootfs.type", "must be \"layers\"");
  const json::value* ids = rootfs->as_object().if_contains("diff_ids");
  if (!ids || !ids->is_array()) return Bad("config.rootfs.diff_ids", "must be an array");
  auto diff_ids = Strings(rootfs->as_object(), "diff_ids", "config.rootfs");
  if (!diff_ids) return std::move(diff_ids).error();
  for (const auto& id : *diff_ids) {
    if (!ValidDigest(id)) {
      return Bad("config.rootfs.diff_ids", "'" + id + "' is not a sha256 digest");
    }
  }
  doc.diff_ids = std::move(*diff_ids);

  const json::value* c = o.if_contains("config");
  if (!c || c->is_null()) return doc;
  if (!c->is_object()) return Bad("config.config", "must be an object");
  const json::object& cfg = c->as_object();
  ImageConfig& out = doc.config;
  for (auto [key, field] : {std::pair{"Env", &out.env}, std::pair{"Entrypoint", &out.entrypoint},
                            std::pair{"Cmd", &out.cmd}}) {
    auto list = Strings(cfg, key, "config.config");
    if (!list) return std::move(list).error();
    *field = std::move(*list);
  }
  for (auto [key, field] :
       {std::pair{"WorkingDir", &out.working_dir}, std::pair{"User", &out.user}}) {
    auto s = String(cfg, key, "config.config", false);
    if (!s) return std::move(s).error();
    *field = std::move(*s);
  }
  return doc;
}

}  // namespace sandstream::image
