// /ws/pty: the terminal of a Cloudflare session, as the package's xterm addon speaks to it.
// One terminal per session id, kept across connections (a reconnect gets its screen back); a
// new one once the last has exited. Output and input are binary frames; text frames are JSON:
// {"type":"resize","cols","rows"} in, {"type":"ready"}, {"type":"exit","code","signal"?} and
// {"type":"error","message"} out.
#include <chrono>
#include <csignal>
#include <cstdio>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "api/cloudflare/routes.h"
#include "api/common/lookup.h"
#include "api/common/terminals.h"
#include "api/stream.h"

namespace sandstream::api::cloudflare {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The terminals a session may have had before this one (each ended): past it, a 429.
constexpr int kTerminalsPerSession = 64;
// How long a connection waits for its session's terminal that another connection is starting.
constexpr auto kStartWait = std::chrono::milliseconds(20);
constexpr int kStartWaits = 250;

std::string Ready(const Process&) {
  return R"({"type":"ready"})";
}

std::string Exit(const Process& p) {
  json::object o{{"type", "exit"}, {"code", p.exit() ? p.exit()->exit_code : -1}};
  if (p.exit() && p.exit()->signal) o["signal"] = ::sigabbrev_np(*p.exit()->signal);
  return json::serialize(o);
}

std::string ErrorMessage(const Error& e) {
  return json::serialize(json::object{{"type", "error"}, {"message", e.message}});
}

const TerminalWire kWire{nullptr, Ready, Exit, nullptr, ErrorMessage};

// The process id of a session's terminal: a stable digest of the session id (which may be any
// text) and which of its terminals it is.
std::string TerminalId(std::string_view session, int n) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : session) h = (h ^ c) * 1099511628211ull;
  char id[48];
  std::snprintf(id, sizeof id, "pty_%016llx.%d", static_cast<unsigned long long>(h), n);
  return id;
}

// The session's running terminal, or a new one.
asio::awaitable<Result<OpenedTerminal>> FindOrStart(Context& ctx, const SandboxEntry& sb,
                                                    std::string_view session,
                                                    std::optional<int> rows,
                                                    std::optional<int> cols) {
  for (int n = 1; n <= kTerminalsPerSession; ++n) {
    std::string id = TerminalId(session, n);
    auto p = sb.FindProcess(id);
    if (p && p->status() == ProcessStatus::kRunning) {
      co_return FindTerminal(ctx, sb, id, rows, cols);
    }
    if (p) continue;  // that one ended: the session's next
    TerminalStart start;
    start.id = std::move(id);
    start.cmd = std::string(ctx.Query("shell").value_or(""));
    start.rows = rows;
    start.cols = cols;
    co_return co_await StartTerminal(ctx, sb, std::move(start));
  }
  co_return Error{ErrorCode::kQuotaExceeded, "session '" + std::string(session) + "' has had " +
                                                 std::to_string(kTerminalsPerSession) +
                                                 " terminals"};
}

// FindOrStart; when another connection of the session is starting its terminal right now,
// that terminal, once it runs.
asio::awaitable<Result<OpenedTerminal>> SessionTerminal(Context& ctx, std::string sandbox_id,
                                                        std::string session) {
  auto rows = CellsQuery(ctx, "rows");
  if (!rows) co_return std::move(rows).error();
  auto cols = CellsQuery(ctx, "cols");
  if (!cols) co_return std::move(cols).error();
  for (int attempt = 0;; ++attempt) {
    const SandboxEntry* sb = ctx.service.Find(sandbox_id);
    if (!sb || sb->deleting)
      co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
    auto opened = co_await FindOrStart(ctx, *sb, session, *rows, *cols);
    if (opened || opened.error().code != ErrorCode::kConflict || attempt == kStartWaits) {
      co_return opened;
    }
    asio::steady_timer wait(ctx.stream.get_executor(), kStartWait);
    co_await wait.async_wait(asio::use_awaitable);
  }
}

}  // namespace

asio::awaitable<void> PtySocket(Context& ctx) {
  auto upgrade = RequireUpgrade(ctx);
  if (!upgrade) co_return co_await ReplyError(ctx, upgrade.error());
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  const std::string_view session = ctx.Query("sessionId").value_or("");
  if (session.empty()) {
    co_return co_await ReplyError(ctx, ErrorCode::kInvalidRequest,
                                  "sessionId is required for terminal access");
  }
  Result<OpenedTerminal> opened = co_await SessionTerminal(ctx, (*sb)->id, std::string(session));
  if (!opened) co_return co_await ReplyError(ctx, opened.error());
  // As the container does: a slow client holds the terminal back rather than lose its screen.
  co_await ServeTerminal(ctx, std::move(*opened), Flow::kWait, kWire);
}

}  // namespace sandstream::api::cloudflare
