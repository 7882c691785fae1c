// envd's filesystem.Filesystem service over the sandbox's files (SandboxFs), as the user the
// call acts as: Stat, MakeDir, Move, ListDir, Remove, and watches, streamed (WatchDir) or polled
// (CreateWatcher, GetWatcherEvents, RemoveWatcher).
#include <algorithm>
#include <deque>
#include <map>
#include <memory>

#include <boost/json.hpp>

#include "api/common/files.h"
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"
#include "api/stream.h"
#include "base/ids.h"
#include "process/cursor.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The names /etc/passwd and /etc/group of a sandbox give its ids.
std::string UserName(uint32_t id) {
  if (id == 0) return "root";
  if (id == 1000) return "user";
  if (id == 65534) return "nobody";
  return std::to_string(id);
}
std::string GroupName(uint32_t id) {
  return id == 65534 ? "nogroup" : UserName(id);
}

// A host id of the sandbox's files as the sandbox sees it.
uint32_t InsideId(const sandbox::Sandbox& runtime, uint32_t host) {
  const std::optional<uint32_t> first = runtime.HostId(0);
  if (!first) return host;
  if (host < *first || runtime.HostId(host - *first) != host) return 65534;  // unmapped
  return host - *first;
}

// Go's fs.FileMode.String(), which envd reports: "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx".
std::string Permissions(sandbox::FileType type, uint32_t mode) {
  std::string out;
  if (type == sandbox::FileType::kDirectory) out += 'd';
  if (type == sandbox::FileType::kSymlink) out += 'L';
  if (mode & 04000) out += 'u';
  if (mode & 02000) out += 'g';
  if (mode & 01000) out += 't';
  if (out.empty()) out += '-';
  constexpr std::string_view kRwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (mode & (0400u >> i)) ? kRwx[i] : '-';
  return out;
}

std::string_view TypeName(sandbox::FileType type) {
  switch (type) {
    case sandbox::FileType::kFile:
      return "FILE_TYPE_FILE";
    case sandbox::FileType::kDirectory:
      return "FILE_TYPE_DIRECTORY";
    case sandbox::FileType::kSymlink:
      return "FILE_TYPE_SYMLINK";
    case sandbox::FileType::kOther:
      break;
  }
  return "FILE_TYPE_UNSPECIFIED";
}

json::object Entry(const sandbox::Sandbox& runtime, const sandbox::FileInfo& f) {
  json::object e;
  e["name"] = f.name;
  e["type"] = TypeName(f.type);
  e["path"] = f.path;
  e["size"] = std::to_string(f.size);  // int64: a string in proto3 JSON
  e["mode"] = f.mode;
  e["permissions"] = Permissions(f.type, f.mode);
  e["owner"] = UserName(InsideId(runtime, f.uid));
  e["group"] = GroupName(InsideId(runtime, f.gid));
  e["modifiedTime"] = Timestamp(FromUnixMillis(f.mtime_ms));
  if (f.type == sandbox::FileType::kSymlink) {
    e["symlinkTarget"] = f.link_target;
    e["isSymlink"] = true;
  }
  return e;
}

}  // namespace

Error Refusal(Error e) {
  if (e.sys_errno == EACCES || e.sys_errno == EPERM) e.code = ErrorCode::kForbidden;
  return e;
}

std::string EnvdFiles::Resolve(std::string_view path) const {
  if (path.starts_with('/')) return std::string(path);
  if (path.empty()) return home;
  return home + "/" + std::string(path);
}

Result<EnvdFiles> OpenFiles(Context& ctx, const SandboxEntry& sb) {
  auto root = ActsAsRoot(ctx);
  if (!root) return std::move(root).error();
  auto fs = ctx.service.Files(sb.id, *root ? 0 : 1000);
  if (!fs) return std::move(fs).error();
  return EnvdFiles{sb.id, sb.runtime, std::move(*fs), *root ? "/root" : "/home/user"};
}

namespace {

using Target = EnvdFiles;

Result<std::string> PathField(const Target& t, const json::object& m, std::string_view json_name,
                              std::string_view proto_name = {}) {
  auto path = OptString(m, json_name, proto_name);
  if (!path) return std::move(path).error();
  if (!*path || (*path)->empty()) return Invalid(std::string(json_name) + " is required");
  return t.Resolve(**path);
}

asio::awaitable<void> ReplyEntry(Context& ctx, const Target& t,
                                 const Result<sandbox::FileInfo>& info) {
  if (!info) co_return co_await ReplyError(ctx, Refusal(info.error()));
  json::object out;
  out["entry"] = Entry(*t.runtime, *info);
  co_await ReplyMessage(ctx, out);
}

asio::awaitable<void> Stat(Context& ctx, Target& t, const json::object& m) {
  auto path = PathField(t, m, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto info = co_await OffThread(ctx, [&] { return t.fs.Stat(*path); });
  co_await ReplyEntry(ctx, t, info);
}

asio::awaitable<void> MakeDir(Context& ctx, Target& t, const json::object& m) {
  auto path = PathField(t, m, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  // envd's os.MkdirAll, told apart: an existing directory is already_exists (the SDKs' false),
  // an existing file invalid_argument.
  auto made = co_await OffThread(ctx, [&]() -> Result<sandbox::FileInfo> {
    if (auto there = t.fs.Stat(*path)) {
      if (there->type == sandbox::FileType::kDirectory) {
        return Error{ErrorCode::kConflict, "directory " + there->path + " already exists"};
      }
      return Invalid("path " + there->path + " already exists and is not a directory");
    }
    return t.fs.Mkdir(*path, 0755, true);
  });
  if (!made && made.error().code == ErrorCode::kConflict) {
    co_return co_await FailConnect(ctx, "already_exists", made.error().message);
  }
  co_await ReplyEntry(ctx, t, made);
}

asio::awaitable<void> Move(Context& ctx, Target& t, const json::object& m) {
  auto from = PathField(t, m, "source");
  if (!from) co_return co_await ReplyError(ctx, from.error());
  auto to = PathField(t, m, "destination");
  if (!to) co_return co_await ReplyError(ctx, to.error());
  // envd makes the destination's directories and replaces what is there (os.Rename).
  auto moved = co_await OffThread(ctx, [&]() -> Result<sandbox::FileInfo> {
    const size_t slash = to->rfind('/');
    if (slash != std::string::npos && slash > 0) {
      if (auto made = t.fs.Mkdir(to->substr(0, slash), 0755, true);
          !made && made.error().code != ErrorCode::kConflict) {
        return std::move(made).error();
      }
    }
    return t.fs.Move(*from, *to, true);
  });
  co_await ReplyEntry(ctx, t, moved);
}

asio::awaitable<void> Remove(Context& ctx, Target& t, const json::object& m) {
  auto path = PathField(t, m, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  // envd's os.RemoveAll: what is not there is removed already.
  Result<void> removed = co_await OffThread(ctx, [&] { return t.fs.Remove(*path, true); });
  if (!removed && removed.error().code != ErrorCode::kNotFound) {
    co_return co_await ReplyError(ctx, Refusal(removed.error()));
  }
  co_await ReplyMessage(ctx, json::object());
}

// The entries under `path` down to `depth` levels (1: its own entries), walked breadth-first
// without following symlinks, at most kListLimit in all.
Result<std::vector<sandbox::FileInfo>> Walk(const sandbox::SandboxFs& fs, const std::string& path,
                                            uint32_t depth) {
  auto top = fs.Stat(path);
  if (!top) return std::move(top).error();
  if (top->type != sandbox::FileType::kDirectory) {
    return Invalid("path " + top->path + " is not a directory");
  }
  std::vector<sandbox::FileInfo> out;
  std::deque<std::pair<std::string, uint32_t>> dirs{{top->path, 1}};
  while (!dirs.empty()) {
    auto [dir, level] = std::move(dirs.front());
    dirs.pop_front();
    bool truncated = false;
    auto entries = fs.List(dir, kListLimit - out.size(), &truncated);
    if (!entries) {
      if (level == 1) return std::move(entries).error();
      continue;  // a directory below that went, or that the user may not read
    }
    for (auto& e : *entries) {
      if (level < depth && e.type == sandbox::FileType::kDirectory)
        dirs.emplace_back(e.path, level + 1);
      out.push_back(std::move(e));
    }
    if (truncated || out.size() >= kListLimit) {
      return Error{ErrorCode::kQuotaExceeded, "more than " + std::to_string(kListLimit) +
                                                  " entries under " + top->path +
                                                  ": list it with a smaller depth"};
    }
  }
  return out;
}

asio::awaitable<void> ListDir(Context& ctx, Target& t, const json::object& m) {
  auto path = PathField(t, m, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto depth = OptInt(m, "depth", {}, 0, UINT32_MAX);
  if (!depth) co_return co_await ReplyError(ctx, depth.error());
  const uint32_t levels = static_cast<uint32_t>(std::max<int64_t>(depth->value_or(1), 1));
  auto entries = co_await OffThread(ctx, [&] { return Walk(t.fs, *path, levels); });
  if (!entries) co_return co_await ReplyError(ctx, Refusal(entries.error()));
  json::array items;
  for (const auto& e : *entries) items.push_back(Entry(*t.runtime, e));
  json::object out;
  out["entries"] = std::move(items);
  co_await ReplyMessage(ctx, out);
}

// --- watches --------------------------------------------------------------------------------

constexpr std::string_view kWatchKeepalive = R"({"keepalive":{}})";

// `path` relative to the watched directory `root`: the name envd's events carry.
std::string Relative(std::string_view root, std::string_view path) {
  if (path.size() > root.size() && path.starts_with(root) &&
      (root == "/" || path[root.size()] == '/')) {
    return std::string(path.substr(root == "/" ? 1 : root.size() + 1));
  }
  return std::string(path);
}

json::object FsEvent(const std::string& name, std::string_view type) {
  json::object e;
  e["name"] = name;
  e["type"] = type;
  return e;
}

// envd's events (fsnotify's) for one of sandstream's: a move is a RENAME of the old name and a
// CREATE of the new one. False for an overflow: events were lost.
bool Translate(const std::string& root, std::string_view type, const std::string& path,
               const std::string& from, std::vector<json::object>& out) {
  if (type == "create") {
    out.push_back(FsEvent(Relative(root, path), "EVENT_TYPE_CREATE"));
  } else if (type == "modify") {
    out.push_back(FsEvent(Relative(root, path), "EVENT_TYPE_WRITE"));
  } else if (type == "delete") {
    out.push_back(FsEvent(Relative(root, path), "EVENT_TYPE_REMOVE"));
  } else if (type == "move") {
    out.push_back(FsEvent(Relative(root, from), "EVENT_TYPE_RENAME"));
    out.push_back(FsEvent(Relative(root, path), "EVENT_TYPE_CREATE"));
  } else if (type == "overflow") {
    return false;
  }
  return true;
}

Error EventsLost(std::string_view path) {
  return Error{ErrorCode::kInternal, "events under " + std::string(path) +
                                         " were lost: more changed than the watch could hold "
                                         "(data_loss)"};
}

Result<std::optional<bool>> Recursive(const json::object& m) {
  return OptBool(m, "recursive");
}

// Stops Pump once the stream has failed (events were lost, the directory went): the stream
// then ends with the failure, though the watch goes on until it is stopped.
struct UntilFailed {
  ConnectStream& stream;
  const std::optional<Error>& failed;
  bool stopping() const { return failed.has_value() || stream.stopping(); }
  bool gone() const { return stream.gone(); }
  uint64_t batch_bytes() const { return stream.batch_bytes(); }
  asio::awaitable<bool> Flush() { return stream.Flush(); }
  SteadyClock::duration keepalive() const { return stream.keepalive(); }
  void Keepalive() { stream.Keepalive(); }
};

// WatchDir's server stream: `start`, then the watch's events as envd names them.
asio::awaitable<void> StreamWatch(Context& ctx, std::shared_ptr<EventLog> log) {
  ConnectStream stream(ctx, std::string(kWatchKeepalive));
  EventCursor cursor(std::move(log), ctx.stream.get_executor(), 0);
  stream.Watch(cursor);
  std::string root;
  std::optional<Error> failed;
  const auto render = [&](const EventLog::Slice& slice) {
    if (slice.gap && !failed) failed = EventsLost(root);
    for (const Event* e : slice.entries) {
      if (failed) break;
      boost::system::error_code ec;
      const json::value v = json::parse(e->data, ec);
      if (ec || !v.is_object()) continue;
      const json::object& o = v.as_object();
      auto text = [&o](std::string_view key) {
        const json::value* f = o.if_contains(key);
        return f && f->is_string() ? std::string(f->as_string()) : std::string();
      };
      if (e->name == "ready") {
        root = text("path");
        json::object start;
        start["start"] = json::object();
        stream.Send(start);
        continue;
      }
      if (e->name == "error") {
        failed = Error{ErrorCode::kNotFound, text("message")};
        break;
      }
      std::vector<json::object> events;
      if (!Translate(root, e->name, text("path"), text("from"), events)) {
        failed = EventsLost(root);
        break;
      }
      for (auto& fs_event : events) {
        json::object message;
        message["filesystem"] = std::move(fs_event);
        stream.Send(message);
      }
    }
  };
  UntilFailed sink{stream, failed};
  // The log ends only after an error; until then the stream follows it.
  const StreamEnd end = co_await Pump(cursor, sink, render, true);
  if (end == StreamEnd::kGone) co_return;
  co_await stream.End(failed ? StreamEnd::kEnded : end, failed);
}

asio::awaitable<void> WatchDir(Context& ctx, Target& t, const json::object& m) {
  auto path = PathField(t, m, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto recursive = Recursive(m);
  if (!recursive) co_return co_await ReplyError(ctx, recursive.error());
  const WatchServe serve = [&ctx](std::shared_ptr<EventLog> log) {
    return StreamWatch(ctx, std::move(log));
  };
  auto refused =
      co_await RunWatch(ctx, t.sandbox_id, t.fs, *path, recursive->value_or(false), serve);
  if (refused) co_await ReplyError(ctx, Refusal(*refused));
}

// A polled watcher: the inotify queue is read when its events are asked for, so nothing runs
// between polls and the kernel's queue holds what happens meanwhile (its overflow is reported).
struct PolledWatcher {
  std::string sandbox_id;
  std::weak_ptr<sandbox::Sandbox> runtime;  // expired: the sandbox is gone
  std::string path;
  sandbox::SandboxFs fs;
  sandbox::FileWatch watch;
  std::optional<WatchQuota::Ticket> ticket;
  SteadyClock::time_point last_poll;
  bool busy = false;
};
using Watcher = std::shared_ptr<PolledWatcher>;

// A watcher no one has polled for this long is dropped (an SDK that went without removing it):
// it holds one of the daemon's few watches meanwhile.
constexpr auto kIdleWatcher = std::chrono::minutes(2);
// Batches of kDrainBytes read per poll, at most.
constexpr int kDrainsPerPoll = 8;

std::map<std::string, Watcher, std::less<>>& Watchers() {
  // Only the I/O thread uses it; never destroyed, so no watch outlives the loop's teardown.
  static auto* const watchers = new std::map<std::string, Watcher, std::less<>>();
  return *watchers;
}

// Takes the watcher out of the map, its quota given back now; what is returned still holds its
// inotify instance, which Retire closes.
Watcher Unlist(std::string_view id) {
  auto& all = Watchers();
  auto it = all.find(id);
  if (it == all.end()) return nullptr;
  Watcher w = std::move(it->second);
  all.erase(it);
  w->ticket.reset();
  return w;
}

// Unlists the watchers of sandboxes that are gone and those nobody polls any more.
std::vector<Watcher> Sweep() {
  const auto now = SteadyClock::now();
  std::vector<std::string> stale;
  for (const auto& [id, w] : Watchers()) {
    if (!w->busy && (w->runtime.expired() || now - w->last_poll > kIdleWatcher)) {
      stale.push_back(id);
    }
  }
  std::vector<Watcher> out;
  out.reserve(stale.size());
  for (const auto& id : stale) out.push_back(Unlist(id));
  return out;
}

// The quota is full: stale watchers go at once. Their inotify instances are closed here, on
// the I/O thread, which the other paths avoid (Retire); this one runs only when every watch
// the daemon allows is open.
void Reclaim() {
  (void)Sweep();
}

// Closes unlisted watchers' inotify instances on the blocking pool: the last close of one waits
// for the kernel to let go of its marks (an RCU grace period). A poll still running keeps its
// watcher; its end closes it.
asio::awaitable<void> Retire(Context& ctx, std::vector<Watcher> gone) {
  if (gone.empty()) co_return;
  co_await OffThread(ctx, [&] {
    gone.clear();
    return true;
  });
}

struct FoundWatcher {
  std::string id;
  Watcher watcher;
};

Result<FoundWatcher> FindWatcher(const Target& t, const json::object& m) {
  auto id = OptString(m, "watcherId", "watcher_id");
  if (!id) return std::move(id).error();
  if (!*id || (*id)->empty()) return Invalid("watcherId is required");
  auto& all = Watchers();
  auto it = all.find(**id);
  if (it == all.end() || it->second->sandbox_id != t.sandbox_id) {
    return Error{ErrorCode::kNotFound, "watcher with id " + **id + " not found"};
  }
  return FoundWatcher{it->first, it->second};
}

asio::awaitable<void> CreateWatcher(Context& ctx, Target& t, const json::object& m) {
  auto path = PathField(t, m, "path");
  if (!path) co_return co_await ReplyError(ctx, path.error());
  auto recursive = Recursive(m);
  if (!recursive) co_return co_await ReplyError(ctx, recursive.error());
  FileWatchQuota().SetReclaimer(Reclaim);
  co_await Retire(ctx, Sweep());
  auto ticket = TakeWatch(ctx, t.sandbox_id);
  if (!ticket) co_return co_await ReplyError(ctx, ticket.error());
  auto watch = co_await OffThread(ctx, [&] {
    return sandbox::FileWatch::Start(t.fs, *path, recursive->value_or(false), kMaxWatchedDirs);
  });
  if (!watch) co_return co_await ReplyError(ctx, Refusal(watch.error()));
  const std::string id = NewId("w");
  std::string root = watch->path();
  auto w = std::make_shared<PolledWatcher>(PolledWatcher{t.sandbox_id, t.runtime, std::move(root),
                                                         std::move(t.fs), std::move(*watch),
                                                         std::move(*ticket), SteadyClock::now()});
  // The sandbox may have gone while the watch started: then the next sweep takes it.
  Watchers().emplace(id, std::move(w));
  json::object out;
  out["watcherId"] = id;
  co_await ReplyMessage(ctx, out);
}

asio::awaitable<void> GetWatcherEvents(Context& ctx, Target& t, const json::object& m) {
  auto found = FindWatcher(t, m);
  if (!found) co_return co_await ReplyError(ctx, found.error());
  Watcher w = found->watcher;
  w->last_poll = SteadyClock::now();
  json::array events;
  // Two polls at once of one watcher: the second has nothing new.
  if (w->busy) {
    json::object out;
    out["events"] = std::move(events);
    co_return co_await ReplyMessage(ctx, out);
  }
  w->busy = true;
  std::optional<Error> failed;
  for (int i = 0; i < kDrainsPerPoll && !failed; ++i) {
    sandbox::FileWatch::Batch batch = w->watch.Drain();
    std::vector<json::object> translated;
    for (const auto& e : batch.events) {
      if (!Translate(w->path, e.type, e.path, e.from, translated)) failed = EventsLost(w->path);
    }
    for (auto& e : translated) events.push_back(std::move(e));
    if (batch.gone && !failed) {
      failed = Error{ErrorCode::kNotFound, "the watched directory " + w->path + " is gone"};
    }
    if (w->watch.scanning()) {
      co_await OffThread(ctx, [&] {
        w->watch.Scan(w->fs);
        return true;
      });
    }
    if (!batch.more && !w->watch.scanning()) break;
  }
  w->busy = false;
  if (failed) {
    // The watcher can tell no more: it is removed, as envd removes one whose watch failed.
    w.reset();
    std::vector<Watcher> gone;
    if (Watcher unlisted = Unlist(found->id)) gone.push_back(std::move(unlisted));
    found->watcher.reset();
    co_await Retire(ctx, std::move(gone));
    co_return co_await ReplyError(ctx, *failed);
  }
  json::object out;
  out["events"] = std::move(events);
  co_await ReplyMessage(ctx, out);
}

asio::awaitable<void> RemoveWatcher(Context& ctx, Target& t, const json::object& m) {
  auto found = FindWatcher(t, m);
  if (!found) co_return co_await ReplyError(ctx, found.error());
  found->watcher.reset();
  std::vector<Watcher> gone;
  if (Watcher unlisted = Unlist(found->id)) gone.push_back(std::move(unlisted));
  co_await Retire(ctx, std::move(gone));
  co_await ReplyMessage(ctx, json::object());
}

}  // namespace

asio::awaitable<void> FilesystemRpc(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto message = RequestMessage(ctx);
  if (!message) co_return co_await ReplyError(ctx, message.error());
  auto target = OpenFiles(ctx, **sb);
  if (!target) co_return co_await ReplyError(ctx, target.error());
  const std::string& method = ctx.params.at(0);
  if (method == "Stat") co_return co_await Stat(ctx, *target, *message);
  if (method == "MakeDir") co_return co_await MakeDir(ctx, *target, *message);
  if (method == "Move") co_return co_await Move(ctx, *target, *message);
  if (method == "ListDir") co_return co_await ListDir(ctx, *target, *message);
  if (method == "Remove") co_return co_await Remove(ctx, *target, *message);
  if (method == "WatchDir") co_return co_await WatchDir(ctx, *target, *message);
  if (method == "CreateWatcher") co_return co_await CreateWatcher(ctx, *target, *message);
  if (method == "GetWatcherEvents") co_return co_await GetWatcherEvents(ctx, *target, *message);
  if (method == "RemoveWatcher") co_return co_await RemoveWatcher(ctx, *target, *message);
  co_await FailConnect(ctx, "unimplemented",
                       "filesystem.Filesystem/" + method + " is not served by sandstream");
}

}  // namespace sandstream::api::e2b
