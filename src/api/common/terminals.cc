#include "api/common/terminals.h"

#include <charconv>
#include <string>

#include "api/common/terminal_control.h"
#include "api/stream.h"
#include "api/websocket.h"
#include "base/ids.h"

namespace sandstream::api {
namespace asio = boost::asio;

namespace {

// A login shell: bash where the sandbox has it, else sh.
constexpr const char* kLoginShell =
    "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";

asio::awaitable<void> OnTerminalMessage(WebSocket& ws, Terminal* terminal,
                                        WebSocket::Message message, const TerminalWire& wire) {
  std::string input;
  if (!message.binary || IsBinaryControl(message.data)) {
    std::string_view text(message.data);
    if (message.binary) text.remove_prefix(1);
    auto applied = ApplyControl(terminal, text);
    if (!applied) {
      ws.Send(wire.error(applied.error()), false);
      co_return;
    }
    input = std::move(*applied);
  } else {
    input = std::move(message.data);
  }
  if (terminal && !input.empty()) co_await terminal->Write(std::move(input));
}

// Replays what the terminal's log retains (then says it is `ready`, on wires that do), then
// follows it; ends with the exit and a close. Output missed later (a skipping client that fell
// behind) is named in a `gap` message; the start of the replay is not news.
asio::awaitable<void> PumpTerminal(WebSocket& ws, OutputCursor& cursor, const bool& ended,
                                   SteadyClock::duration grace, const TerminalWire& wire) {
  WebSocket::Sink sink(ws, ended);
  Process& p = cursor.process();
  bool replayed = false;
  bool ready = wire.ready == nullptr;
  const auto render = [&](const OutputLog::Slice& slice) {
    if (slice.gap && replayed && wire.gap) ws.Send(wire.gap(p, *slice.gap), false);
    replayed = true;
    std::string bytes;
    for (const LogEntry* e : slice.entries) {
      if (e->kind == EntryKind::kStdout || e->kind == EntryKind::kStderr) bytes += e->data;
    }
    if (!bytes.empty()) ws.Send(std::move(bytes), true);
    if (!ready && cursor.after_seq() >= p.log().last_seq()) {
      ws.Send(wire.ready(p), false);
      ready = true;
    }
    if (!slice.entries.empty() && slice.entries.back()->kind == EntryKind::kExit) {
      ws.Send(wire.exit(p), false);
    }
  };
  const StreamEnd end = co_await Pump(cursor, sink, render, true);
  if (end == StreamEnd::kEnded) ws.Close(websocket::close_code::normal);
  if (end == StreamEnd::kGone) cursor.Park(grace);
}

}  // namespace

Result<void> RequireUpgrade(const Context& ctx) {
  if (websocket::is_upgrade(ctx.req)) return Ok{};
  return Invalid("this route is a WebSocket: send a GET with Upgrade: websocket");
}

Result<std::optional<int>> CellsQuery(const Context& ctx, std::string_view name) {
  auto text = ctx.Query(name);
  if (!text || text->empty()) return std::optional<int>();
  int value = 0;
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || ptr != text->data() + text->size() || value < 1 || value > kMaxCells) {
    return Invalid(std::string(name) + " must be between 1 and " + std::to_string(kMaxCells));
  }
  return std::optional<int>(value);
}

Result<OpenedTerminal> FindTerminal(Context& ctx, const SandboxEntry& sb, std::string_view id,
                                    std::optional<int> rows, std::optional<int> cols) {
  auto p = sb.FindProcess(id);
  if (!p || !p->spec().pty) {
    return Error{ErrorCode::kNotFound,
                 "no terminal '" + std::string(id) + "' in sandbox '" + sb.id + "'"};
  }
  OpenedTerminal opened{p, nullptr};
  if (p->status() == ProcessStatus::kRunning) {
    opened.terminal = Terminal::Find(p->id());
    if (!opened.terminal) {
      opened.terminal =
          Terminal::Adopt(ctx.stream.get_executor(), p, ctx.server.options().terminal_idle);
    }
    if (rows || cols) {
      const auto current = *p->spec().pty;
      (void)opened.terminal->Resize({static_cast<uint16_t>(rows.value_or(current.rows)),
                                     static_cast<uint16_t>(cols.value_or(current.cols))});
    }
  }
  return opened;
}

asio::awaitable<Result<OpenedTerminal>> StartTerminal(Context& ctx, const SandboxEntry& sb,
                                                      TerminalStart start) {
  const auto& options = ctx.server.options();
  CommandSpec spec;
  spec.id = start.id.empty() ? NewId("term_") : std::move(start.id);
  if (start.cmd.find('\0') != std::string::npos) {
    co_return Invalid("cmd must not contain NUL bytes");
  }
  spec.cmd = start.cmd;
  spec.argv = {"/bin/sh", "-c", start.cmd.empty() ? std::string(kLoginShell) : start.cmd};
  spec.env = ctx.service.ComposeEnv(sb, {});
  spec.cwd = sb.cwd;
  spec.as_root = start.as_root;
  spec.pty = sandbox::PtySize{static_cast<uint16_t>(start.rows.value_or(24)),
                              static_cast<uint16_t>(start.cols.value_or(80))};
  spec.log_limits = ctx.service.options().default_log_limits;
  spec.log_limits.max_bytes = options.terminal_replay_bytes;
  Result<Service::Started> p = co_await ctx.service.StartProcess(sb.id, std::move(spec));
  if (!p) co_return std::move(p).error();
  auto terminal = Terminal::Adopt(ctx.stream.get_executor(), p->process, options.terminal_idle);
  co_return OpenedTerminal{p->process, std::move(terminal)};
}

asio::awaitable<void> ServeTerminal(Context& ctx, OpenedTerminal opened, Flow flow,
                                    const TerminalWire& wire) {
  WebSocket ws(ctx);
  if (!co_await ws.Accept()) co_return;
  std::optional<Terminal::Attachment> attachment;
  if (opened.terminal) attachment.emplace(opened.terminal->Attach());
  if (wire.start) ws.Send(wire.start(*opened.process), false);
  OutputCursor cursor(opened.process, ctx.stream.get_executor(), 0, flow);
  bool ended = false;
  TaskGroup pump(ctx.stream.get_executor());
  pump.Spawn(PumpTerminal(ws, cursor, ended, ctx.service.options().resume_grace, wire));
  for (;;) {
    auto message = co_await ws.Read();
    if (!message) break;
    co_await OnTerminalMessage(ws, opened.terminal.get(), std::move(*message), wire);
  }
  ended = true;
  cursor.Wake();
  co_await pump.Join();
  co_await ws.Finish();
}

}  // namespace sandstream::api
