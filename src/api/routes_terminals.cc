// The WebSocket routes: a terminal in a sandbox (GET exec/pty), which outlives its connections
// and replays its screen to each new one, and many commands over one connection (GET exec/ws).
#include <charconv>
#include <cmath>
#include <set>

#include <boost/json.hpp>

#include "api/lookup.h"
#include "api/request.h"
#include "api/routes.h"
#include "api/sse.h"
#include "api/stream.h"
#include "api/terminal_control.h"
#include "api/terminals.h"
#include "api/websocket.h"
#include "base/base64.h"
#include "base/ids.h"
#include "process/terminal.h"
#include "service/codec.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

constexpr int kMaxCells = 1000;

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

namespace {

// A login shell: bash where the sandbox has it, else sh.
constexpr const char* kLoginShell =
    "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";

Result<int> Cells(const json::value* v, std::string_view name) {
  if (!v || !v->is_number()) return Invalid(std::string(name) + " must be an integer");
  const double d = v->to_number<double>();
  // In range before the cast: a double past int's range does not convert (1e300 rows).
  if (!(d >= 1 && d <= kMaxCells) || d != std::trunc(d)) {
    return Invalid(std::string(name) + " must be between 1 and " + std::to_string(kMaxCells));
  }
  return static_cast<int>(d);
}

json::object ErrorJson(const Error& e) {
  return json::object{{"code", ErrorCodeName(e.code)}, {"message", e.message}};
}

// ---- terminals ----

}  // namespace

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

namespace {

asio::awaitable<Result<OpenedTerminal>> OpenTerminal(Context& ctx) {
  if (auto r = RequireUpgrade(ctx); !r) co_return std::move(r).error();
  auto sb = FindSandbox(ctx);
  if (!sb) co_return std::move(sb).error();
  auto rows = CellsQuery(ctx, "rows");
  if (!rows) co_return std::move(rows).error();
  auto cols = CellsQuery(ctx, "cols");
  if (!cols) co_return std::move(cols).error();
  if (auto id = ctx.Query("terminal_id"); id && !id->empty()) {
    co_return FindTerminal(ctx, **sb, *id, *rows, *cols);
  }
  auto user = ctx.Query("user").value_or("user");
  if (user != "user" && user != "root") co_return Invalid("user must be \"user\" or \"root\"");
  TerminalStart start;
  start.cmd = std::string(ctx.Query("cmd").value_or(""));
  start.as_root = user == "root";
  start.rows = *rows;
  start.cols = *cols;
  co_return co_await StartTerminal(ctx, **sb, std::move(start));
}

std::string StartMessage(const Process& p) {
  return json::serialize(json::object{{"type", "start"},
                                      {"terminal_id", p.id()},
                                      {"sandbox_id", p.spec().sandbox_id},
                                      {"pid", p.pid()}});
}

std::string ExitMessage(const Process& p) {
  json::object o{{"type", "exit"}, {"terminal_id", p.id()}};
  const json::value exit = ExitJson(p.exit());
  for (const auto& [k, v] : exit.as_object()) o[k] = v;
  return json::serialize(o);
}

std::string ControlError(const Error& e) {
  json::object o{{"type", "error"}};
  for (const auto& [k, v] : ErrorJson(e)) o[k] = v;
  return json::serialize(o);
}

json::object GapJson(const Gap& gap) {
  json::object o{{"from_seq", gap.from_seq}, {"to_seq", gap.to_seq}};
  o["bytes"] = gap.bytes ? json::value(*gap.bytes) : json::value(nullptr);
  return o;
}

std::string GapMessage(const Process& p, const Gap& gap) {
  json::object o = GapJson(gap);
  o["type"] = "gap";
  o["terminal_id"] = p.id();
  return json::serialize(o);
}

// exec/pty's own messages (spec/README.md, "Terminals").
const TerminalWire kSandstreamWire{StartMessage, nullptr, ExitMessage, GapMessage, ControlError};

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

// ---- multiplexed exec ----

struct ExecConnection {
  ExecConnection(Context& c, WebSocket& w, std::string sandbox)
      : ctx(c), ws(w), sandbox_id(std::move(sandbox)), pumps(c.stream.get_executor()) {}
  Context& ctx;
  WebSocket& ws;
  std::string sandbox_id;
  TaskGroup pumps;
  // By the client's id, serialized; null while it starts.
  std::map<std::string, std::shared_ptr<Process>> running;
  std::set<std::string> cancel_on_start;
  std::set<OutputCursor*> cursors;
  bool ended = false;  // the client closed the connection
};

std::string Tagged(const json::value& id, std::string_view key, json::value value) {
  return json::serialize(json::object{{"id", id}, {key, std::move(value)}});
}

void AppendChunkMessage(std::string& out, const std::string& id_json, EntryKind kind,
                        std::string_view data, sse::Encoding encoding) {
  out += "{\"id\":";
  out += id_json;
  out += kind == EntryKind::kStdout ? ",\"stream\":\"stdout\",\"data\":"
                                    : ",\"stream\":\"stderr\",\"data\":";
  if (encoding == sse::Encoding::kBase64) {
    out += '"';
    AppendBase64(out, data);
    out += '"';
  } else {
    sse::AppendJsonString(out, data);
  }
  out += '}';
}

asio::awaitable<void> PumpCommand(ExecConnection& conn, json::value id, std::string key,
                                  std::shared_ptr<Process> p, sse::Encoding encoding, Flow flow) {
  OutputCursor cursor(p, conn.ctx.stream.get_executor(), 0, flow);
  conn.cursors.insert(&cursor);
  WebSocket::Sink sink(conn.ws, conn.ended);
  const std::string id_json = json::serialize(id);
  const auto render = [&](const OutputLog::Slice& slice) {
    if (slice.gap) conn.ws.Send(Tagged(id, "gap", GapJson(*slice.gap)), false);
    // Consecutive chunks of one stream go out as one message.
    std::string pending;
    EntryKind pending_kind = EntryKind::kStdout;
    auto flush = [&] {
      if (pending.empty()) return;
      std::string msg;
      AppendChunkMessage(msg, id_json, pending_kind, pending, encoding);
      conn.ws.Send(std::move(msg), false);
      pending.clear();
    };
    for (const LogEntry* e : slice.entries) {
      if (e->kind == EntryKind::kStdout || e->kind == EntryKind::kStderr) {
        if (e->kind != pending_kind) flush();
        pending_kind = e->kind;
        pending += e->data;
      } else if (e->kind == EntryKind::kExit) {
        flush();
        conn.ws.Send(Tagged(id, "exit", ExitJson(p->exit())), false);
      }
    }
    flush();
  };
  const StreamEnd end = co_await Pump(cursor, sink, render, true);
  // The command runs on when the client goes; its output waits for a resume by process id.
  if (end == StreamEnd::kGone) cursor.Park(conn.ctx.service.options().resume_grace);
  conn.cursors.erase(&cursor);
  if (auto it = conn.running.find(key); it != conn.running.end() && it->second == p) {
    conn.running.erase(it);
  }
}

void SendError(ExecConnection& conn, const json::value& id, const Error& e) {
  conn.ws.Send(Tagged(id, "error", ErrorJson(e)), false);
}

// Starts one command of the connection (awaiting its spawn), then pumps its output.
asio::awaitable<void> RunCommand(ExecConnection& conn, json::value id, std::string key,
                                 CommandRequest req) {
  Result<Service::Started> started =
      co_await conn.ctx.service.StartProcess(conn.sandbox_id, std::move(req.spec));
  if (!started) {
    conn.running.erase(key);
    conn.cancel_on_start.erase(key);
    SendError(conn, id, started.error());
    co_return;
  }
  auto p = started->process;
  conn.running[key] = p;
  if (conn.cancel_on_start.erase(key) > 0) p->Kill(ExitReason::kKilled);
  json::object start{{"process_id", p->id()}, {"pid", p->pid()}};
  conn.ws.Send(Tagged(id, "start", std::move(start)), false);
  co_await PumpCommand(conn, id, key, p, req.encoding, req.flow);
}

void OnExecMessage(ExecConnection& conn, const WebSocket::Message& message) {
  if (message.binary) {
    SendError(conn, nullptr, Invalid("exec/ws takes JSON text messages"));
    return;
  }
  boost::system::error_code ec;
  json::value v = json::parse(message.data, ec);
  if (ec || !v.is_object()) {
    SendError(conn, nullptr, Error{ErrorCode::kInvalidJson, "a message is a JSON object"});
    return;
  }
  auto& o = v.as_object();
  const json::value id = o.contains("id") ? o["id"] : json::value(nullptr);
  if (!id.is_string() && !id.is_int64() && !id.is_uint64()) {
    SendError(conn, id, Invalid("id must be a string or an integer"));
    return;
  }
  const std::string key = json::serialize(id);
  if (const json::value* cancel = o.if_contains("cancel"); cancel && *cancel == true) {
    auto it = conn.running.find(key);
    if (it == conn.running.end()) {
      SendError(conn, id, Error{ErrorCode::kNotFound, "no running command with id " + key});
      return;
    }
    // TERM to the whole group, KILL after the grace period; its exit follows as usual.
    if (it->second) {
      it->second->Kill(ExitReason::kKilled);
    } else {
      conn.cancel_on_start.insert(key);
    }
    return;
  }
  if (conn.running.contains(key)) {
    SendError(conn, id, Error{ErrorCode::kConflict, "a command with id " + key + " is running"});
    return;
  }
  const SandboxEntry* sb = conn.ctx.service.Find(conn.sandbox_id);
  if (!sb) {
    SendError(conn, id, Error{ErrorCode::kNotFound, "no sandbox '" + conn.sandbox_id + "'"});
    return;
  }
  o.erase("id");  // the client's tag, not a process id
  auto req = ParseCommand(conn.ctx, o, *sb, CommandKind::kExec);
  if (!req) {
    SendError(conn, id, req.error());
    return;
  }
  req->spec.idempotency_key.clear();  // the upgrade request's header is not this command's
  conn.running[key] = nullptr;
  conn.pumps.Spawn(RunCommand(conn, id, key, std::move(*req)));
}

}  // namespace

Result<std::string> ApplyControl(Terminal* terminal, std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object())
    return Error{ErrorCode::kInvalidJson, "a control message is a JSON object"};
  const auto& o = v.as_object();
  const json::value* type = o.if_contains("type");
  if (!type || !type->is_string()) return Invalid("a control message needs a string \"type\"");
  if (*type == "resize") {
    auto rows = Cells(o.if_contains("rows"), "rows");
    if (!rows) return std::move(rows).error();
    auto cols = Cells(o.if_contains("cols"), "cols");
    if (!cols) return std::move(cols).error();
    if (!terminal) return std::string();
    if (auto r = terminal->Resize({static_cast<uint16_t>(*rows), static_cast<uint16_t>(*cols)});
        !r && terminal->process().status() == ProcessStatus::kRunning) {
      return std::move(r).error();
    }
    return std::string();
  }
  if (*type == "input") {
    const json::value* data = o.if_contains("data");
    if (!data || !data->is_string()) return Invalid("input needs a string \"data\"");
    return std::string(data->as_string());
  }
  return Invalid("unknown control message type '" + std::string(type->as_string()) + "'");
}

bool IsBinaryControl(std::string_view data) {
  if (data.size() < 3 || data[0] != '\x01') return false;
  boost::system::error_code ec;
  json::value v = json::parse(data.substr(1), ec);
  return !ec && v.is_object();
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

asio::awaitable<void> ExecPty(Context& ctx) {
  // A client attached to a terminal holds its output back (as ssh does) unless ?flow=skip.
  auto flow = FlowFromQuery(ctx, Flow::kWait);
  if (!flow) co_return co_await ReplyError(ctx, flow.error());
  Result<OpenedTerminal> opened = co_await OpenTerminal(ctx);
  if (!opened) co_return co_await ReplyError(ctx, opened.error());
  co_await ServeTerminal(ctx, std::move(*opened), *flow, kSandstreamWire);
}

asio::awaitable<void> ExecWs(Context& ctx) {
  auto upgrade = RequireUpgrade(ctx);
  if (!upgrade) co_return co_await ReplyError(ctx, upgrade.error());
  auto sb = FindSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  WebSocket ws(ctx);
  if (!co_await ws.Accept()) co_return;
  ExecConnection conn(ctx, ws, (*sb)->id);
  for (;;) {
    auto message = co_await ws.Read();
    if (!message) break;
    OnExecMessage(conn, *message);
  }
  conn.ended = true;
  for (OutputCursor* c : conn.cursors) c->Wake();
  co_await conn.pumps.Join();
  co_await ws.Finish();
}

}  // namespace sandstream::api
