#include "service/templates.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <boost/json.hpp>

#include "base/log.h"
#include "service/codec.h"

namespace sandstream {
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// Names go into URLs, logs and the sandbox JSON: short and plain.
bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '-' && c != '_' && c != '.'))) return false;
  }
  return true;
}

json::array Strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

std::vector<std::string> StringsOf(const json::value* v) {
  std::vector<std::string> out;
  if (v == nullptr || !v->is_array()) return out;
  for (const auto& s : v->as_array()) {
    if (s.is_string()) out.emplace_back(s.as_string());
  }
  return out;
}

std::string StringOf(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

// The record kept in the store: the wire form plus what only the daemon needs.
json::object Record(const Template& t) {
  json::object o = TemplateJson(t);
  o["layers"] = Strings(t.layers);
  o["root"] = t.root;
  o["directory"] = t.directory;
  o["config_digest"] = t.config_digest;
  o["uid"] = t.uid;
  o["gid"] = t.gid;
  o["checkpoint"] = t.checkpoint;
  return o;
}

Template FromRecord(const json::object& o) {
  Template t;
  t.name = StringOf(o, "name");
  t.kind = StringOf(o, "kind");
  t.tenant = StringOf(o, "tenant");
  t.layers = StringsOf(o.if_contains("layers"));
  t.root = StringOf(o, "root");
  t.directory = StringOf(o, "directory");
  t.env = StringsOf(o.if_contains("env"));
  t.working_dir = StringOf(o, "working_dir");
  t.user = StringOf(o, "user");
  if (const auto* uid = o.if_contains("uid"); uid && uid->is_int64()) {
    t.uid = static_cast<uint32_t>(uid->as_int64());
  }
  if (const auto* gid = o.if_contains("gid"); gid && gid->is_int64()) {
    t.gid = static_cast<uint32_t>(gid->as_int64());
  }
  t.source = StringOf(o, "source");
  t.digest = StringOf(o, "digest");
  t.config_digest = StringOf(o, "config_digest");
  t.tags = StringsOf(o.if_contains("tags"));
  t.checkpoint = StringOf(o, "checkpoint");
  if (const auto* size = o.if_contains("size_bytes"); size && size->is_int64()) {
    t.size_bytes = static_cast<uint64_t>(size->as_int64());
  }
  t.created_at = ParseRfc3339(StringOf(o, "created_at")).value_or(SystemTime{});
  return t;
}

std::optional<uint32_t> Number(std::string_view s) {
  uint32_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return n;
}

// Field 2 (the id) and field 3 (passwd's group) of the line of /etc/passwd or /etc/group
// whose first field is `name`.
std::optional<std::pair<uint32_t, uint32_t>> LookUp(const std::string& file,
                                                    std::string_view name) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string_view> f;
    std::string_view rest = line;
    for (size_t colon; (colon = rest.find(':')) != std::string_view::npos;) {
      f.push_back(rest.substr(0, colon));
      rest.remove_prefix(colon + 1);
    }
    f.push_back(rest);
    if (f.size() < 3 || f[0] != name) continue;
    const auto id = Number(f[2]);
    const auto group = f.size() > 3 ? Number(f[3]) : id;
    if (id) return std::pair{*id, group.value_or(*id)};
  }
  return std::nullopt;
}

// /etc/<name> of the topmost layer that has it.
std::string EtcFile(const std::vector<std::string>& layer_dirs, const char* name) {
  for (auto it = layer_dirs.rbegin(); it != layer_dirs.rend(); ++it) {
    std::string path = *it + "/etc/" + name;
    std::error_code ec;
    if (fs::is_regular_file(fs::symlink_status(path, ec))) return path;
  }
  return {};
}

}  // namespace

json::object TemplateJson(const Template& t) {
  json::object o{
      {"name", t.name},
      {"kind", t.kind},
      {"tenant", t.tenant.empty() ? json::value(nullptr) : json::value(t.tenant)},
      {"status", t.ready ? "ready" : "creating"},
      {"source", t.source.empty() ? json::value(nullptr) : json::value(t.source)},
      {"digest", t.digest.empty() ? json::value(nullptr) : json::value(t.digest)},
      {"tags", Strings(t.tags)},
      {"layers_count", t.layers.size() + (t.kind == "directory" || t.root == "directory")},
      {"size_bytes", t.size_bytes},
      {"memory", !t.checkpoint.empty()},
      {"env", Strings(t.env)},
      {"working_dir", t.working_dir.empty() ? json::value(nullptr) : json::value(t.working_dir)},
      {"user", t.user},
      {"created_at", t.created_at == SystemTime{} ? json::value(nullptr)
                                                  : json::value(FormatRfc3339(t.created_at))}};
  return o;
}

Templates::Templates(std::string templates_dir, std::unique_ptr<image::Store> images, Store& store)
    : templates_dir_(std::move(templates_dir)), images_(std::move(images)), store_(store) {}

void Templates::Load() {
  templates_.clear();
  for (const char* name : {"base", "code-interpreter"}) {
    Template t;
    t.name = name;
    t.kind = "base";
    t.user = "user";
    templates_[t.name] = std::move(t);
  }
  // A directory registers a template of its name, "code-interpreter" included.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(templates_dir_, ec)) {
    if (!entry.is_directory(ec)) continue;
    Template t;
    t.name = entry.path().filename().string();
    if (t.name == "base") continue;
    t.kind = "directory";
    t.directory = entry.path().string();
    t.source = t.directory;
    // Its files keep their owners: its root is the sandbox's root; processes run as `user`.
    t.user = "user";
    templates_[t.name] = std::move(t);
  }
  auto rows = store_.Templates();
  if (!rows) {
    log::Error("reading templates failed", {{"error", rows.error().message}});
    return;
  }
  for (const auto& row : *rows) {
    json::error_code jec;
    json::value v = json::parse(row, jec);
    if (jec || !v.is_object()) continue;
    Template t = FromRecord(v.as_object());
    if (!t.checkpoint.empty()) {
      if (t.name.empty() || !fs::exists(t.checkpoint + "/" + kMemoryRecordsFile)) {
        log::Warn("template left out: its checkpoint is missing", {{"template", t.name}});
        continue;
      }
      templates_[t.name] = std::move(t);
      continue;
    }
    bool whole = images_ && !t.name.empty() && !t.layers.empty();
    for (const auto& layer : t.layers) whole = whole && images_->HasLayer(layer);
    if (!whole) {
      log::Warn("template left out: a layer of it is missing", {{"template", t.name}});
      continue;
    }
    templates_[t.name] = std::move(t);
  }
}

const Template* Templates::Find(std::string_view name) const {
  auto it = templates_.find(name);
  return it == templates_.end() ? nullptr : &it->second;
}

std::vector<const Template*> Templates::List() const {
  std::vector<const Template*> out;
  for (const auto& [name, t] : templates_) out.push_back(&t);
  return out;
}

std::vector<std::string> Templates::LayerPaths(const Template& t) const {
  if (t.kind == "directory") return {t.directory};
  std::vector<std::string> paths;
  if (t.root == "directory") paths.push_back(t.directory);
  if (!images_) return paths;
  for (const auto& layer : t.layers) paths.push_back(images_->LayerPath(layer));
  return paths;
}

Result<void> Templates::Reserve(const std::string& name, const std::string& tenant) {
  if (!ValidName(name)) {
    return Error{ErrorCode::kInvalidRequest,
                 "template name must be 1 to 64 of a-z, 0-9, '-', '_' and '.', starting with a "
                 "letter or digit"};
  }
  if (templates_.contains(name)) {
    return Error{ErrorCode::kConflict, "template '" + name + "' exists"};
  }
  if (!images_) return Error{ErrorCode::kInternal, "the image store is unavailable (see the log)"};
  Template t;
  t.name = name;
  t.tenant = tenant;
  t.ready = false;
  std::lock_guard lock(mu_);
  templates_[name] = std::move(t);
  return Ok{};
}

Result<const Template*> Templates::Commit(Template t) {
  t.ready = true;
  std::lock_guard lock(mu_);
  if (auto r = store_.PutTemplate(t.name, json::serialize(Record(t))); !r) {
    templates_.erase(t.name);
    return std::move(r).error();
  }
  auto& slot = templates_[t.name];
  slot = std::move(t);
  return &slot;
}

void Templates::Abandon(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = templates_.find(name);
  if (it != templates_.end() && !it->second.ready) templates_.erase(it);
}

Result<void> Templates::Remove(const std::string& name) {
  if (auto r = store_.DeleteTemplate(name); !r) return r;
  std::lock_guard lock(mu_);
  templates_.erase(name);
  return Ok{};
}

void Templates::Pin(const std::vector<std::string>& layers) {
  std::lock_guard lock(mu_);
  pinned_.insert(layers.begin(), layers.end());
}

void Templates::Unpin(const std::vector<std::string>& layers) {
  std::lock_guard lock(mu_);
  for (const auto& layer : layers) {
    if (auto it = pinned_.find(layer); it != pinned_.end()) pinned_.erase(it);
  }
}

Result<UniqueFd> Templates::NewArchive() const {
  if (!images_) return Error{ErrorCode::kInternal, "the image store is unavailable (see the log)"};
  return images_->NewArchiveFile();
}

void Templates::BeginWork() {
  std::unique_lock lock(work_mu_);
  work_done_.wait(lock, [this] { return !collecting_; });
  ++working_;
}

bool Templates::EndWork() {
  std::lock_guard lock(work_mu_);
  --working_;
  if (working_ > 0 || !collect_owed_) return false;
  collect_owed_ = false;
  return true;
}

Result<void> Templates::Collect() {
  {
    std::lock_guard lock(work_mu_);
    if (working_ > 0 || collecting_) {
      collect_owed_ = true;
      return Ok{};
    }
    collecting_ = true;
  }
  Result<void> result;
  for (;;) {
    result = CollectNow();
    std::lock_guard lock(work_mu_);
    if (!collect_owed_) break;
    collect_owed_ = false;  // asked for while this one ran: once more
  }
  {
    std::lock_guard lock(work_mu_);
    collecting_ = false;
  }
  work_done_.notify_all();
  return result;
}

Result<void> Templates::CollectNow() {
  // A layer can only come to be named by a template through a pin, so what is kept now stays
  // enough while the layers go, without holding the lock over the disk work.
  std::set<std::string> keep;
  {
    std::lock_guard lock(mu_);
    keep.insert(pinned_.begin(), pinned_.end());
    for (const auto& [name, t] : templates_) {
      keep.insert(t.layers.begin(), t.layers.end());
      for (const std::string* blob : {&t.digest, &t.config_digest}) {
        if (!blob->empty()) keep.insert(*blob);
      }
    }
  }
  return images_ ? images_->Collect(keep) : Result<void>(Ok{});
}

Result<std::pair<uint32_t, uint32_t>> ResolveUser(const std::vector<std::string>& layer_dirs,
                                                  const std::string& user) {
  if (user.empty()) return std::pair<uint32_t, uint32_t>{0, 0};
  const size_t colon = user.find(':');
  const std::string name = user.substr(0, colon);
  const std::string group = colon == std::string::npos ? "" : user.substr(colon + 1);
  std::optional<uint32_t> uid = Number(name);
  std::optional<uint32_t> gid;
  if (!uid || group.empty()) {
    const std::string passwd = EtcFile(layer_dirs, "passwd");
    const auto entry = passwd.empty() ? std::nullopt : LookUp(passwd, name);
    if (!uid && !entry) {
      return Error{ErrorCode::kInvalidRequest,
                   "image config: User '" + user + "' is not in the image's /etc/passwd"};
    }
    if (!uid) uid = entry->first;
    gid = entry ? std::optional(entry->second) : uid;
  }
  if (!group.empty()) {
    gid = Number(group);
    if (!gid) {
      const std::string groups = EtcFile(layer_dirs, "group");
      const auto entry = groups.empty() ? std::nullopt : LookUp(groups, group);
      if (!entry) {
        return Error{ErrorCode::kInvalidRequest,
                     "image config: group '" + group + "' is not in the image's /etc/group"};
      }
      gid = entry->first;
    }
  }
  constexpr uint32_t kMaxId = 65534;
  if (*uid > kMaxId || *gid > kMaxId) {
    return Error{ErrorCode::kInvalidRequest,
                 "image config: User '" + user + "' is past the ids a sandbox maps (65534)"};
  }
  return std::pair{*uid, *gid};
}

}  // namespace sandstream
