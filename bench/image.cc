#include "image.h"

#include <sys/stat.h>

#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "client.h"
#include "image/digest.h"
#include "image/tar.h"

namespace sandstream::bench {
namespace {

namespace json = boost::json;

class StringSink : public image::Sink {
 public:
  Result<void> Write(std::string_view data) override {
    out.append(data);
    return Ok{};
  }
  std::string out;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BenchError("read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A tar of `files` (path -> content, mode) with every parent directory before its files.
struct File {
  std::string content;
  uint32_t mode = 0644;
};

std::string LayerTar(const std::vector<std::pair<std::string, File>>& files) {
  StringSink sink;
  image::TarWriter tar(sink);
  std::set<std::string> dirs;
  auto check = [](Result<void> ok) {
    if (!ok) throw BenchError("layer tar: " + ok.error().message);
  };
  for (const auto& [path, file] : files) {
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      const std::string dir = path.substr(0, slash + 1);
      if (!dirs.insert(dir).second) continue;
      image::TarEntry d;
      d.name = dir;
      d.type = image::EntryType::kDirectory;
      d.mode = 0755;
      check(tar.WriteHeader(d));
    }
    image::TarEntry e;
    e.name = path;
    e.size = file.content.size();
    e.mode = file.mode;
    e.type = image::EntryType::kFile;
    check(tar.WriteHeader(e));
    check(tar.WriteData(file.content));
    check(tar.Pad(e.size));
  }
  check(tar.Finish());
  return std::move(sink.out);
}

// The absolute paths `ldd` names for `binary` (its libraries and the loader).
std::vector<std::string> Libraries(const std::string& binary) {
  FILE* p = ::popen(("ldd " + binary).c_str(), "r");
  if (!p) throw BenchError("ldd " + binary);
  std::vector<std::string> paths;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      if (w.starts_with("/")) paths.push_back(w);
    }
  }
  ::pclose(p);
  if (paths.empty()) throw BenchError("ldd " + binary + " named no library");
  return paths;
}

std::string Digest(const std::string& blob) { return image::Sha256Of(blob); }

}  // namespace

std::string ShellImageArchive() {
  std::set<std::string> paths;
  for (const char* binary : {"/bin/sh", "/usr/bin/head"}) {
    for (auto& path : Libraries(binary)) paths.insert(std::move(path));
  }
  std::vector<std::pair<std::string, File>> libs;
  for (const auto& path : paths) libs.push_back({path.substr(1), {ReadFile(path), 0755}});
  const std::vector<std::string> layers = {
      LayerTar(libs),
      LayerTar({{"bin/head", {ReadFile("/usr/bin/head"), 0755}},
                {"bin/sh", {ReadFile("/bin/sh"), 0755}},
                {"opt/doomed", {"x\n", 0644}}}),
      LayerTar({{"etc/os-release", {"ID=sandstream-bench\n", 0644}}, {"opt/.wh.doomed", {"", 0644}}}),
  };
  json::array diff_ids, descriptors;
  for (const auto& layer : layers) {
    diff_ids.push_back(json::value(Digest(layer)));
    descriptors.push_back(json::object{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                                       {"digest", Digest(layer)},
                                       {"size", layer.size()}});
  }
  const std::string config = json::serialize(json::object{
      {"architecture", "amd64"},
      {"os", "linux"},
      {"config", json::object{{"Env", json::array{"PATH=/bin"}}, {"WorkingDir", "/"}}},
      {"rootfs", json::object{{"type", "layers"}, {"diff_ids", diff_ids}}}});
  const std::string manifest = json::serialize(json::object{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config", json::object{{"mediaType", "application/vnd.oci.image.config.v1+json"},
                              {"digest", Digest(config)},
                              {"size", config.size()}}},
      {"layers", descriptors}});
  const std::string index = json::serialize(json::object{
      {"schemaVersion", 2},
      {"manifests", json::array{json::object{
                        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                        {"digest", Digest(manifest)},
                        {"size", manifest.size()}}}}});
  std::vector<std::pair<std::string, File>> files = {
      {"oci-layout", {R"({"imageLayoutVersion":"1.0.0"})", 0644}}, {"index.json", {index, 0644}}};
  for (const std::string* blob : {&config, &manifest}) {
    files.push_back({"blobs/sha256/" + Digest(*blob).substr(7), {*blob, 0644}});
  }
  for (const auto& layer : layers) {
    files.push_back({"blobs/sha256/" + Digest(layer).substr(7), {layer, 0644}});
  }
  return LayerTar(files);
}

}  // namespace sandstream::bench
