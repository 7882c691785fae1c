// The WebSocket routes: a terminal in a sandbox (GET exec/pty), which outlives its connections
// and replays its screen to each new one, and many commands over one connection (GET exec/ws).
#include "api/common/terminals.h"

#include <set>

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/request.h"
#include "api/routes/routes.h"
#include "api/sse.h"
#include "api/stream.h"
#include "api/websocket.h"
#include "base/base64.h"
#include "base/ids.h"
#include "base/json_string.h"
#include "process/terminal.h"
#include "service/codec.h"

namespace sandstream::api {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

json::object ErrorJson(const Error& e) {
  return json::object{{"code", ErrorCodeName(e.code)}, {"message", e.message}};
}

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
    AppendJsonString(out, data);
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
