#include "api/common/exec.h"

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/common/session_exec.h"
#include "base/base64.h"
#include "base/utf8.h"
#include "service/service.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Copies every chunk as it is appended, up to a cap per stream. It listens synchronously, so
// it sees every byte even when the log window is smaller than the output.
class Collector final : public OutputLog::Listener {
 public:
  Collector(OutputLog& log, uint64_t cap) : log_(log), cap_(cap) {
    log_.AddListener(this);
    OnAppend();
  }
  ~Collector() override { log_.RemoveListener(this); }

  void OnAppend() override {
    auto slice = log_.Read(after_, UINT64_MAX);
    if (slice.gap) truncated_ = true;
    for (const LogEntry* e : slice.entries) {
      after_ = e->seq;
      if (e->kind != EntryKind::kStdout && e->kind != EntryKind::kStderr) continue;
      std::string& dst = e->kind == EntryKind::kStdout ? stdout_ : stderr_;
      if (dst.size() + e->data.size() <= cap_) {
        dst += e->data;
      } else {
        truncated_ = true;
        dst.append(e->data, 0, cap_ - dst.size());
      }
    }
  }

  std::string& stdout_text() { return stdout_; }
  std::string& stderr_text() { return stderr_; }
  bool truncated() const { return truncated_; }

 private:
  OutputLog& log_;
  uint64_t cap_;
  uint64_t after_ = 0;
  std::string stdout_;
  std::string stderr_;
  bool truncated_ = false;
};

std::string Encode(std::string& bytes, sse::Encoding encoding) {
  if (encoding == sse::Encoding::kBase64) return Base64(bytes);
  std::string out;
  // A cap may have cut a code point: drop the incomplete tail rather than mangle it.
  AppendSanitizedUtf8(out, std::string_view(bytes).substr(0, Utf8CompletePrefix(bytes)));
  return out;
}

}  // namespace

asio::awaitable<Result<Started>> StartCommand(Context& ctx, const json::object& body) {
  auto sb = FindSandbox(ctx);
  if (!sb) co_return std::move(sb).error();
  auto req = ParseCommand(ctx, body, **sb, CommandKind::kExec);
  if (!req) co_return std::move(req).error();
  if (const json::value* session = body.if_contains("session"); session && !session->is_null()) {
    auto p = co_await StartInSession(ctx, **sb, body, *req);
    if (!p) co_return std::move(p).error();
    Started started{std::move(*p), std::move(*req)};
    co_return started;
  }
  Result<Service::Started> p = co_await ctx.service.StartProcess((*sb)->id, req->spec);
  if (!p) co_return std::move(p).error();
  Started started{std::move(p->process), std::move(*req)};
  co_return started;
}

asio::awaitable<Collected> CollectOutput(Context& ctx, std::shared_ptr<Process> process,
                                         sse::Encoding encoding) {
  Collector collector(process->log(), ctx.service.options().exec_output_limit_bytes);
  co_await process->WaitExit();
  Collected out;
  out.stdout_text = Encode(collector.stdout_text(), encoding);
  out.stderr_text = Encode(collector.stderr_text(), encoding);
  out.truncated = collector.truncated();
  co_return out;
}

}  // namespace sandstream::api
