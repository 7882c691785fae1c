// The bytes of an upload on their way into one of a sandbox's files. A writer process in the
// sandbox's cgroups takes them through a pipe (Sandbox::StartFileWriter), so the sandbox's
// memory pays for the tmpfs pages they fill, not the daemon's; where there is no writer, the
// daemon writes them on its blocking pool, still within the sandbox's disk limit. Either way
// nothing here blocks the event loop, and a writer that makes no progress for kStall is killed.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/awaitable.hpp>

#include "base/result.h"
#include "sandbox/files.h"
#include "sandbox/runtime.h"

namespace sandstream {

class Service;

class FileSink {
 public:
  static constexpr std::chrono::seconds kStall{60};

  // `file` (opened by SandboxFs::OpenWrite on sandbox `sandbox_id`'s files; "": a volume's,
  // which the daemon writes) must stay open until Close() has returned.
  static boost::asio::awaitable<Result<FileSink>> Open(Service& service, std::string sandbox_id,
                                                       const sandbox::OpenedFile& file);
  FileSink(FileSink&& other) noexcept
      : service_(other.service_),
        sandbox_id_(std::move(other.sandbox_id_)),
        file_(other.file_),
        writer_(std::exchange(other.writer_, std::nullopt)),
        failed_(std::move(other.failed_)),
        finished_(other.finished_) {}
  FileSink& operator=(FileSink&&) = delete;
  // A writer still running (Close() was not reached) is killed.
  ~FileSink();

  // All of `data` at the file's offset; after a failure, that failure again.
  boost::asio::awaitable<Result<void>> Write(std::string_view data);
  // No more data: waits for the writer to finish and says whether everything was written.
  boost::asio::awaitable<Result<void>> Close();
  // Whether a writer in the sandbox's cgroups writes (false: the daemon does).
  bool charged_to_sandbox() const { return writer_.has_value(); }

 private:
  FileSink(Service& service, std::string sandbox_id, const sandbox::OpenedFile& file,
           std::optional<sandbox::FileWriter> writer)
      : service_(&service),
        sandbox_id_(std::move(sandbox_id)),
        file_(&file),
        writer_(std::move(writer)) {}
  // Ends the writer (input closed) and reads how it ended.
  boost::asio::awaitable<Result<void>> Finish();

  Service* service_;
  std::string sandbox_id_;
  const sandbox::OpenedFile* file_;
  std::optional<sandbox::FileWriter> writer_;
  std::optional<Error> failed_;
  bool finished_ = false;
};

}  // namespace sandstream
