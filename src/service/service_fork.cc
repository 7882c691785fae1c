// Forks: sandboxes made from another as it is now. With memory, one checkpoint of it (the
// runtime's CheckpointTo, which leaves it running) that each fork is restored from, taking the
// records of its processes and code contexts as its own (CreateSandbox, TakeBackRestored);
// without, a snapshot of its files as a template that each is made from.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "base/async.h"
#include "base/ids.h"
#include "base/log.h"
#include "platform/fd.h"
#include "process/await_op.h"
#include "service/codec.h"
#include "service/contexts.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

std::string Service::NewCheckpointDir(std::string_view prefix) const {
  std::error_code ec;
  std::filesystem::create_directories(options_.checkpoints_dir, ec);
  ::chmod(options_.checkpoints_dir.c_str(), 0700);
  return options_.checkpoints_dir + "/" + NewId(prefix);
}

asio::awaitable<Result<std::shared_ptr<const MemoryImage>>> Service::TakeMemoryImage(
    std::string sandbox_id, std::string dir, bool durable) {
  SandboxEntry* sb = Entry(sandbox_id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  // Nothing starts in it meanwhile, and its deletion waits.
  SandboxTurn turn(*sb);
  co_await turn.Take();
  if (auto live = CheckLive(*sb); !live) co_return std::move(live).error();
  if (auto woke = co_await WakeHeld(*sb); !woke) co_return std::move(woke).error();
  std::vector<std::shared_ptr<Process>> running;
  for (const auto& p : sb->processes) {
    if (!p->exit()) running.push_back(p);
  }
  // Their output stays in their pipes while it is written, so that each fork's log (the kept
  // copy of this one's) and pipe hold it exactly once; this sandbox reads it after.
  for (const auto& p : running) p->Detach();
  Result<void> written = co_await Await(sb->runtime->CheckpointTo(dir, durable));
  for (const auto& p : running) p->Rebind(std::nullopt);
  if (!written) co_return std::move(written).error();
  auto image = std::make_shared<MemoryImage>();
  image->dir = std::move(dir);
  image->source = sb->id;
  for (const auto& p : running) {
    image->processes.push_back(
        json::serialize(StoredProcessJson(*p, options_.retained_tail_bytes)));
  }
  for (const auto& [id, context] : sb->contexts) {
    image->contexts.push_back(json::serialize(context->Stored()));
  }
  co_return image;
}

asio::awaitable<void> Service::CreateFork(SandboxRequest req, std::shared_ptr<ForkBatch> batch,
                                          size_t i) {
  Result<const SandboxEntry*> made = co_await CreateSandbox(std::move(req));
  batch->made[i] = made ? Result<std::string>((*made)->id) : Result<std::string>(made.error());
  if (--batch->left == 0) batch->done.Notify();
}

asio::awaitable<Result<std::vector<const SandboxEntry*>>> Service::ForkSandbox(
    std::string sandbox_id, std::string name, std::string by, int count, bool memory) {
  if (shutting_down_) co_return Error{ErrorCode::kShuttingDown, "sandstreamd is shutting down"};
  const SandboxEntry* sb = Find(sandbox_id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  if (count < 1 || count > kMaxForks) {
    co_return Error{ErrorCode::kInvalidRequest,
                    "count must be from 1 to " + std::to_string(kMaxForks)};
  }
  const SteadyTime asked = SteadyNow();
  // Its settings now: the sandbox may change or go while it is written.
  SandboxRequest req = ForkRequest(*sb, by);
  std::string dir;
  if (memory) {
    std::error_code ec;
    dir = NewCheckpointDir("fork_");
    auto image = co_await TakeMemoryImage(sandbox_id, dir, false);
    if (!image) {
      std::filesystem::remove_all(dir, ec);
      co_return Error{image.error().code, "fork: " + image.error().message};
    }
    req.memory = std::move(*image);
  } else {
    auto made = co_await SnapshotSandbox(sandbox_id, name);
    if (!made) co_return std::move(made).error();
    req.template_name = name;
  }
  // All made at once: a restore waits on the disk and the kernel as much as on a CPU.
  auto batch = std::make_shared<ForkBatch>(ex_, static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    Spawn(ex_, CreateFork(req, batch, static_cast<size_t>(i)), "fork of " + sandbox_id);
  }
  while (batch->left > 0) co_await batch->done.Wait();
  std::vector<std::string> ids;
  Result<void> made = Ok{};
  for (auto& fork : batch->made) {
    if (fork) {
      ids.push_back(*fork);
    } else if (made) {
      made = std::move(fork).error();
    }
  }
  // Each fork has its own links to the images by now: the checkpoint's own go.
  if (memory) {
    auto remove = [dir] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      return ec;
    };
    if (std::error_code ec = co_await OffThread(blocking_pool_, std::move(remove)); ec) {
      log::Warn("a fork's checkpoint could not be removed",
                {{"path", dir}, {"error", ec.message()}});
    }
  }
  if (!made) {
    // All or none.
    for (const std::string& id : ids) (void)co_await DeleteSandbox(id);
    if (!memory) (void)co_await DeleteTemplate(name);
    co_return std::move(made).error();
  }
  if (memory) {
    metrics_.forks_total += ids.size();
    metrics_.fork_duration.Observe(std::chrono::duration<double>(SteadyNow() - asked).count());
  }
  json::array forked;
  for (const std::string& id : ids) forked.push_back(json::value(id));
  Audit(sandbox_id, "sandbox.forked",
        std::to_string(ids.size()) + (memory ? " fork(s) with its running processes"
                                             : " fork(s) of its files, from template " + name),
        {{"forks", std::move(forked)}, {"memory", memory}});
  std::vector<const SandboxEntry*> forks;
  for (const std::string& id : ids) {
    if (const SandboxEntry* fork = Find(id)) forks.push_back(fork);
  }
  co_return forks;
}

asio::awaitable<Result<const Template*>> Service::MemorySnapshot(std::string sandbox_id,
                                                                 std::string name) {
  const SandboxEntry* sb = Find(sandbox_id);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
  const TemplateService::SnapshotSource from{sb->id, sb->template_name, sb->tenant, {}, {}, 0};
  if (auto reserved = template_service_.ReserveSnapshot(name, from.tenant); !reserved) {
    co_return std::move(reserved).error();
  }
  std::error_code ec;
  const std::string dir = NewCheckpointDir("snapshot_");
  auto image = co_await TakeMemoryImage(sandbox_id, dir, true);
  Result<void> written = image ? Result<void>(Ok{}) : Result<void>(image.error());
  if (written) {
    // The daemon's from here: the source's ids may be another sandbox's once it is gone.
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      if (::lchown(entry.path().c_str(), 0, 0) != 0)
        written = SysError(ErrorCode::kInternal, "snapshot: chown " + entry.path().string(), errno);
    }
    if (::chown(dir.c_str(), 0, 0) != 0)
      written = SysError(ErrorCode::kInternal, "snapshot: chown " + dir, errno);
  }
  if (written) {
    // Written last: a directory without it is one a dying daemon left (RemoveLeftoverCheckpoints).
    json::array processes, contexts;
    for (const std::string& row : (*image)->processes) processes.push_back(json::parse(row));
    for (const std::string& row : (*image)->contexts) contexts.push_back(json::parse(row));
    const json::object records{{"source", sandbox_id},
                               {"processes", std::move(processes)},
                               {"contexts", std::move(contexts)}};
    written = WriteFileAtomic(dir + "/" + kMemoryRecordsFile, json::serialize(records), 0600);
  }
  Result<const Template*> made = written ? template_service_.CommitMemorySnapshot(name, from, dir)
                                         : Result<const Template*>(written.error());
  if (!written) template_service_.AbandonSnapshot(name);
  if (!made) {
    std::filesystem::remove_all(dir, ec);
    co_return Error{made.error().code, "snapshot: " + made.error().message};
  }
  Audit(sandbox_id, "sandbox.snapshot", "snapshot with its memory taken as template " + name,
        {{"template", name}, {"memory", true}});
  co_return made;
}

Result<std::shared_ptr<const MemoryImage>> Service::MemoryOf(const Template& t) const {
  auto text = ReadFile(t.checkpoint + "/" + kMemoryRecordsFile);
  if (!text) {
    return Error{ErrorCode::kConflict, "template '" + t.name + "': its checkpoint is gone (" +
                                           text.error().message + ")"};
  }
  auto image = std::make_shared<MemoryImage>();
  image->dir = t.checkpoint;
  try {
    const json::object o = json::parse(*text).as_object();
    image->source = json::value_to<std::string>(o.at("source"));
    for (const auto& v : o.at("processes").as_array())
      image->processes.push_back(json::serialize(v));
    for (const auto& v : o.at("contexts").as_array()) image->contexts.push_back(json::serialize(v));
  } catch (const std::exception& e) {
    return Error{ErrorCode::kInternal,
                 "template '" + t.name + "': unreadable " + kMemoryRecordsFile + ": " + e.what()};
  }
  return std::shared_ptr<const MemoryImage>(std::move(image));
}

void Service::RemoveLeftoverCheckpoints() {
  // A fork's checkpoint lives while the forks are made; a snapshot's while its template does.
  std::set<std::string> kept;
  for (const Template* t : templates().List()) {
    if (!t->checkpoint.empty()) kept.insert(t->checkpoint);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.checkpoints_dir, ec)) {
    if (kept.contains(entry.path().string())) continue;
    log::Info("removing a leftover checkpoint", {{"path", entry.path().string()}});
    std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace sandstream
