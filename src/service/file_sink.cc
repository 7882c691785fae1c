#include "service/file_sink.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "base/async.h"
#include "platform/signals.h"
#include "process/await_op.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;

asio::awaitable<Result<FileSink>> FileSink::Open(Service& service, std::string sandbox_id,
                                                 const sandbox::OpenedFile& file) {
  // A volume's file: its own filesystem bounds it, and the daemon writes.
  if (sandbox_id.empty()) co_return FileSink(service, std::string(), file, std::nullopt);
  Result<std::optional<sandbox::FileWriter>> writer =
      co_await service.StartFileWriter(sandbox_id, file.fd.get());
  if (!writer) co_return std::move(writer).error();
  co_return FileSink(service, std::move(sandbox_id), file, std::move(*writer));
}

FileSink::~FileSink() {
  if (!writer_ || finished_) return;
  (void)SignalPidfd(writer_->pidfd.get(), SIGKILL);
  service_->ForgetFileWriter(sandbox_id_, writer_->pid);
}

asio::awaitable<Result<void>> FileSink::Write(std::string_view data) {
  if (failed_) co_return *failed_;
  if (!writer_) {
    Result<void> written =
        co_await OffThread(service_->blocking_pool(), [&] { return file_->Write(data); });
    if (!written) failed_ = written.error();
    co_return written;
  }
  // Each write moves at most a pipe's worth; then the writer's progress is awaited.
  while (!data.empty()) {
    const ssize_t n = ::write(writer_->input.get(), data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      const bool ready =
          co_await AwaitWritable(sandbox::WaitFor{writer_->input.get(), sandbox::In(kStall)});
      if (ready) continue;
      (void)SignalPidfd(writer_->pidfd.get(), SIGKILL);
    }
    // EPIPE: the writer stopped (a full disk, the sandbox deleted); its status says why.
    Result<void> finished = co_await Finish();
    failed_ = finished ? Error{ErrorCode::kInternal,
                               "files: write " + file_->info.path + ": the writer ended early"}
                       : finished.error();
    co_return *failed_;
  }
  co_return Ok{};
}

asio::awaitable<Result<void>> FileSink::Close() {
  if (failed_) co_return *failed_;
  if (!writer_) co_return Ok{};
  Result<void> finished = co_await Finish();
  if (!finished) failed_ = finished.error();
  co_return finished;
}

asio::awaitable<Result<void>> FileSink::Finish() {
  finished_ = true;
  writer_->input.reset();
  const int fd = writer_->exit_fd.get();
  // The keeper writes the status when it reaps the writer. A wake-up is no promise that it is
  // there (Asio may report an event meant for a descriptor it had before): read until it is,
  // or until end of file.
  const sandbox::Deadline deadline = sandbox::In(kStall);
  int status = 0;
  ssize_t n = -1;
  bool ended = true;
  for (;;) {
    n = ::read(fd, &status, sizeof status);
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) break;
    if (errno == EINTR) continue;
    if (!co_await AwaitReadable(sandbox::WaitFor{fd, deadline})) {
      ended = false;
      break;
    }
  }
  service_->ForgetFileWriter(sandbox_id_, writer_->pid);
  const std::string& path = file_->info.path;
  if (!ended) {
    (void)SignalPidfd(writer_->pidfd.get(), SIGKILL);
    co_return Error{ErrorCode::kInternal, "files: write " + path + ": no progress for " +
                                              std::to_string(kStall.count()) + " s"};
  }
  if (WIFEXITED(status) && n == static_cast<ssize_t>(sizeof status)) {
    if (WEXITSTATUS(status) == 0) co_return Ok{};
    co_return sandbox::WriteError(path, WEXITSTATUS(status));
  }
  // Killed with its sandbox, or no status at all: the keeper went with it.
  const SandboxEntry* sb = service_->Find(sandbox_id_);
  if (!sb || sb->deleting || n != static_cast<ssize_t>(sizeof status)) {
    co_return Error{ErrorCode::kNotFound,
                    "files: write " + path + ": the sandbox went away during the upload"};
  }
  co_return Error{ErrorCode::kInternal, "files: write " + path + ": the writer was killed by " +
                                            SignalName(WTERMSIG(status))};
}

}  // namespace sandstream
