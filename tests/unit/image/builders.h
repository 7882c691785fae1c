// What the image tests feed the store, built here rather than by the code under test: tar
// archives (ustar, GNU long names, PAX, hand-made broken headers), gzip and zstd, image configs,
// OCI image layouts and docker save archives.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "image/stream.h"

namespace sandstream::image::test {

// One archive entry; the setters chain: Entry("a").Type('5').Mode(0700).
struct Entry {
  Entry() = default;
  explicit Entry(std::string n) : name(std::move(n)) {}
  Entry& Type(char t) { type = t; return *this; }
  Entry& Data(std::string d) { data = std::move(d); return *this; }
  Entry& Link(std::string l) { linkname = std::move(l); return *this; }
  Entry& Mode(uint32_t m) { mode = m; return *this; }
  Entry& Uid(uint32_t u) { uid = u; return *this; }
  Entry& Gid(uint32_t g) { gid = g; return *this; }
  Entry& Mtime(int64_t t) { mtime = t; return *this; }
  Entry& Major(uint32_t m) { major = m; return *this; }
  Entry& Minor(uint32_t m) { minor = m; return *this; }
  Entry& Pax(std::map<std::string, std::string> records) { pax = std::move(records); return *this; }
  Entry& GnuLong() { gnu_long = true; return *this; }

  std::string name;
  char type = '0';
  std::string data;
  std::string linkname;
  uint32_t mode = 0644;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t mtime = 1700000000;
  uint32_t major = 0;
  uint32_t minor = 0;
  std::map<std::string, std::string> pax;  // records of a PAX header written before it
  bool gnu_long = false;                   // name and linkname as GNU 'L' / 'K' entries
};

class Tar {
 public:
  Tar& Add(Entry e);
  Tar& File(const std::string& name, const std::string& data, uint32_t mode = 0644,
            uint32_t uid = 0, uint32_t gid = 0);
  Tar& Dir(const std::string& name, uint32_t mode = 0755, uint32_t uid = 0, uint32_t gid = 0);
  Tar& Symlink(const std::string& name, const std::string& target);
  Tar& Hardlink(const std::string& name, const std::string& target);
  // Bytes as they are (a broken header, say).
  Tar& Raw(const std::string& bytes);
  // The archive with its two zero blocks.
  std::string Finish() const;
  // Without them.
  const std::string& bytes() const { return out_; }

  // One ustar header block; `prefix` goes in the ustar prefix field; `gnu` writes GNU's magic.
  static std::string Header(const Entry& e, uint64_t size, const std::string& prefix = "",
                            bool gnu = false);
  // Writes a header's checksum again after a change made by hand.
  static void Reseal(std::string& header);

 private:
  std::string out_;
};

// Bytes from memory, at most `chunk` a read (short reads for the filters to cope with).
class StringSource : public Source {
 public:
  explicit StringSource(std::string data, size_t chunk = SIZE_MAX)
      : data_(std::move(data)), chunk_(chunk) {}
  Result<size_t> Read(char* buf, size_t size) override;

 private:
  std::string data_;
  size_t chunk_;
  size_t at_ = 0;
};

std::string Pad(std::string data);
std::string Gzip(const std::string& data);
std::string Zstd(const std::string& data);

struct Layer {
  std::string tar;
  std::string blob;  // compressed per `compression`
  Compression compression = Compression::kNone;
  std::string media_type;
  std::string digest;
  std::string diff_id;
  uint64_t listed_size = 0;  // the size a manifest gives it, when not the blob's
};
Layer MakeLayer(const std::string& tar, Compression compression = Compression::kNone);

// An image config with these diff_ids and a few run settings.
std::string ConfigJson(const std::vector<std::string>& diff_ids);
// An OCI manifest of `config` and `layers`.
std::string ManifestJson(const std::string& config, const std::vector<Layer>& layers);
// An index of one manifest per (digest, size, platform "os/arch" or "").
struct IndexItem {
  std::string media_type;
  std::string digest;
  uint64_t size = 0;
  std::string platform;
  std::map<std::string, std::string> annotations;
};
std::string IndexJson(const std::vector<IndexItem>& items);

// An OCI image layout tar: oci-layout, index.json (one manifest, with a ref name), blobs.
// `extra` files go in too (e.g. a docker 25 manifest.json).
std::string OciArchive(const std::string& config, const std::vector<Layer>& layers,
                       const std::map<std::string, std::string>& extra = {});
// A docker save of the older kind: manifest.json, <hex>.json, <id>/layer.tar (uncompressed).
std::string DockerSaveArchive(const std::string& config, const std::vector<Layer>& layers,
                              const std::vector<std::string>& repo_tags);

}  // namespace sandstream::image::test
