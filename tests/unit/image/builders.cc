#include "builders.h"

#include <zlib.h>
#include <zstd.h>

#include <boost/json.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "image/digest.h"

namespace sandstream::image::test {
namespace {

namespace json = boost::json;

void Octal(std::string& block, size_t at, size_t len, uint64_t value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llo", static_cast<int>(len - 1),
                static_cast<unsigned long long>(value));
  std::memcpy(&block[at], buf, len - 1);
}

void Put(std::string& block, size_t at, size_t len, const std::string& s) {
  std::memcpy(&block[at], s.data(), std::min(len, s.size()));
}

std::string PaxRecords(const std::map<std::string, std::string>& pax) {
  std::string out;
  for (const auto& [k, v] : pax) {
    const size_t body = k.size() + v.size() + 3;
    size_t len = body + 1;
    while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
    out += std::to_string(len) + " " + k + "=" + v + "\n";
  }
  return out;
}

}  // namespace

Result<size_t> StringSource::Read(char* buf, size_t size) {
  const size_t n = std::min({size, data_.size() - at_, chunk_});
  std::memcpy(buf, data_.data() + at_, n);
  at_ += n;
  return n;
}

std::string Pad(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}

std::string Tar::Header(const Entry& e, uint64_t size, const std::string& prefix, bool gnu) {
  std::string b(512, '\0');
  Put(b, 0, 100, e.name);
  Octal(b, 100, 8, e.mode);
  Octal(b, 108, 8, e.uid);
  Octal(b, 116, 8, e.gid);
  Octal(b, 124, 12, size);
  Octal(b, 136, 12, static_cast<uint64_t>(e.mtime));
  b[156] = e.type;
  Put(b, 157, 100, e.linkname);
  std::memcpy(&b[257], gnu ? "ustar  \0" : "ustar\0" "00", 8);
  Octal(b, 329, 8, e.major);
  Octal(b, 337, 8, e.minor);
  Put(b, 345, 155, prefix);
  Reseal(b);
  return b;
}

void Tar::Reseal(std::string& header) {
  std::memset(&header[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : header) sum += c;
  char chk[8];
  std::snprintf(chk, sizeof chk, "%06o", sum);
  std::memcpy(&header[148], chk, 7);
}

Tar& Tar::Add(Entry e) {
  if (!e.pax.empty()) {
    const std::string records = PaxRecords(e.pax);
    Entry x;
    x.name = "PaxHeaders/" + e.name.substr(0, 80);
    x.type = 'x';
    out_ += Header(x, records.size()) + Pad(records);
  }
  if (e.gnu_long) {
    for (auto [type, value] : {std::pair{'L', &e.name}, std::pair{'K', &e.linkname}}) {
      if (value->empty()) continue;
      Entry l;
      l.name = "././@LongLink";
      l.type = type;
      out_ += Header(l, value->size() + 1, "", true) + Pad(*value + '\0');
    }
  }
  const uint64_t size = e.data.size();
  out_ += Header(e, size, "", e.gnu_long) + Pad(e.data);
  return *this;
}

Tar& Tar::File(const std::string& name, const std::string& data, uint32_t mode, uint32_t uid,
               uint32_t gid) {
  return Add(Entry(name).Data(data).Mode(mode).Uid(uid).Gid(gid));
}

Tar& Tar::Dir(const std::string& name, uint32_t mode, uint32_t uid, uint32_t gid) {
  return Add(Entry(name).Type('5').Mode(mode).Uid(uid).Gid(gid));
}

Tar& Tar::Symlink(const std::string& name, const std::string& target) {
  return Add(Entry(name).Type('2').Link(target).Mode(0777));
}

Tar& Tar::Hardlink(const std::string& name, const std::string& target) {
  return Add(Entry(name).Type('1').Link(target));
}

Tar& Tar::Raw(const std::string& bytes) {
  out_ += bytes;
  return *this;
}

std::string Tar::Finish() const { return out_ + std::string(1024, '\0'); }

std::string Gzip(const std::string& data) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2");
  }
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Zstd(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error("ZSTD_compress");
  out.resize(n);
  return out;
}

Layer MakeLayer(const std::string& tar, Compression compression) {
  Layer l;
  l.tar = tar;
  l.compression = compression;
  l.diff_id = Sha256Of(tar);
  switch (compression) {
    case Compression::kNone:
      l.blob = tar;
      l.media_type = "application/vnd.oci.image.layer.v1.tar";
      break;
    case Compression::kGzip:
      l.blob = Gzip(tar);
      l.media_type = "application/vnd.oci.image.layer.v1.tar+gzip";
      break;
    case Compression::kZstd:
      l.blob = Zstd(tar);
      l.media_type = "application/vnd.oci.image.layer.v1.tar+zstd";
      break;
  }
  l.digest = Sha256Of(l.blob);
  return l;
}

std::string ConfigJson(const std::vector<std::string>& diff_ids) {
  json::array ids;
  for (const auto& id : diff_ids) ids.emplace_back(id);
  json::object config{
      {"architecture", "amd64"},
      {"os", "linux"},
      {"config",
       {{"Env", json::array{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}},
        {"WorkingDir", "/app"},
        {"User", "1000:1000"},
        {"Entrypoint", json::array{"/bin/sh", "-c"}},
        {"Cmd", json::array{"echo hi"}}}},
      {"rootfs", {{"type", "layers"}, {"diff_ids", ids}}}};
  return json::serialize(config);
}

std::string ManifestJson(const std::string& config, const std::vector<Layer>& layers) {
  json::array list;
  for (const auto& l : layers) {
    list.push_back(json::object{
        {"mediaType", l.media_type},
        {"digest", l.digest},
        {"size", l.listed_size ? l.listed_size : l.blob.size()}});
  }
  json::object m{{"schemaVersion", 2},
                 {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                 {"config",
                  {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                   {"digest", Sha256Of(config)},
                   {"size", config.size()}}},
                 {"layers", list}};
  return json::serialize(m);
}

std::string IndexJson(const std::vector<IndexItem>& items) {
  json::array list;
  for (const auto& item : items) {
    json::object d{{"mediaType", item.media_type}, {"digest", item.digest}, {"size", item.size}};
    if (!item.platform.empty()) {
      const size_t slash = item.platform.find('/');
      d["platform"] = {{"os", item.platform.substr(0, slash)},
                       {"architecture", item.platform.substr(slash + 1)}};
    }
    if (!item.annotations.empty()) {
      json::object a;
      for (const auto& [k, v] : item.annotations) a[k] = v;
      d["annotations"] = a;
    }
    list.push_back(d);
  }
  return json::serialize(json::object{{"schemaVersion", 2},
                                      {"mediaType", "application/vnd.oci.image.index.v1+json"},
                                      {"manifests", list}});
}

std::string OciArchive(const std::string& config, const std::vector<Layer>& layers,
                       const std::map<std::string, std::string>& extra) {
  const std::string manifest = ManifestJson(config, layers);
  Tar t;
  t.File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  t.File("index.json",
         IndexJson({{"application/vnd.oci.image.manifest.v1+json", Sha256Of(manifest),
                     manifest.size(), "", {{"org.opencontainers.image.ref.name", "demo:1"}}}}));
  t.Dir("blobs/").Dir("blobs/sha256/");
  std::map<std::string, std::string> blobs{{Sha256Of(manifest), manifest},
                                           {Sha256Of(config), config}};
  for (const auto& l : layers) blobs[l.digest] = l.blob;
  for (const auto& [digest, content] : blobs) t.File("blobs/sha256/" + digest.substr(7), content);
  for (const auto& [name, content] : extra) t.File(name, content);
  return t.Finish();
}

std::string DockerSaveArchive(const std::string& config, const std::vector<Layer>& layers,
                              const std::vector<std::string>& repo_tags) {
  Tar t;
  const std::string config_name = Sha256Of(config).substr(7) + ".json";
  json::array layer_names;
  std::map<std::string, std::string> first;  // diff_id -> member, to link repeats as docker does
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string id = std::string(63, 'a' + static_cast<char>(i)) + "0";
    const std::string member = id + "/layer.tar";
    t.Dir(id + "/");
    if (auto it = first.find(layers[i].diff_id); it != first.end()) {
      t.Symlink(member, "../" + it->second);
    } else {
      t.File(member, layers[i].tar);
      first[layers[i].diff_id] = member;
    }
    layer_names.emplace_back(member);
  }
  t.File(config_name, config);
  json::array tags;
  for (const auto& tag : repo_tags) tags.emplace_back(tag);
  t.File("manifest.json",
         json::serialize(json::array{
             json::object{{"Config", config_name}, {"RepoTags", tags}, {"Layers", layer_names}}}));
  t.File("repositories", "{}");
  return t.Finish();
}

}  // namespace sandstream::image::test
