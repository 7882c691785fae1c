// Templates and the images under them, as the API makes and deletes them: imports of image
// archives, registry pulls, snapshots of a sandbox's writable layer, deletion. The image work
// runs on the ImageWork pool, one job of a tenant at a time; what the event loop does here is
// bookkeeping. The Service owns one, and says what only it knows: which sandbox uses a
// template, what a sandbox's writable layer is.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "base/result.h"
#include "image/registry.h"
#include "image/store.h"
#include "platform/unique_fd.h"
#include "service/image_work.h"
#include "service/options.h"
#include "service/quota_ledger.h"
#include "service/store.h"
#include "service/templates.h"

namespace sandstream {

class TemplateService {
 public:
  // Loads the templates (templates.h) and collects, on the image work, what an earlier daemon
  // left half made. `options` and `quotas` outlive it.
  TemplateService(boost::asio::any_io_executor ex, const ServiceOptions& options, Store& store,
                  const QuotaLedger& quotas);

  const Templates& templates() const { return templates_; }
  static bool MayUse(const Template& t, std::string_view tenant, bool admin) {
    return admin || t.tenant.empty() || t.tenant == tenant;
  }

  // A template of `tenant` made from an image archive (`archive`, a file the import reads) or
  // pulled from a registry (`credentials` for this pull only, never kept), reporting its
  // progress on the event loop as it goes.
  using Progress = std::function<void(boost::json::object)>;
  boost::asio::awaitable<Result<const Template*>> Import(std::string name, std::string tenant,
                                                         UniqueFd archive, Progress progress);
  boost::asio::awaitable<Result<const Template*>> Pull(std::string name, std::string tenant,
                                                       image::Reference image,
                                                       image::Credentials credentials,
                                                       Progress progress);

  // What a snapshot is taken of: sandbox `sandbox_id` of `tenant`, made from `template_name`;
  // its writable layer `upper` (files owned from host id `base_id` up), at most `disk_bytes`.
  struct SnapshotSource {
    std::string sandbox_id;
    std::string template_name;
    std::string tenant;
    std::string upper;
    std::optional<uint32_t> base_id;
    uint64_t disk_bytes = 0;
  };
  // Template `name`: the source's template's layers and, on top, a copy of its writable layer
  // (each file as it is when read). It belongs to the source's tenant.
  boost::asio::awaitable<Result<const Template*>> Snapshot(std::string name, SnapshotSource from);

  // A memory snapshot's steps (Service::SnapshotSandbox takes the checkpoint between them):
  // name `name` held for the source's tenant, with room for it; then either given up, or
  // template `name` of the checkpoint in `dir` (which it owns from here, removed with it) over
  // the source's template's root.
  Result<void> ReserveSnapshot(const std::string& name, const std::string& tenant);
  void AbandonSnapshot(const std::string& name);
  Result<const Template*> CommitMemorySnapshot(const std::string& name, const SnapshotSource& from,
                                               const std::string& dir);

  // Deletes an image or snapshot template; `used_by`: a sandbox made from it, which refuses it.
  boost::asio::awaitable<Result<void>> Delete(std::string name, std::string used_by);

  // The daemon is stopping: nothing more is made, and a download in flight ends.
  void Stop() { stopping_ = true; }

 private:
  // `job` makes the image on the image thread (from an archive, a registry), then it is
  // recorded as `name`, with `source` saying where it came from.
  using ImageJob =
      std::function<Result<image::Image>(image::Store& store, const image::Progress& progress)>;
  boost::asio::awaitable<Result<const Template*>> Make(std::string name, std::string tenant,
                                                       std::string source, ImageJob job,
                                                       Progress progress);
  Result<void> CheckStopping() const;
  // Layers that no template or pin names go, on the image work.
  void CollectSoon();

  boost::asio::any_io_executor ex_;
  const ServiceOptions& options_;
  const QuotaLedger& quotas_;
  Templates templates_;
  // Read by pulls on the image thread: set, a download in flight ends.
  std::atomic<bool> stopping_{false};
  // Imports, pulls, snapshots and collections: minutes of disk and network work that must not
  // hold the pool the sandboxes' file syscalls take; one job of a tenant at a time, tenants in
  // turn, so that one tenant's slow pull never holds another's import. Declared last, so
  // stopped first: its jobs reach `templates_`.
  ImageWork image_work_{options_.image_workers};
};

}  // namespace sandstream
