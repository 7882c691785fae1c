// Store::ImportArchive: an OCI image layout or a `docker save` tar, read in place. The archive is
// listed once (names, data offsets, sizes); documents and layers are then read from their
// offsets, each checked against its digest before it is used.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <map>

#include "image/digest.h"
#include "image/import.h"
#include "image/store.h"
#include "image/tar.h"

namespace sandstream::image {
namespace {

namespace json = boost::json;

// Links followed from one name, at most (docker save links a layer repeated in two images).
constexpr int kMaxLinkHops = 8;

Error Bad(std::string why) { return Error{ErrorCode::kInvalidRequest, "archive: " + why}; }

struct Member {
  EntryType type = EntryType::kFile;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string link;  // hard link or symlink: the name it stands for (normalized)
};

// `target` of a symlink in directory `dir`, within the archive's names ("" if it leaves them).
std::string JoinInArchive(std::string_view dir, std::string_view target) {
  std::vector<std::string> parts;
  std::string path = target.substr(0, 1) == "/" ? std::string(target)
                                                : std::string(dir) + "/" + std::string(target);
  size_t at = 0;
  while (at <= path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    const std::string part = path.substr(at, slash - at);
    at = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (parts.empty()) return "";
      parts.pop_back();
    } else {
      parts.push_back(part);
    }
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

class Archive {
 public:
  Archive(int fd, uint64_t size) : fd_(fd), size_(size) {}

  Result<void> List(uint64_t max_entries) {
    FileSource in(fd_, 0, size_, "archive");
    TarReader tar(in, "archive");
    uint64_t count = 0;
    for (;;) {
      auto entry = tar.Next();
      if (!entry) return std::move(entry).error();
      if (!*entry) return Ok{};
      const TarEntry& e = **entry;
      if (++count > max_entries) {
        return Error{ErrorCode::kPayloadTooLarge,
                     "archive: more than " + std::to_string(max_entries) +
                         " entries (max_entries)"};
      }
      auto name = NormalizeEntryName(e.name);
      if (!name) return Bad("entry " + Quote(e.name) + ": " + name.error().message);
      Member m{e.type, tar.position(), e.size, ""};
      if (e.type == EntryType::kHardlink) {
        auto target = NormalizeEntryName(e.linkname);
        if (!target) return Bad("entry " + Quote(e.name) + ": " + target.error().message);
        m.link = std::move(*target);
      } else if (e.type == EntryType::kSymlink) {
        const size_t slash = name->rfind('/');
        m.link = JoinInArchive(slash == std::string::npos ? "" : name->substr(0, slash),
                               e.linkname);
      } else if (e.type != EntryType::kFile) {
        continue;
      }
      members_[*name] = std::move(m);
    }
  }

  bool Has(const std::string& name) const { return members_.count(name) != 0; }

  // The file `name` stands for, links followed.
  Result<Member> Find(const std::string& name) const {
    // Named as manifest.json spells it ("./abc.json" too): looked up as entries are listed.
    auto normalized = NormalizeEntryName(name);
    if (!normalized) return Bad(Quote(name) + ": " + normalized.error().message);
    std::string at = std::move(*normalized);
    for (int hop = 0; hop <= kMaxLinkHops; ++hop) {
      auto it = members_.find(at);
      if (it == members_.end()) return Bad(Quote(name) + " is missing");
      if (it->second.type == EntryType::kFile) return it->second;
      at = it->second.link;
    }
    return Bad(Quote(name) + ": too many links");
  }

  // A whole member, up to kMaxDocumentBytes.
  Result<std::string> Read(const std::string& name) const {
    auto m = Find(name);
    if (!m) return std::move(m).error();
    if (m->size > kMaxDocumentBytes) {
      return Bad(Quote(name) + " is larger than " + std::to_string(kMaxDocumentBytes) + " bytes");
    }
    FileSource in(fd_, m->offset, m->size, "archive: " + name);
    return ReadAll(in, kMaxDocumentBytes, "archive: " + name);
  }

  // The blob `d` names, checked against its size and digest.
  Result<std::string> ReadBlob(const Descriptor& d, std::string_view kind) const {
    const std::string name = "blobs/sha256/" + std::string(DigestHex(d.digest));
    const std::string what = std::string(kind) + " " + d.digest;
    auto m = Find(name);
    if (!m) return Error{ErrorCode::kInvalidRequest, what + ": the archive has no blob for it"};
    if (m->size != d.size) {
      return Error{ErrorCode::kInvalidRequest, what + ": size mismatch: the blob has " +
                                                   std::to_string(m->size) + " bytes, " +
                                                   std::to_string(d.size) + " expected"};
    }
    auto text = Read(name);
    if (!text) return text;
    if (const std::string got = Sha256Of(*text); got != d.digest) {
      return Error{ErrorCode::kInvalidRequest,
                   what + ": digest mismatch: the blob hashes to " + got};
    }
    return text;
  }

  // The first bytes of a member, to sniff its compression.
  Result<std::string> Head(const Member& m) const {
    std::string head(static_cast<size_t>(std::min<uint64_t>(m.size, 4)), '\0');
    FileSource in(fd_, m.offset, m.size, "archive");
    if (auto ok = ReadFull(in, head.data(), head.size(), "archive"); !ok) {
      return std::move(ok).error();
    }
    return head;
  }

  int fd() const { return fd_; }

 private:
  int fd_;
  uint64_t size_;
  std::map<std::string, Member> members_;
};

// What docker save's manifest.json says of its one image.
struct DockerImage {
  std::string config;  // member names
  std::vector<std::string> layers;
  std::vector<std::string> repo_tags;
};

Result<std::vector<DockerImage>> ParseDockerManifest(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return Bad("manifest.json: not valid JSON (" + ec.message() + ")");
  if (!v.is_array()) return Bad("manifest.json: must be an array");
  std::vector<DockerImage> images;
  for (const auto& item : v.as_array()) {
    const std::string at = "manifest.json[" + std::to_string(images.size()) + "]";
    if (!item.is_object()) return Bad(at + ": must be an object");
    const json::object& o = item.as_object();
    DockerImage image;
    const json::value* config = o.if_contains("Config");
    if (!config || !config->is_string()) return Bad(at + ".Config: must be a string");
    image.config = std::string(config->as_string());
    for (auto [key, out, required] : {std::tuple{"Layers", &image.layers, true},
                                      std::tuple{"RepoTags", &image.repo_tags, false}}) {
      const json::value* list = o.if_contains(key);
      if (!list || list->is_null()) {
        if (required) return Bad(at + "." + key + ": must be an array of strings");
        continue;
      }
      if (!list->is_array()) return Bad(at + "." + key + ": must be an array of strings");
      for (const auto& s : list->as_array()) {
        if (!s.is_string()) return Bad(at + "." + key + ": must be an array of strings");
        out->emplace_back(s.as_string());
      }
    }
    images.push_back(std::move(image));
  }
  return images;
}

}  // namespace

Result<Image> Store::ImportArchive(int archive_fd, const Progress& progress) {
  struct stat st{};
  if (::fstat(archive_fd, &st) != 0) return SysError(ErrorCode::kInternal, "archive: stat", errno);
  if (!S_ISREG(st.st_mode)) return Error{ErrorCode::kInternal, "archive: not a regular file"};
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > limits_.max_archive_bytes) {
    return Error{ErrorCode::kPayloadTooLarge,
                 "archive: " + std::to_string(size) + " bytes, more than the limit of " +
                     std::to_string(limits_.max_archive_bytes) + " (max_archive_bytes)"};
  }
  Archive archive(archive_fd, size);
  if (auto ok = archive.List(limits_.max_entries); !ok) return std::move(ok).error();

  Image image;
  std::vector<LayerSpec> specs;
  std::vector<std::string> members;  // of each layer
  std::string config_text;
  std::string manifest_text;  // as the archive has it; "" for an older docker save
  const bool oci = archive.Has("index.json");
  std::vector<DockerImage> docker;
  if (archive.Has("manifest.json")) {
    auto text = archive.Read("manifest.json");
    if (!text) return std::move(text).error();
    auto parsed = ParseDockerManifest(*text);
    if (!parsed) return std::move(parsed).error();
    docker = std::move(*parsed);
    if (!oci && docker.size() != 1) {
      return Bad("manifest.json lists " + std::to_string(docker.size()) +
                 " images: import one at a time");
    }
  } else if (!oci) {
    return Bad("neither an OCI image layout (index.json) nor a docker save (manifest.json)");
  }

  if (oci) {
    auto index = archive.Read("index.json");
    if (!index) return std::move(index).error();
    auto resolved = FollowIndex(*index, [&](const Descriptor& d, std::string_view kind) {
      return archive.ReadBlob(d, kind);
    });
    if (!resolved) return Error{resolved.error().code, "archive: " + resolved.error().message};
    manifest_text = std::move(resolved->text);
    const Manifest& manifest = resolved->manifest;
    const Descriptor& top = resolved->first;
    auto config = archive.ReadBlob(manifest.config, "config");
    if (!config) return std::move(config).error();
    config_text = std::move(*config);
    image.manifest_digest = resolved->descriptor.digest;
    image.config_digest = manifest.config.digest;
    for (const auto& layer : manifest.layers) {
      LayerSpec spec;
      spec.digest = layer.digest;
      spec.compression = *LayerCompression(layer.media_type);
      spec.what = "layer " + layer.digest;
      auto m = archive.Find("blobs/sha256/" + std::string(DigestHex(layer.digest)));
      if (!m) {
        return Error{ErrorCode::kInvalidRequest, spec.what + ": the archive has no blob for it"};
      }
      if (m->size != layer.size) {
        return Error{ErrorCode::kInvalidRequest,
                     spec.what + ": size mismatch: the blob has " + std::to_string(m->size) +
                         " bytes, " + std::to_string(layer.size) + " expected"};
      }
      specs.push_back(std::move(spec));
      members.push_back("blobs/sha256/" + std::string(DigestHex(layer.digest)));
    }
    const std::string config_member =
        "blobs/sha256/" + std::string(DigestHex(image.config_digest));
    for (const auto& d : docker) {
      auto config_name = NormalizeEntryName(d.config);
      if (config_name && *config_name == config_member) {
        image.repo_tags = d.repo_tags;
      }
    }
    if (image.repo_tags.empty()) {
      for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"}) {
        if (auto it = top.annotations.find(key); it != top.annotations.end()) {
          image.repo_tags.push_back(it->second);
          break;
        }
      }
    }
  } else {
    const DockerImage& d = docker.front();
    auto config = archive.Read(d.config);
    if (!config) return std::move(config).error();
    config_text = std::move(*config);
    image.config_digest = Sha256Of(config_text);
    image.repo_tags = d.repo_tags;
    for (const auto& path : d.layers) {
      auto m = archive.Find(path);
      if (!m) return std::move(m).error();
      auto head = archive.Head(*m);
      if (!head) return std::move(head).error();
      LayerSpec spec;
      spec.compression = SniffCompression(*head);
      // The newer docker save names layers by digest (blobs/sha256/<hex>); the older by an id.
      const std::string prefix = "blobs/sha256/";
      if (path.rfind(prefix, 0) == 0 && ValidDigest("sha256:" + path.substr(prefix.size()))) {
        spec.digest = "sha256:" + path.substr(prefix.size());
      }
      spec.what = "layer " + spec.digest;
      specs.push_back(std::move(spec));
      members.push_back(path);
    }
  }

  const LayerSource layer = [&](Import& import, size_t i, const LayerSpec& spec) {
    auto m = archive.Find(members[i]);
    if (!m) return Result<LayerRef>(std::move(m).error());
    return import.Layer(archive_fd, m->offset, m->size, spec);
  };
  return AssembleImage(*this, std::move(image), std::move(manifest_text), std::move(config_text),
                       std::move(specs), layer, progress);
}

}  // namespace sandstream::image
