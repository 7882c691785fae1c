// envd's process.Process service: commands and terminals started, attached to, listed, fed and
// signalled, as sandstream's background processes. A process is named by its pid (as the daemon
// sees it, unique among live ones) or by its tag, which is its sandstream process id.
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstring>
#include <functional>

#include <boost/json.hpp>

#include "api/common/lookup.h"
#include "api/e2b/connect.h"
#include "api/e2b/routes.h"
#include "api/request.h"
#include "api/stream.h"
#include "base/base64.h"
#include "process/cursor.h"

namespace sandstream::api::e2b {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::string_view kProcessKeepalive = R"({"event":{"keepalive":{}}})";

Error NoSuchProcess(std::string_view selector) {
  return Error{ErrorCode::kNotFound, "process with " + std::string(selector) + " not found"};
}

// The process a ProcessSelector ({"pid": N} or {"tag": "..."}) names; a running one first, as
// a pid of an ended process may have been reused.
Result<std::shared_ptr<Process>> Select(const SandboxEntry& sb, const json::object& message,
                                        bool running_only) {
  const json::value* v = Field(message, "process");
  if (!v || !v->is_object()) return Invalid("process (a selector: pid or tag) is required");
  const json::object& selector = v->as_object();
  auto pid = OptInt(selector, "pid", {}, 1, INT32_MAX);
  if (!pid) return std::move(pid).error();
  auto tag = OptString(selector, "tag");
  if (!tag) return std::move(tag).error();
  std::shared_ptr<Process> found;
  std::string name;
  if (*pid) {
    name = "pid " + std::to_string(**pid);
    for (auto it = sb.processes.rbegin(); it != sb.processes.rend(); ++it) {
      if ((*it)->pid() != **pid) continue;
      if (!found || ((*it)->status() == ProcessStatus::kRunning &&
                     found->status() != ProcessStatus::kRunning)) {
        found = *it;
      }
    }
  } else if (*tag) {
    name = "tag " + **tag;
    found = sb.FindProcess(**tag);
  } else {
    return Invalid("process needs a pid or a tag");
  }
  // envd forgets the processes that ended: input and signals to them are to nothing.
  if (!found || (running_only && found->status() != ProcessStatus::kRunning)) {
    return NoSuchProcess(name);
  }
  return found;
}

// Go's name of a signal, as envd reports it ("killed", "terminated").
std::string SignalName(int sig) {
  std::string name = ::strsignal(sig);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// The end event of a ProcessEvent: envd's exitCode, exited, status and error, which mimic
// Go's os.ProcessState: -1 and "signal: killed" for a process a signal ended.
json::object EndEvent(const ExitRecord& exit) {
  json::object end;
  if (exit.reason == ExitReason::kExited) {
    const std::string status = "exit status " + std::to_string(exit.exit_code);
    end["exitCode"] = exit.exit_code;
    end["exited"] = true;
    end["status"] = status;
    if (exit.exit_code != 0) end["error"] = status;
  } else {
    const std::string status = "signal: " + SignalName(exit.signal.value_or(SIGKILL));
    end["exitCode"] = -1;
    end["exited"] = false;
    end["status"] = status;
    end["error"] = status;
  }
  json::object event;
  event["end"] = std::move(end);
  json::object out;
  out["event"] = std::move(event);
  return out;
}

json::object StartEvent(const Process& p) {
  json::object start;
  start["pid"] = p.pid();
  json::object event;
  event["start"] = std::move(start);
  json::object out;
  out["event"] = std::move(event);
  return out;
}

void AppendData(ConnectStream& stream, const Process& p, const LogEntry& e) {
  std::string encoded;
  AppendBase64(encoded, e.data);
  json::object data;
  data[p.spec().pty                   ? "pty"
       : e.kind == EntryKind::kStderr ? "stderr"
                                      : "stdout"] = std::move(encoded);
  json::object event;
  event["data"] = std::move(data);
  json::object out;
  out["event"] = std::move(event);
  stream.Send(out);
}

// Streams `process`'s events from after `after_seq` to its end: the start (when the log's
// start entry is read, or at once with `announce`), its output, its end. A client that goes
// leaves the process running (envd's way) and holds nothing back.
asio::awaitable<void> StreamEvents(Context& ctx, std::shared_ptr<Process> process,
                                   uint64_t after_seq, bool announce) {
  ConnectStream stream(ctx, std::string(kProcessKeepalive));
  if (announce) stream.Send(StartEvent(*process));
  OutputCursor cursor(process, ctx.stream.get_executor(), after_seq, Flow::kWait);
  stream.Watch(cursor);
  std::optional<Error> lost;
  const auto render = [&](const OutputLog::Slice& slice) {
    // Connect has no gap: a reader the log left behind (it stalled) ends with the loss.
    if (slice.gap && !lost) {
      lost = Error{ErrorCode::kInternal,
                   "output lost: the reader fell behind the retained window (data_loss)"};
    }
    for (const LogEntry* e : slice.entries) {
      switch (e->kind) {
        case EntryKind::kStart:
          if (!announce) stream.Send(StartEvent(*process));
          break;
        case EntryKind::kStdout:
        case EntryKind::kStderr:
          AppendData(stream, *process, *e);
          break;
        case EntryKind::kExit:
          if (process->exit()) stream.Send(EndEvent(*process->exit()));
          break;
      }
    }
  };
  StreamEnd end = co_await Pump(cursor, stream, render, true);
  if (lost) co_return co_await stream.End(end, lost);
  if (end == StreamEnd::kEnded && process->exit() &&
      process->exit()->reason == ExitReason::kTimeout) {
    // The deadline the client gave (Connect-Timeout-Ms) passed: the SDK's timeout error.
    const Error deadline{ErrorCode::kTimeout, "context deadline exceeded: the command was killed"};
    co_return co_await stream.End(end, deadline);
  }
  co_await stream.End(end);
}

// A string map of a message (envs).
Result<std::map<std::string, std::string>> Strings(const json::object& o, std::string_view key) {
  std::map<std::string, std::string> out;
  const json::value* v = Field(o, key);
  if (!v) return out;
  if (!v->is_object()) return Invalid(std::string(key) + " must be an object of strings");
  for (const auto& [name, value] : v->as_object()) {
    if (!value.is_string()) return Invalid(std::string(key) + " must be an object of strings");
    out[std::string(name)] = std::string(value.as_string());
  }
  return out;
}

// Connect-Timeout-Ms, in seconds; nullopt when absent or 0.
Result<std::optional<double>> Deadline(const Context& ctx) {
  const std::string_view text = ctx.Header("Connect-Timeout-Ms");
  if (text.empty()) return std::optional<double>();
  uint64_t ms = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Invalid("Connect-Timeout-Ms must be a whole number of milliseconds");
  }
  if (ms == 0) return std::optional<double>();
  return std::optional<double>(static_cast<double>(ms) / 1000.0);
}

asio::awaitable<void> Start(Context& ctx, const SandboxEntry& sb, const json::object& m) {
  const json::value* config = Field(m, "process");
  if (!config || !config->is_object()) {
    co_return co_await ReplyError(ctx, Invalid("process (cmd, args, envs, cwd) is required"));
  }
  const json::object& c = config->as_object();
  auto cmd = OptString(c, "cmd");
  if (!cmd) co_return co_await ReplyError(ctx, cmd.error());
  if (!*cmd || (*cmd)->empty())
    co_return co_await ReplyError(ctx, Invalid("process.cmd is required"));
  json::array argv{json::value(**cmd)};
  if (const json::value* args = Field(c, "args")) {
    if (!args->is_array())
      co_return co_await ReplyError(ctx, Invalid("process.args must be an array of strings"));
    for (const auto& a : args->as_array()) {
      if (!a.is_string())
        co_return co_await ReplyError(ctx, Invalid("process.args must be an array of strings"));
      argv.push_back(a);
    }
  }
  auto envs = Strings(c, "envs");
  if (!envs) co_return co_await ReplyError(ctx, envs.error());
  auto cwd = OptString(c, "cwd");
  if (!cwd) co_return co_await ReplyError(ctx, cwd.error());
  auto root = ActsAsRoot(ctx);
  if (!root) co_return co_await ReplyError(ctx, root.error());
  auto tag = OptString(m, "tag");
  if (!tag) co_return co_await ReplyError(ctx, tag.error());
  auto stdin_open = OptBool(m, "stdin");
  if (!stdin_open) co_return co_await ReplyError(ctx, stdin_open.error());
  auto deadline = Deadline(ctx);
  if (!deadline) co_return co_await ReplyError(ctx, deadline.error());

  // sandstream's command, from envd's.
  json::object body;
  body["argv"] = std::move(argv);
  json::object env;
  for (const auto& [k, v] : *envs) env[k] = v;
  body["env"] = std::move(env);
  // A relative cwd is the acting user's home's.
  const std::string home = *root ? "/root" : "/home/user";
  if (*cwd && !(*cwd)->empty()) body["cwd"] = (*cwd)->front() == '/' ? **cwd : home + "/" + **cwd;
  body["user"] = *root ? "root" : "user";
  if (*deadline) body["timeout_seconds"] = **deadline;
  if (*tag) body["id"] = **tag;
  auto req = ParseCommand(ctx, body, sb, CommandKind::kBackground);
  if (!req) co_return co_await ReplyError(ctx, req.error());
  // envd keeps stdin open unless told not to (an SDK that predates the field says nothing).
  req->spec.keep_stdin_open = stdin_open->value_or(true);
  if (const json::value* pty = Field(m, "pty"); pty && pty->is_object()) {
    const json::value* size = Field(pty->as_object(), "size");
    if (!size || !size->is_object())
      co_return co_await ReplyError(ctx, Invalid("pty.size is required"));
    auto cols = OptInt(size->as_object(), "cols", {}, 1, 1000);
    if (!cols) co_return co_await ReplyError(ctx, cols.error());
    auto rows = OptInt(size->as_object(), "rows", {}, 1, 1000);
    if (!rows) co_return co_await ReplyError(ctx, rows.error());
    req->spec.pty = sandbox::PtySize{static_cast<uint16_t>(rows->value_or(24)),
                                     static_cast<uint16_t>(cols->value_or(80))};
    req->spec.keep_stdin_open = true;
  }
  Result<Service::Started> started = co_await ctx.service.StartProcess(sb.id, std::move(req->spec));
  if (!started) co_return co_await ReplyError(ctx, started.error());
  co_await StreamEvents(ctx, started->process, 0, false);
}

asio::awaitable<void> Connect(Context& ctx, const SandboxEntry& sb, const json::object& m) {
  auto p = Select(sb, m, false);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  // envd attaches at the present: output from now on, and the end (at once for one that ended).
  const uint64_t after = (*p)->status() == ProcessStatus::kRunning ? (*p)->log().last_seq()
                                                                   : (*p)->log().last_seq() - 1;
  co_await StreamEvents(ctx, *p, after, true);
}

asio::awaitable<void> List(Context& ctx, const SandboxEntry& sb) {
  json::array items;
  for (const auto& p : ClientProcesses(sb)) {
    if (p->status() != ProcessStatus::kRunning) continue;
    const CommandSpec& spec = p->spec();
    json::object config;
    config["cmd"] = spec.argv.empty() ? "" : spec.argv.front();
    json::array args;
    for (size_t i = 1; i < spec.argv.size(); ++i) args.push_back(json::value(spec.argv[i]));
    config["args"] = std::move(args);
    json::object envs;
    for (const auto& kv : spec.env) {
      const size_t eq = kv.find('=');
      envs[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    config["envs"] = std::move(envs);
    config["cwd"] = spec.cwd;
    json::object info;
    info["config"] = std::move(config);
    info["pid"] = p->pid();
    info["tag"] = p->id();
    items.push_back(std::move(info));
  }
  json::object out;
  out["processes"] = std::move(items);
  co_await ReplyMessage(ctx, out);
}

asio::awaitable<void> SendInput(Context& ctx, const SandboxEntry& sb, const json::object& m) {
  auto p = Select(sb, m, true);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  const json::value* input = Field(m, "input");
  if (!input || !input->is_object())
    co_return co_await ReplyError(ctx, Invalid("input (stdin or pty) is required"));
  auto in = OptString(input->as_object(), "stdin");
  if (!in) co_return co_await ReplyError(ctx, in.error());
  auto pty = OptString(input->as_object(), "pty");
  if (!pty) co_return co_await ReplyError(ctx, pty.error());
  if (!*in && !*pty) co_return co_await ReplyError(ctx, Invalid("input needs stdin or pty"));
  auto bytes = DecodeBytes(*in ? **in : **pty, *in ? "input.stdin" : "input.pty");
  if (!bytes) co_return co_await ReplyError(ctx, bytes.error());
  Result<size_t> written = co_await (*p)->WriteStdin(std::move(*bytes));
  if (!written) co_return co_await ReplyError(ctx, written.error());
  co_await ReplyMessage(ctx, json::object());
}

asio::awaitable<void> CloseStdin(Context& ctx, const SandboxEntry& sb, const json::object& m) {
  auto p = Select(sb, m, true);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  if (auto closed = (*p)->CloseStdin(); !closed) co_return co_await ReplyError(ctx, closed.error());
  co_await ReplyMessage(ctx, json::object());
}

asio::awaitable<void> SendSignal(Context& ctx, const SandboxEntry& sb, const json::object& m) {
  auto p = Select(sb, m, true);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  const json::value* v = Field(m, "signal");
  int sig = 0;
  if (v && v->is_string()) {
    const std::string_view name = v->as_string();
    sig = name == "SIGNAL_SIGKILL" ? SIGKILL : name == "SIGNAL_SIGTERM" ? SIGTERM : 0;
  } else if (v && v->is_int64() && (v->as_int64() == SIGKILL || v->as_int64() == SIGTERM)) {
    sig = static_cast<int>(v->as_int64());
  }
  if (sig == 0)
    co_return co_await ReplyError(ctx, Invalid("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM"));
  if (auto sent = (*p)->Signal(sig, true); !sent) co_return co_await ReplyError(ctx, sent.error());
  co_await ReplyMessage(ctx, json::object());
}

asio::awaitable<void> Update(Context& ctx, const SandboxEntry& sb, const json::object& m) {
  auto p = Select(sb, m, true);
  if (!p) co_return co_await ReplyError(ctx, p.error());
  const json::value* pty = Field(m, "pty");
  const json::value* size = pty && pty->is_object() ? Field(pty->as_object(), "size") : nullptr;
  if (!size || !size->is_object())
    co_return co_await ReplyError(ctx, Invalid("pty.size is required"));
  auto cols = OptInt(size->as_object(), "cols", {}, 1, 1000);
  if (!cols) co_return co_await ReplyError(ctx, cols.error());
  auto rows = OptInt(size->as_object(), "rows", {}, 1, 1000);
  if (!rows) co_return co_await ReplyError(ctx, rows.error());
  if (!*cols || !*rows) co_return co_await ReplyError(ctx, Invalid("pty.size needs cols and rows"));
  auto resized =
      (*p)->Resize(sandbox::PtySize{static_cast<uint16_t>(**rows), static_cast<uint16_t>(**cols)});
  if (!resized) co_return co_await ReplyError(ctx, resized.error());
  co_await ReplyMessage(ctx, json::object());
}

// The messages of a client stream as its body arrives: envelopes of JSON, each at most
// `limit` bytes, handed to `take` in order.
class Envelopes {
 public:
  using Take = std::function<asio::awaitable<Result<void>>(json::object)>;
  Envelopes(uint64_t limit, Take take) : limit_(limit), take_(std::move(take)) {}

  asio::awaitable<Result<void>> Feed(std::string_view piece) {
    buffer_.append(piece);
    size_t at = 0;
    while (buffer_.size() - at >= 5) {
      const auto* b = reinterpret_cast<const unsigned char*>(buffer_.data() + at);
      const uint64_t length =
          (uint64_t{b[1]} << 24) | (uint64_t{b[2]} << 16) | (uint64_t{b[3]} << 8) | uint64_t{b[4]};
      if (b[0] != 0)
        co_return Invalid("compressed or end-of-stream request envelopes are not served");
      if (length > limit_) {
        co_return Invalid("a message is larger than " + std::to_string(limit_) + " bytes");
      }
      if (buffer_.size() - at - 5 < length) break;
      boost::system::error_code ec;
      json::value v = json::parse(std::string_view(buffer_).substr(at + 5, length), ec);
      at += 5 + length;
      if (ec || !v.is_object()) co_return Invalid("a request message is not a JSON object");
      if (auto taken = co_await take_(std::move(v.as_object())); !taken) co_return taken;
    }
    buffer_.erase(0, at);
    co_return Result<void>(Ok{});
  }
  bool empty() const { return buffer_.empty(); }

 private:
  uint64_t limit_;
  Take take_;
  std::string buffer_;
};

// StreamInputRequest's start, then its data, each written to the process as it comes.
struct InputStream {
  Service* service = nullptr;
  std::string sandbox_id;  // looked up when needed: the stream's reads may outlive the entry
  std::shared_ptr<Process> process;
};

asio::awaitable<Result<void>> TakeInput(InputStream& in, json::object m) {
  if (const json::value* start = Field(m, "start"); start && start->is_object()) {
    if (in.process) co_return Invalid("the stream has started already");
    const SandboxEntry* sb = in.service->Find(in.sandbox_id);
    if (!sb || sb->deleting) co_return SandboxGone(in.sandbox_id);
    auto p = Select(*sb, start->as_object(), true);
    if (!p) co_return std::move(p).error();
    in.process = *p;
    co_return Result<void>(Ok{});
  }
  const json::value* data = Field(m, "data");
  if (!data || !data->is_object()) co_return Result<void>(Ok{});  // a keepalive
  if (!in.process) co_return Invalid("the stream's first message must be start");
  const json::value* input = Field(data->as_object(), "input");
  if (!input || !input->is_object()) co_return Invalid("data.input (stdin or pty) is required");
  auto text = OptString(input->as_object(), "stdin");
  if (!text) co_return std::move(text).error();
  if (!*text) {
    text = OptString(input->as_object(), "pty");
    if (!text) co_return std::move(text).error();
  }
  if (!*text) co_return Invalid("data.input needs stdin or pty");
  auto bytes = DecodeBytes(**text, "data.input");
  if (!bytes) co_return std::move(bytes).error();
  Result<size_t> written = co_await in.process->WriteStdin(std::move(*bytes));
  if (!written) co_return std::move(written).error();
  co_return Result<void>(Ok{});
}

}  // namespace

asio::awaitable<void> StreamInput(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) {
    ctx.streamed = true;  // the body is left unread
    co_return co_await ReplyError(ctx, sb.error());
  }
  InputStream in{&ctx.service, (*sb)->id, nullptr};
  Envelopes envelopes(ctx.server.options().max_stdin_bytes,
                      [&in](json::object m) { return TakeInput(in, std::move(m)); });
  std::optional<Error> failed = co_await ReceiveBody(
      ctx, [&](std::string_view piece) { return envelopes.Feed(piece); }, "the input stream",
      ctx.server.options().max_file_bytes);
  if (!failed && !envelopes.empty()) failed = Invalid("the input stream ends inside a message");
  if (!failed && !in.process) failed = Invalid("the input stream named no process (start)");
  if (failed) {
    ctx.streamed = ctx.streamed || ctx.body_parser == nullptr || !ctx.body_parser->is_done();
    co_return co_await ReplyError(ctx, *failed);
  }
  // One StreamInputResponse, then the end of the stream.
  std::string body;
  AppendEnvelope(body, "{}");
  AppendEnvelope(body, "{}", true);
  co_await Reply(ctx, http::status::ok, std::move(body), "application/connect+json");
}

asio::awaitable<void> ProcessRpc(Context& ctx) {
  auto sb = EnvdSandbox(ctx);
  if (!sb) co_return co_await ReplyError(ctx, sb.error());
  auto message = RequestMessage(ctx);
  if (!message) co_return co_await ReplyError(ctx, message.error());
  const std::string& method = ctx.params.at(0);
  if (method == "Start") co_return co_await Start(ctx, **sb, *message);
  if (method == "Connect") co_return co_await Connect(ctx, **sb, *message);
  if (method == "List") co_return co_await List(ctx, **sb);
  if (method == "SendInput") co_return co_await SendInput(ctx, **sb, *message);
  if (method == "CloseStdin") co_return co_await CloseStdin(ctx, **sb, *message);
  if (method == "SendSignal") co_return co_await SendSignal(ctx, **sb, *message);
  if (method == "Update") co_return co_await Update(ctx, **sb, *message);
  co_await FailConnect(ctx, "unimplemented",
                       "process.Process/" + method + " is not served by sandstream");
}

}  // namespace sandstream::api::e2b
