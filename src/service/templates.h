// Templates: what a sandbox's root is made from. Built in: "base" (the host's system
// directories, read-only) and "code-interpreter" (base, unless a directory of that name is
// registered). A directory under templates_dir is a template of one layer. Images imported
// through the API and snapshots of sandboxes are templates of the image store's layers
// (image/store.h), recorded in the Store. Every layer is read-only and shared: a sandbox writes
// into its own overlay layer.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include "base/clock.h"
#include "base/result.h"
#include "image/store.h"
#include "service/store.h"

namespace sandstream {

struct Template {
  std::string name;
  std::string kind;                 // "base", "directory", "image" or "snapshot"
  std::string tenant;               // its owner; "" for the admin's, which every tenant may use
  std::string directory;            // kind "directory": its root
  std::vector<std::string> layers;  // kinds "image" and "snapshot": diff ids, bottom first
  // Kind "snapshot": what its layers go over. "": nothing (its image's layers are the whole
  // root); "base": the host's system, as for the built-in templates; "directory": the tree of
  // `directory`, lowest.
  std::string root;
  std::vector<std::string> env;  // the image's Env ("K=V"), under the sandbox's own
  std::string working_dir;       // the default cwd ("": /workspace)
  std::string user;              // the image's User, as written
  uint32_t uid = 1000;           // ... and as ids, read from the image's /etc/passwd
  uint32_t gid = 1000;
  std::string source;         // "archive", a reference pulled, or the sandbox snapshotted
  std::string digest;         // the image manifest's (a snapshot's: its image's), or ""
  std::string config_digest;  // the image config's: with `digest`, blobs the store keeps
  std::vector<std::string> tags;
  uint64_t size_bytes = 0;
  // Kind "snapshot" with memory: the directory of the checkpoint its sandboxes are restored
  // from (processes running where they were), its layers none; "" for any other.
  std::string checkpoint;
  SystemTime created_at{};
  bool ready = true;  // false while it is being imported or snapshotted: not usable yet
};

boost::json::object TemplateJson(const Template& t);

// In a memory snapshot's checkpoint directory, written last: what the daemon knew of the
// sandbox it was taken of (MemoryImage's records).
inline constexpr const char* kMemoryRecordsFile = "memory.json";

class Templates {
 public:
  // `templates_dir`: directory templates; `images`: the layer store; `store`: the records.
  Templates(std::string templates_dir, std::unique_ptr<image::Store> images, Store& store);

  // The built-in, directory and recorded templates; a record whose layers are gone is
  // reported and left out.
  void Load();

  const Template* Find(std::string_view name) const;
  std::vector<const Template*> List() const;
  // The directories of `t`'s layers, bottom first (none for base).
  std::vector<std::string> LayerPaths(const Template& t) const;

  // A name for a template being made by `tenant`: valid and free, held until Commit or Abandon.
  Result<void> Reserve(const std::string& name, const std::string& tenant);
  Result<const Template*> Commit(Template t);
  void Abandon(const std::string& name);
  // Forgets an image or snapshot template (its layers stay until Collect()).
  Result<void> Remove(const std::string& name);
  // Layers just made for a template not committed yet: Collect() keeps them. Any thread. Not
  // the store's own pins, which end when an import returns: these last until the template names
  // the layers, and Collect() reads them with the templates at one moment.
  void Pin(const std::vector<std::string>& layers);
  void Unpin(const std::vector<std::string>& layers);
  // Removes every layer that neither a template nor a pin names. Blocking: call it off the
  // event loop. While image work is in flight (BeginWork) it is put off until the last of it
  // ends: a layer an import has made is pinned here only once the import has returned.
  Result<void> Collect();
  // Image work (an import, a pull, a snapshot: from its start until its layers are pinned)
  // begins, waiting for a collection in progress; and ends, true when a Collect() was put off
  // meanwhile (the caller runs it now). Any thread.
  void BeginWork();
  bool EndWork();

  image::Store& images() { return *images_; }  // after a Reserve() that succeeded
  // A file for an image archive on its way in (image::Store::NewArchiveFile).
  Result<UniqueFd> NewArchive() const;

 private:
  Result<void> CollectNow();

  std::string templates_dir_;
  std::unique_ptr<image::Store> images_;
  Store& store_;
  // Changed on the event loop only, where it is read freely; Collect() reads it from its
  // thread under `mu_`, which every change takes.
  std::map<std::string, Template, std::less<>> templates_;
  mutable std::mutex mu_;
  std::multiset<std::string> pinned_;
  std::mutex work_mu_;  // guards the three below
  std::condition_variable work_done_;
  int working_ = 0;            // image work in flight
  bool collecting_ = false;    // a Collect() is running
  bool collect_owed_ = false;  // one was asked for while work (or another) was in flight
};

// The uid and gid of `user` ("name", "uid", "name:group", "uid:gid"; "" is root) as the
// template's /etc/passwd and /etc/group (the topmost layer's that has them) say. Blocking.
Result<std::pair<uint32_t, uint32_t>> ResolveUser(const std::vector<std::string>& layer_dirs,
                                                  const std::string& user);

}  // namespace sandstream
