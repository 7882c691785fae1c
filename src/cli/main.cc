// `sandstream`, the command-line client: parses a command line and maps it onto the API calls
// of client.h; exec and run stream a command's output live and exit with its status.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "base/ids.h"
#include "base/version.h"
#include "cli/client.h"
#include "cli/interrupt.h"
#include "cli/process_stream.h"
#include "cli/shell.h"

namespace sandstream::cli {
namespace {

namespace json = boost::json;

constexpr int kExitUsage = 2;
constexpr int kExitUnknown = 255;
constexpr int kExitBrokenPipe = 128 + SIGPIPE;

constexpr std::string_view kHelp = R"(usage: sandstream [--url URL] [--key KEY] COMMAND [ARGS]

Commands:
  sandbox create [--template T] [--ttl SECONDS] [--cwd DIR] [--env K=V]... [--meta K=V]...
                 [--memory-mb N] [--pids N] [--cpu-percent N] [--disk-mb N] [--open-files N]
                 [NETWORK OPTIONS]
                          create a sandbox and print its id
  sandbox ls [--json]     list sandboxes, oldest first, with what each can reach
  sandbox rm ID...        delete sandboxes and everything running in them
  sandbox pause [--mode freeze|checkpoint] ID...
                          pause sandboxes: every process stops where it is, memory kept
                          (freeze, the default) or written to disk and freed (checkpoint); a
                          later request for one (exec, files, a terminal) resumes it first
  sandbox resume ID...    resume paused sandboxes where they stopped
  sandbox fork SANDBOX [--count N] [--files [--name NAME]] [--json]
                          make N sandboxes (default 1) from SANDBOX as it is now, and print
                          their ids: its processes and code contexts run on in each where
                          they were, each with its own id, hostname and files; SANDBOX runs
                          on. --files: its files only, through snapshot template NAME
  exec SANDBOX [EXEC OPTIONS] [--] CMD [ARG]...
                          run CMD in SANDBOX; its stdout and stderr are written here as they
                          are produced, and its exit status is sandstream's
  run [--template T] [--ttl SECONDS] [NETWORK OPTIONS] [EXEC OPTIONS] [--] CMD [ARG]...
                          the same in a new sandbox, deleted afterwards
  start SANDBOX [--id ID] [--keep-awake] [EXEC OPTIONS] [--] CMD [ARG]...
                          start CMD in the background and print its process id; with
                          --keep-awake the sandbox does not pause itself when idle
                          (auto_pause) while CMD runs
  ps SANDBOX [--json]     list a sandbox's processes
  logs [-f [--flow wait|skip]] [--tail N] SANDBOX PROCESS
                          print a process's retained output; -f follows it until it exits.
                          --flow skip (the default) never holds the process back: if this
                          reader falls behind the server's window it is told what it missed
                          ("output lost"). --flow wait holds the process back while this
                          reader is behind, so every byte arrives, as through a pipe
  kill SANDBOX PROCESS [--signal SIG]
                          kill a process's group (TERM, a grace period, KILL), or send SIG
  shell SANDBOX [--terminal ID] [--] [CMD [ARG]...]
                          attach this terminal to a login shell (or CMD) on a terminal in
                          SANDBOX; --terminal reattaches to one that is still running
  port expose SANDBOX PORT [--json] [--browser [--ttl SECONDS]]
                          expose PORT of SANDBOX through the server and print the two URLs
                          that reach the server listening on it, with the API key: url (by
                          host: {port}-{sandbox}.{preview domain}, for pages with absolute
                          paths) and path_url; with --browser also browser_url, the url with
                          a token that opens this port only (for --ttl, default 3600 s),
                          never the key, to open in a browser or share
  port list SANDBOX [--json]
                          list a sandbox's exposed ports and their URLs
  port close SANDBOX PORT stop exposing PORT (connections already relayed go on)
  port wait SANDBOX PORT [--timeout SECONDS]
                          return once something in SANDBOX accepts connections on PORT,
                          exposed or not (default timeout 30 s; then exit status 2)
  template import NAME FILE [--json]
                          make template NAME from an image archive: an OCI image layout or a
                          `docker save` tar (`docker save IMAGE -o FILE`), sent as it is read
  template pull NAME IMAGE [--username USER] [--json]
                          make template NAME from IMAGE pulled from its registry
                          (host[:port]/repo[:tag], Docker Hub without a host); with --username,
                          the password is read from SANDSTREAM_REGISTRY_PASSWORD or, unset,
                          the first line of stdin
  template ls [--json]    list the templates this key may use
  template rm NAME...     delete image or snapshot templates no sandbox uses
  snapshot SANDBOX NAME [--memory] [--json]
                          make template NAME of SANDBOX's files now; its processes keep
                          running. With --memory the template holds them too: a sandbox
                          made from it starts with them running where they were

Network options (sandbox create, run):
  --network MODE          loopback (the default): the sandbox's own loopback only; none: not
                          even that; egress: loopback and every public address and name
  --allow RULE            reach only what the --allow rules name (repeatable): an IPv4
                          address, a prefix a.b.c.d/n, a name (pypi.org) or a pattern
                          (*.github.com: the names under it; *: every name); means egress
  --deny RULE             never reach RULE, even where allowed (repeatable); means egress
  A server without egress (its egress_pool is none) refuses egress.

Exec options:
  --cwd DIR               working directory
  -e, --env K=V           environment variable (repeatable)
  --timeout SECONDS       kill the command after this long (exit reason: timeout)
  --idle-timeout SECONDS  kill it after this long without output (reason: idle_timeout)
  --merge-stderr          send stderr into stdout, keeping their order

Global options:
  --url URL               server, http:// only (default: $SANDSTREAM_URL, else
                          http://127.0.0.1:8080)
  --key KEY               API key (default: $SANDSTREAM_API_KEY)
  -h, --help              this text
  --version               print sandstream's version

CMD runs directly, its name looked up in the sandbox's PATH; for a shell line use
`-- sh -c 'LINE'`. exec and run wait for this reader: when it falls a window behind (a slow
terminal or pipe), the command is held back in write(2) rather than losing output. If the
connection drops, exec reconnects and resumes the same run after the last output received:
nothing is lost or repeated, and the command never runs twice. Interrupting exec or run (Ctrl-C, SIGTERM,
SIGHUP) sends the signal to the command; a third interrupt stops waiting for it.

Exit status:
  exec, run, shell
              the command's exit status; 128+N when signal N ended it (a timeout: 143 or 137)
  0           other commands: success
  2           a usage error, or an error from the server or the connection, printed as
              `sandstream: CODE: MESSAGE`
  141         stdout or stderr was closed before everything was written
  255         exec, run, logs -f: the command started but its outcome is unknown (the stream
              ended without an exit, or the server reported a failure of its own)
  128+N       exec, run: interrupted by signal N before the command started, or by a third
              interrupt (the command may still be running)
)";

struct Flag {
  std::string_view name;
  char short_name = 0;
  bool takes_value = true;
};

constexpr Flag kGlobalFlags[] = {{"url"}, {"key"}, {"help", 'h', false}, {"version", 0, false}};
constexpr Flag kExecFlags[] = {
    {"cwd"}, {"env", 'e'}, {"timeout"}, {"idle-timeout"}, {"merge-stderr", 0, false}};

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> command;  // the words after the positionals, or after `--`
  std::vector<std::pair<std::string, std::string>> options;

  bool Has(std::string_view name) const {
    for (const auto& [key, value] : options) {
      if (key == name) return true;
    }
    return false;
  }
  std::optional<std::string> Get(std::string_view name) const {
    std::optional<std::string> found;
    for (const auto& [key, value] : options) {
      if (key == name) found = value;
    }
    return found;
  }
  std::vector<std::string> All(std::string_view name) const {
    std::vector<std::string> found;
    for (const auto& [key, value] : options) {
      if (key == name) found.push_back(value);
    }
    return found;
  }
};

int Usage(std::string_view message) {
  std::fprintf(stderr, "sandstream: %.*s\nTry 'sandstream --help'.\n",
               static_cast<int>(message.size()), message.data());
  return kExitUsage;
}

const Flag* FindFlag(std::span<const std::span<const Flag>> tables, std::string_view name,
                     char short_name) {
  for (std::span<const Flag> table : tables) {
    for (const Flag& flag : table) {
      if (short_name != 0 ? flag.short_name == short_name : flag.name == name) return &flag;
    }
  }
  return nullptr;
}

// Options may appear anywhere before the command. With `command_after` >= 0, the words after
// that many positionals (or after `--`) are the command, taken verbatim.
std::optional<std::string> ParseArgs(std::span<const std::string> argv,
                                     std::span<const std::span<const Flag>> tables,
                                     int command_after, Args* out) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      if (command_after < 0) return "unexpected '--'";
      out->command.assign(argv.begin() + static_cast<ptrdiff_t>(i) + 1, argv.end());
      return std::nullopt;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      const Flag* flag = nullptr;
      std::string_view name;
      std::optional<std::string> value;
      if (arg.starts_with("--")) {
        name = arg.substr(2);
        if (size_t eq = name.find('='); eq != std::string_view::npos) {
          value = std::string(name.substr(eq + 1));
          name = name.substr(0, eq);
        }
        flag = FindFlag(tables, name, 0);
      } else if (arg.size() == 2) {
        flag = FindFlag(tables, "", arg[1]);
      }
      if (flag == nullptr) return "unknown option '" + std::string(arg) + "'";
      if (!flag->takes_value && value)
        return "option --" + std::string(flag->name) + " takes no value";
      if (flag->takes_value && !value) {
        if (i + 1 >= argv.size()) return "option --" + std::string(flag->name) + " needs a value";
        value = argv[++i];
      }
      out->options.emplace_back(std::string(flag->name), value.value_or(""));
      continue;
    }
    if (command_after >= 0 && static_cast<int>(out->positional.size()) == command_after) {
      out->command.assign(argv.begin() + static_cast<ptrdiff_t>(i), argv.end());
      return std::nullopt;
    }
    out->positional.emplace_back(arg);
  }
  return std::nullopt;
}

std::optional<int64_t> ParseInt(std::string_view text, int64_t min) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min) return std::nullopt;
  return value;
}

std::optional<double> ParsePositiveSeconds(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !(value > 0)) return std::nullopt;
  return value;
}

// K=V words into a JSON object; the error names the bad word.
std::optional<std::string> ParsePairs(const std::vector<std::string>& words, json::object* out) {
  for (const std::string& word : words) {
    size_t eq = word.find('=');
    if (eq == 0 || eq == std::string::npos) return "expected K=V, got '" + word + "'";
    (*out)[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return std::nullopt;
}

void PrintError(const ClientError& error) {
  if (error.kind == ClientError::Kind::kApi) {
    std::fprintf(stderr, "sandstream: %s: %s\n", error.code.c_str(), error.message.c_str());
  } else {
    std::fprintf(stderr, "sandstream: %s\n", error.message.c_str());
  }
}

int Fail(const ClientError& error) {
  if (error.kind == ClientError::Kind::kInterrupted) return 128 + error.signal;
  PrintError(error);
  return kExitUsage;
}

// Writes all of `bytes` to `fd` at once, without buffering; false if the reader is gone.
bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n >= 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

bool PrintLine(const std::string& line) {
  return WriteAll(STDOUT_FILENO, line + "\n");
}

std::string Text(const json::object& object, std::string_view key) {
  const json::value* v = object.if_contains(key);
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_string()) return std::string(v->get_string());
  return json::serialize(*v);
}

// The `cmd` a process was started with, else its argv joined by spaces.
std::string CommandText(const json::object& process) {
  if (const json::value* cmd = process.if_contains("cmd"); cmd != nullptr && cmd->is_string()) {
    return std::string(cmd->get_string());
  }
  std::string text;
  if (const json::value* argv = process.if_contains("argv"); argv != nullptr && argv->is_array()) {
    for (const json::value& word : argv->get_array()) {
      if (!text.empty()) text += ' ';
      text += word.is_string() ? std::string(word.get_string()) : json::serialize(word);
    }
  }
  return text.empty() ? "-" : text;
}

int PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    if (!PrintLine(line)) return kExitBrokenPipe;
  }
  return 0;
}

std::string_view SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "INT";
    case SIGTERM:
      return "TERM";
    case SIGHUP:
      return "HUP";
    default:
      return "TERM";
  }
}

struct Context {
  Endpoint endpoint;
  std::string api_key;
  Client MakeClient() const { return Client(endpoint, api_key); }
};

// The sandbox request's `network` from --network, --allow and --deny: a mode, or
// {"egress": {"allow": [...], "deny": [...]}} when rules are given. The server checks the
// mode and the rules.
std::optional<std::string> BuildNetworkRequest(const Args& args, json::object* request) {
  std::vector<std::string> allow = args.All("allow");
  std::vector<std::string> deny = args.All("deny");
  std::optional<std::string> mode = args.Get("network");
  if (allow.empty() && deny.empty()) {
    if (mode) (*request)["network"] = *mode;
    return std::nullopt;
  }
  if (mode && *mode != "egress") return "--allow and --deny mean --network egress, not " + *mode;
  json::object policy;
  if (!allow.empty()) policy["allow"] = json::array(allow.begin(), allow.end());
  if (!deny.empty()) policy["deny"] = json::array(deny.begin(), deny.end());
  (*request)["network"] = json::object{{"egress", std::move(policy)}};
  return std::nullopt;
}

// What a sandbox can reach, for a table: "loopback", "none", or "egress ADDRESS" and its
// rules (no allow= when every public address is allowed).
std::string NetworkText(const json::object& sandbox) {
  std::string text = Text(sandbox, "network");
  const json::value* egress = sandbox.if_contains("egress");
  if (egress == nullptr || !egress->is_object()) return text;
  const json::object& e = egress->get_object();
  if (const json::value* address = e.if_contains("address"); address && address->is_string()) {
    text += ' ';
    text += address->get_string();
  }
  for (std::string_view key : {"allow", "deny"}) {
    const json::value* rules = e.if_contains(key);
    if (rules == nullptr || !rules->is_array()) continue;
    if (key == "deny" && rules->get_array().empty()) continue;
    std::string joined;
    for (const json::value& rule : rules->get_array()) {
      if (!joined.empty()) joined += ',';
      joined += rule.is_string() ? std::string(rule.get_string()) : json::serialize(rule);
    }
    text += ' ';
    text += key;
    text += '=';
    text += joined;
  }
  return text;
}

// The command request (spec "Running commands") from exec options and the command words.
std::optional<std::string> BuildCommandRequest(const Args& args, json::object* request) {
  if (args.command.empty()) return "missing the command to run";
  json::array argv;
  for (const std::string& word : args.command) argv.emplace_back(word);
  (*request)["argv"] = std::move(argv);
  json::object env;
  if (auto error = ParsePairs(args.All("env"), &env)) return error;
  if (!env.empty()) (*request)["env"] = std::move(env);
  if (auto cwd = args.Get("cwd")) (*request)["cwd"] = *cwd;
  for (auto [flag, field] : {std::pair{"timeout", "timeout_seconds"},
                             std::pair{"idle-timeout", "idle_timeout_seconds"}}) {
    if (auto text = args.Get(flag)) {
      std::optional<double> seconds = ParsePositiveSeconds(*text);
      if (!seconds) return "--" + std::string(flag) + " needs a number of seconds > 0";
      (*request)[field] = *seconds;
    }
  }
  if (args.Has("merge-stderr")) (*request)["merge_stderr"] = true;
  return std::nullopt;
}

void ExplainReason(const std::string& reason) {
  const char* text = nullptr;
  if (reason == "timeout") text = "the command reached its timeout and was killed";
  if (reason == "idle_timeout") text = "the command was silent for its idle timeout and was killed";
  if (reason == "killed") text = "the command was killed (its process or sandbox was deleted)";
  if (reason == "oom") text = "the command ran out of memory and was killed";
  if (text != nullptr) std::fprintf(stderr, "sandstream: %s\n", text);
}

void ReportGap(int64_t from_seq, int64_t to_seq, int64_t bytes) {
  std::fprintf(stderr,
               "sandstream: output lost: events %lld..%lld (%lld bytes) were no longer retained\n",
               static_cast<long long>(from_seq), static_cast<long long>(to_seq),
               static_cast<long long>(bytes));
}

ProcessStreamCallbacks TerminalOutput() {
  ProcessStreamCallbacks callbacks;
  callbacks.on_output = [](Channel channel, std::string_view bytes) {
    return WriteAll(channel == Channel::kStdout ? STDOUT_FILENO : STDERR_FILENO, bytes);
  };
  callbacks.on_gap = ReportGap;
  return callbacks;
}

// Streams a command in a sandbox to the terminal and returns the exit status for sandstream.
int Execute(const Context& context, const std::string& sandbox_id, const json::object& request) {
  Client client = context.MakeClient();
  ProcessStream stream(TerminalOutput());
  int forwarded = 0;
  client.http().set_interrupt_handler([&](int sig) {
    if (stream.process_id().empty() || forwarded == 2) return false;
    ++forwarded;
    Client signaler = context.MakeClient();
    auto sent = signaler.SignalProcess(sandbox_id, stream.process_id(), SignalName(sig));
    // A conflict means the process has just ended; its exit is on the way.
    if (!sent && sent.error().kind != ClientError::Kind::kInterrupted &&
        sent.error().code != "conflict") {
      PrintError(sent.error());
    }
    return true;
  });
  const std::string key = NewId("cli_");
  auto followed = FollowProcess(
      stream,
      [&](const std::string& last_event_id, const BodySink& sink) {
        return client.StreamExec(sandbox_id, request, key, last_event_id, sink);
      },
      /*until_exit=*/true);
  bool started = !stream.process_id().empty() || !stream.last_event_id().empty();
  if (!followed) {
    const ClientError& error = followed.error();
    if (error.kind != ClientError::Kind::kInterrupted) PrintError(error);
    if (started) {
      std::fprintf(stderr, "sandstream: process %s may still be running in %s\n",
                   stream.process_id().c_str(), sandbox_id.c_str());
    }
    if (error.kind == ClientError::Kind::kInterrupted) return 128 + error.signal;
    return started ? kExitUnknown : kExitUsage;
  }
  if (stream.output_closed()) {
    // What a local pipeline does to a writer whose reader is gone; best effort.
    if (!stream.process_id().empty()) {
      auto sent = context.MakeClient().SignalProcess(sandbox_id, stream.process_id(), "PIPE");
      (void)sent;
    }
    return kExitBrokenPipe;
  }
  if (stream.error()) {
    PrintError(*stream.error());
    return started ? kExitUnknown : kExitUsage;
  }
  if (!stream.exit()) {
    std::fprintf(stderr, "sandstream: the stream ended without the command's exit\n");
    return kExitUnknown;
  }
  ExplainReason(stream.exit()->reason);
  return stream.exit()->exit_code;
}

int CmdSandboxCreate(const Context& context, const Args& args) {
  if (!args.positional.empty()) return Usage("sandbox create takes no arguments");
  json::object request;
  if (auto t = args.Get("template")) request["template"] = *t;
  if (auto cwd = args.Get("cwd")) request["cwd"] = *cwd;
  if (auto ttl = args.Get("ttl")) {
    auto seconds = ParseInt(*ttl, 0);
    if (!seconds) return Usage("--ttl needs a whole number of seconds >= 0");
    request["ttl_seconds"] = *seconds;
  }
  json::object env;
  json::object metadata;
  if (auto error = ParsePairs(args.All("env"), &env)) return Usage(*error);
  if (auto error = ParsePairs(args.All("meta"), &metadata)) return Usage(*error);
  if (!env.empty()) request["env"] = std::move(env);
  if (!metadata.empty()) request["metadata"] = std::move(metadata);
  json::object limits;
  for (auto [flag, field] :
       {std::pair{"memory-mb", "memory_mb"}, std::pair{"pids", "pids"},
        std::pair{"cpu-percent", "cpu_percent"}, std::pair{"disk-mb", "disk_mb"},
        std::pair{"open-files", "open_files"}}) {
    if (auto text = args.Get(flag)) {
      auto value = ParseInt(*text, 1);
      if (!value) return Usage("--" + std::string(flag) + " needs a whole number > 0");
      limits[field] = *value;
    }
  }
  if (!limits.empty()) request["limits"] = std::move(limits);
  if (auto error = BuildNetworkRequest(args, &request)) return Usage(*error);
  auto sandbox = context.MakeClient().CreateSandbox(request);
  if (!sandbox) return Fail(sandbox.error());
  return PrintLine(Text(*sandbox, "id")) ? 0 : kExitBrokenPipe;
}

int CmdSandboxLs(const Context& context, const Args& args) {
  if (!args.positional.empty()) return Usage("sandbox ls takes no arguments");
  auto sandboxes = context.MakeClient().ListSandboxes();
  if (!sandboxes) return Fail(sandboxes.error());
  if (args.Has("json")) return PrintLine(json::serialize(*sandboxes)) ? 0 : kExitBrokenPipe;
  std::vector<std::vector<std::string>> rows = {
      {"ID", "TEMPLATE", "STATUS", "PROCESSES", "CREATED", "EXPIRES", "NETWORK"}};
  for (const json::value& v : *sandboxes) {
    if (!v.is_object()) continue;
    const json::object& s = v.as_object();
    rows.push_back({Text(s, "id"), Text(s, "template"), Text(s, "status"),
                    Text(s, "processes_running"), Text(s, "created_at"), Text(s, "expires_at"),
                    NetworkText(s)});
  }
  return PrintTable(rows);
}

int CmdSandboxRm(const Context& context, const Args& args) {
  if (args.positional.empty()) return Usage("sandbox rm needs at least one sandbox id");
  Client client = context.MakeClient();
  int status = 0;
  for (const std::string& id : args.positional) {
    auto deleted = client.DeleteSandbox(id);
    if (!deleted) status = Fail(deleted.error());
    if (status > kExitUsage) return status;  // interrupted
  }
  return status;
}

// pause and resume: each sandbox named, printed with the state it is in after.
int CmdSandboxLifecycle(const Context& context, const Args& args, std::string_view step) {
  if (args.positional.empty()) {
    return Usage("sandbox " + std::string(step) + " needs at least one sandbox id");
  }
  Client client = context.MakeClient();
  json::object body;
  if (auto mode = args.Get("mode")) body["mode"] = *mode;
  int status = 0;
  for (const std::string& id : args.positional) {
    auto done = client.SandboxStep(id, step, body);
    if (!done) {
      status = Fail(done.error());
      if (status > kExitUsage) return status;  // interrupted
      continue;
    }
    if (!PrintLine(Text(*done, "id") + " " + Text(*done, "status"))) return kExitBrokenPipe;
  }
  return status;
}

int CmdSandboxPause(const Context& context, const Args& args) {
  return CmdSandboxLifecycle(context, args, "pause");
}

int CmdSandboxResume(const Context& context, const Args& args) {
  return CmdSandboxLifecycle(context, args, "resume");
}

int CmdExec(const Context& context, const Args& args) {
  if (args.positional.size() != 1) return Usage("exec needs a sandbox id, then the command");
  json::object request;
  if (auto error = BuildCommandRequest(args, &request)) return Usage(*error);
  InstallInterruptHandlers();
  return Execute(context, args.positional[0], request);
}

int CmdRun(const Context& context, const Args& args) {
  if (!args.positional.empty()) return Usage("run takes the command only");
  json::object request;
  if (auto error = BuildCommandRequest(args, &request)) return Usage(*error);
  json::object sandbox_request;
  if (auto t = args.Get("template")) sandbox_request["template"] = *t;
  if (auto ttl = args.Get("ttl")) {
    auto seconds = ParseInt(*ttl, 0);
    if (!seconds) return Usage("--ttl needs a whole number of seconds >= 0");
    sandbox_request["ttl_seconds"] = *seconds;
  }
  if (auto error = BuildNetworkRequest(args, &sandbox_request)) return Usage(*error);
  InstallInterruptHandlers();
  Client client = context.MakeClient();
  auto sandbox = client.CreateSandbox(sandbox_request);
  if (!sandbox) return Fail(sandbox.error());
  std::string sandbox_id = Text(*sandbox, "id");
  int status = Execute(context, sandbox_id, request);
  // The interrupt that ended the command must not cut the clean-up short; another one may.
  client.http().set_interrupt_handler([interrupts = 0](int) mutable { return ++interrupts < 2; });
  auto deleted = client.DeleteSandbox(sandbox_id);
  if (!deleted) {
    std::fprintf(stderr, "sandstream: could not delete sandbox %s\n", sandbox_id.c_str());
    PrintError(deleted.error());
  }
  return status;
}

int CmdStart(const Context& context, const Args& args) {
  if (args.positional.size() != 1) return Usage("start needs a sandbox id, then the command");
  json::object request;
  if (auto error = BuildCommandRequest(args, &request)) return Usage(*error);
  if (auto id = args.Get("id")) request["id"] = *id;
  if (args.Has("keep-awake")) request["keep_awake"] = true;
  auto process = context.MakeClient().StartProcess(args.positional[0], request);
  if (!process) return Fail(process.error());
  return PrintLine(Text(*process, "id")) ? 0 : kExitBrokenPipe;
}

int CmdPs(const Context& context, const Args& args) {
  if (args.positional.size() != 1) return Usage("ps needs a sandbox id");
  auto processes = context.MakeClient().ListProcesses(args.positional[0]);
  if (!processes) return Fail(processes.error());
  if (args.Has("json")) return PrintLine(json::serialize(*processes)) ? 0 : kExitBrokenPipe;
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATUS", "PID", "EXIT", "REASON", "STARTED", "COMMAND"}};
  for (const json::value& v : *processes) {
    if (!v.is_object()) continue;
    const json::object& p = v.as_object();
    rows.push_back({Text(p, "id"), Text(p, "status"), Text(p, "pid"), Text(p, "exit_code"),
                    Text(p, "reason"), Text(p, "started_at"), CommandText(p)});
  }
  return PrintTable(rows);
}

int CmdLogs(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("logs needs a sandbox id and a process id");
  int tail = -1;
  if (auto text = args.Get("tail")) {
    auto value = ParseInt(*text, 0);
    if (!value || *value > INT32_MAX) return Usage("--tail needs a whole number >= 0");
    tail = static_cast<int>(*value);
  }
  bool follow = args.Has("follow");
  std::string flow = args.Get("flow").value_or("");
  if (!flow.empty() && flow != "wait" && flow != "skip") return Usage("--flow is wait or skip");
  if (!flow.empty() && !follow) return Usage("--flow applies to logs -f only");
  Client client = context.MakeClient();
  ProcessStream stream(TerminalOutput());
  auto followed = FollowProcess(
      stream,
      [&](const std::string& last_event_id, const BodySink& sink) {
        return client.StreamLogs(args.positional[0], args.positional[1], follow, tail, flow,
                                 last_event_id, sink);
      },
      /*until_exit=*/follow);
  if (!followed) return Fail(followed.error());
  if (stream.output_closed()) return kExitBrokenPipe;
  if (stream.error()) {
    PrintError(*stream.error());
    return kExitUnknown;
  }
  if (follow && !stream.exit() && !stream.ended()) {
    std::fprintf(stderr, "sandstream: the stream ended without the process's exit\n");
    return kExitUnknown;
  }
  return 0;
}

int CmdKill(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("kill needs a sandbox id and a process id");
  Client client = context.MakeClient();
  auto result = args.Has("signal") ? client.SignalProcess(args.positional[0], args.positional[1],
                                                          *args.Get("signal"))
                                   : client.KillProcess(args.positional[0], args.positional[1]);
  if (!result) return Fail(result.error());
  return 0;
}

// Words of a command line, quoted for `sh -c` so that each stays one word.
std::string ShellJoin(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += '\'';
    for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::optional<int> ParsePort(const std::string& text) {
  auto port = ParseInt(text, 1);
  if (!port || *port > 65535) return std::nullopt;
  return static_cast<int>(*port);
}

int PrintPort(const json::object& port, bool as_json) {
  if (as_json) return PrintLine(json::serialize(port)) ? 0 : kExitBrokenPipe;
  return PrintTable({{"url", Text(port, "url")}, {"path_url", Text(port, "path_url")}});
}

int CmdPortExpose(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("port expose needs a sandbox id and a port");
  auto port = ParsePort(args.positional[1]);
  if (!port) return Usage("PORT must be a number from 1 to 65535");
  Client client = context.MakeClient();
  auto exposed = client.ExposePort(args.positional[0], *port);
  if (!exposed) return Fail(exposed.error());
  if (!args.Has("browser")) {
    if (args.Get("ttl")) return Usage("--ttl goes with --browser");
    return PrintPort(*exposed, args.Has("json"));
  }
  int64_t ttl = 3600;
  if (auto text = args.Get("ttl")) {
    auto parsed = ParseInt(*text, 1);
    if (!parsed) return Usage("--ttl must be a number of seconds");
    ttl = *parsed;
  }
  auto token = client.CreateToken(args.positional[0], {"port:" + std::to_string(*port)}, ttl);
  if (!token) return Fail(token.error());
  json::object out = *exposed;
  out["browser_url"] = Text(out, "url") + "?access_token=" + Text(*token, "token");
  out["token_expires_at"] = Text(*token, "expires_at");
  if (args.Has("json")) return PrintLine(json::serialize(out)) ? 0 : kExitBrokenPipe;
  return PrintTable({{"url", Text(out, "url")},
                     {"path_url", Text(out, "path_url")},
                     {"browser_url", Text(out, "browser_url")},
                     {"expires", Text(out, "token_expires_at")}});
}

int CmdPortList(const Context& context, const Args& args) {
  if (args.positional.size() != 1) return Usage("port list needs a sandbox id");
  auto ports = context.MakeClient().ListPorts(args.positional[0]);
  if (!ports) return Fail(ports.error());
  if (args.Has("json")) return PrintLine(json::serialize(*ports)) ? 0 : kExitBrokenPipe;
  std::vector<std::vector<std::string>> rows = {{"PORT", "URL", "PATH_URL", "CREATED"}};
  for (const json::value& v : *ports) {
    if (!v.is_object()) continue;
    const json::object& p = v.as_object();
    rows.push_back({Text(p, "port"), Text(p, "url"), Text(p, "path_url"), Text(p, "created_at")});
  }
  return PrintTable(rows);
}

int CmdPortClose(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("port close needs a sandbox id and a port");
  auto port = ParsePort(args.positional[1]);
  if (!port) return Usage("PORT must be a number from 1 to 65535");
  auto closed = context.MakeClient().ClosePort(args.positional[0], *port);
  if (!closed) return Fail(closed.error());
  return 0;
}

int CmdPortWait(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("port wait needs a sandbox id and a port");
  auto port = ParsePort(args.positional[1]);
  if (!port) return Usage("PORT must be a number from 1 to 65535");
  double timeout = 30;
  if (auto text = args.Get("timeout")) {
    auto seconds = ParsePositiveSeconds(*text);
    if (!seconds) return Usage("--timeout needs a number of seconds > 0");
    timeout = *seconds;
  }
  // The server waits at most a minute per request, so a dead connection is noticed.
  constexpr double kSlice = 60;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(timeout));
  Client client = context.MakeClient();
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    auto waited = client.WaitPort(args.positional[0], *port, std::clamp(left, 0.001, kSlice));
    if (waited) return 0;
    if (waited.error().code != "timeout") return Fail(waited.error());
    if (Clock::now() >= deadline) {
      std::fprintf(stderr,
                   "sandstream: timeout: nothing accepted connections on port %d of %s within "
                   "%g s\n",
                   *port, args.positional[0].c_str(), timeout);
      return kExitUsage;
    }
  }
}

int CmdShell(const Context& context, const Args& args) {
  if (args.positional.size() != 1) return Usage("shell needs a sandbox id");
  ShellOptions options;
  options.sandbox_id = args.positional[0];
  options.cmd = ShellJoin(args.command);
  options.terminal_id = args.Get("terminal").value_or("");
  return RunShell(context.endpoint, context.api_key, options);
}

struct Command {
  std::string_view group;  // "sandbox" for `sandbox create`, "port" for `port expose`, ...
  std::string_view name;
  std::span<const Flag> flags;
  int command_after;  // see ParseArgs
  bool exec_flags;
  int (*run)(const Context&, const Args&);
};

constexpr Flag kCreateFlags[] = {
    {"template"},    {"ttl"},     {"cwd"},        {"env", 'e'}, {"meta"},  {"memory-mb"}, {"pids"},
    {"cpu-percent"}, {"disk-mb"}, {"open-files"}, {"network"},  {"allow"}, {"deny"}};
constexpr Flag kJsonFlags[] = {{"json", 0, false}};
constexpr Flag kPauseFlags[] = {{"mode"}};
constexpr Flag kForkFlags[] = {{"count"}, {"files", 0, false}, {"name"}, {"json", 0, false}};
constexpr Flag kSnapshotFlags[] = {{"memory", 0, false}, {"json", 0, false}};
constexpr Flag kRunFlags[] = {{"template"}, {"ttl"}, {"network"}, {"allow"}, {"deny"}};
constexpr Flag kStartFlags[] = {{"id"}, {"keep-awake", 0, false}};
constexpr Flag kLogsFlags[] = {{"follow", 'f', false}, {"tail"}, {"flow"}};
constexpr Flag kKillFlags[] = {{"signal", 's'}};
constexpr Flag kShellFlags[] = {{"terminal"}};
constexpr Flag kPortWaitFlags[] = {{"timeout"}};
constexpr Flag kPullFlags[] = {{"json", 0, false}, {"username"}};
constexpr Flag kPortExposeFlags[] = {{"json", 0, false}, {"browser", 0, false}, {"ttl"}};

int CmdTemplateImport(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("template import needs a name and an archive file");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(args.positional[1], ec)) {
    return Usage(args.positional[1] + " is not a file (an image archive: a tar)");
  }
  Client client = context.MakeClient();
  // The server unpacks after the upload: a large image takes a while to answer.
  client.http().set_read_timeout(std::chrono::minutes(30));
  auto made = client.ImportTemplate(args.positional[0], args.positional[1]);
  if (!made) return Fail(made.error());
  if (args.Has("json")) return PrintLine(json::serialize(*made)) ? 0 : kExitBrokenPipe;
  return PrintTable({{"name", Text(*made, "name")},
                     {"digest", Text(*made, "digest")},
                     {"layers", Text(*made, "layers_count")},
                     {"user", Text(*made, "user")}});
}

int CmdTemplatePull(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("template pull needs a name and an image");
  const std::string username(args.Get("username").value_or(""));
  std::string password;
  if (!username.empty()) {
    // Never a flag: a flag shows in ps and in the shell's history.
    if (const char* env = std::getenv("SANDSTREAM_REGISTRY_PASSWORD")) {
      password = env;
    } else {
      std::getline(std::cin, password);
    }
  }
  Client client = context.MakeClient();
  client.http().set_read_timeout(std::chrono::minutes(30));  // the server answers when pulled
  auto made = client.PullTemplate(args.positional[0], args.positional[1], username, password);
  if (!made) return Fail(made.error());
  if (args.Has("json")) return PrintLine(json::serialize(*made)) ? 0 : kExitBrokenPipe;
  return PrintTable({{"name", Text(*made, "name")},
                     {"source", Text(*made, "source")},
                     {"digest", Text(*made, "digest")},
                     {"layers", Text(*made, "layers_count")},
                     {"user", Text(*made, "user")}});
}

int CmdTemplateLs(const Context& context, const Args& args) {
  if (!args.positional.empty()) return Usage("template ls takes no arguments");
  auto templates = context.MakeClient().ListTemplates();
  if (!templates) return Fail(templates.error());
  if (args.Has("json")) return PrintLine(json::serialize(*templates)) ? 0 : kExitBrokenPipe;
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "KIND", "STATUS", "LAYERS", "SIZE", "SOURCE", "CREATED"}};
  for (const json::value& v : *templates) {
    if (!v.is_object()) continue;
    const json::object& t = v.as_object();
    rows.push_back({Text(t, "name"), Text(t, "kind"), Text(t, "status"), Text(t, "layers_count"),
                    Text(t, "size_bytes"), Text(t, "source"), Text(t, "created_at")});
  }
  return PrintTable(rows);
}

int CmdTemplateRm(const Context& context, const Args& args) {
  if (args.positional.empty()) return Usage("template rm needs at least one template name");
  Client client = context.MakeClient();
  int status = 0;
  for (const auto& name : args.positional) {
    auto deleted = client.DeleteTemplate(name);
    if (!deleted) status = Fail(deleted.error());
  }
  return status;
}

int CmdSnapshot(const Context& context, const Args& args) {
  if (args.positional.size() != 2) return Usage("snapshot needs a sandbox id and a template name");
  Client client = context.MakeClient();
  client.http().set_read_timeout(std::chrono::minutes(30));
  auto made = client.Snapshot(args.positional[0], args.positional[1], args.Has("memory"));
  if (!made) return Fail(made.error());
  if (args.Has("json")) return PrintLine(json::serialize(*made)) ? 0 : kExitBrokenPipe;
  return PrintLine(Text(*made, "name")) ? 0 : kExitBrokenPipe;
}

int CmdSandboxFork(const Context& context, const Args& args) {
  if (args.positional.size() != 1) return Usage("sandbox fork needs a sandbox id");
  int count = 1;
  if (auto n = args.Get("count")) {
    auto parsed = ParseInt(*n, 1);
    if (!parsed || *parsed > 32) return Usage("--count needs a whole number from 1 to 32");
    count = static_cast<int>(*parsed);
  }
  const bool files = args.Has("files");
  const std::string name = args.Get("name").value_or("");
  if (!name.empty() && !files) return Usage("--name is the template of a --files fork");
  Client client = context.MakeClient();
  client.http().set_read_timeout(std::chrono::minutes(30));
  auto forks = client.Fork(args.positional[0], count, !files, name);
  if (!forks) return Fail(forks.error());
  if (args.Has("json")) return PrintLine(json::serialize(*forks)) ? 0 : kExitBrokenPipe;
  const json::value* list = forks->if_contains("sandboxes");
  if (list && list->is_array()) {
    for (const json::value& v : list->as_array()) {
      if (v.is_object() && !PrintLine(Text(v.as_object(), "id"))) return kExitBrokenPipe;
    }
  }
  return 0;
}

constexpr Command kCommands[] = {
    {"sandbox", "create", kCreateFlags, -1, false, CmdSandboxCreate},
    {"sandbox", "ls", kJsonFlags, -1, false, CmdSandboxLs},
    {"sandbox", "rm", {}, -1, false, CmdSandboxRm},
    {"sandbox", "pause", kPauseFlags, -1, false, CmdSandboxPause},
    {"sandbox", "resume", {}, -1, false, CmdSandboxResume},
    {"sandbox", "fork", kForkFlags, -1, false, CmdSandboxFork},
    {"", "exec", {}, 1, true, CmdExec},
    {"", "run", kRunFlags, 0, true, CmdRun},
    {"", "start", kStartFlags, 1, true, CmdStart},
    {"", "ps", kJsonFlags, -1, false, CmdPs},
    {"", "logs", kLogsFlags, -1, false, CmdLogs},
    {"", "kill", kKillFlags, -1, false, CmdKill},
    {"", "shell", kShellFlags, 1, false, CmdShell},
    {"port", "expose", kPortExposeFlags, -1, false, CmdPortExpose},
    {"template", "import", kJsonFlags, -1, false, CmdTemplateImport},
    {"template", "pull", kPullFlags, -1, false, CmdTemplatePull},
    {"template", "ls", kJsonFlags, -1, false, CmdTemplateLs},
    {"template", "rm", {}, -1, false, CmdTemplateRm},
    {"", "snapshot", kSnapshotFlags, -1, false, CmdSnapshot},
    {"port", "list", kJsonFlags, -1, false, CmdPortList},
    {"port", "close", {}, -1, false, CmdPortClose},
    {"port", "wait", kPortWaitFlags, -1, false, CmdPortWait},
};

int Main(int argc, char** argv) {
  IgnoreSigpipe();
  // Global options may also come before the command.
  std::vector<std::string> argv_words(argv + 1, argv + argc);
  Args leading;
  std::span<const Flag> globals[] = {kGlobalFlags};
  if (auto error = ParseArgs(argv_words, globals, 0, &leading)) return Usage(*error);
  std::vector<std::string> words = std::move(leading.command);
  leading.command.clear();
  size_t first = 0;
  if (leading.Has("help")) {
    std::fwrite(kHelp.data(), 1, kHelp.size(), stdout);
    return 0;
  }
  if (leading.Has("version")) {
    std::printf("sandstream %s\n", kVersion);
    return 0;
  }
  if (first == words.size()) return Usage("missing command");

  std::string_view name = words[first];
  std::string_view group;
  if (name == "sandbox" || name == "port" || name == "template") {
    group = name;
    if (++first == words.size()) {
      return Usage(name == "sandbox" ? "sandbox needs a subcommand: create, ls, rm, pause or resume"
                   : name == "port"  ? "port needs a subcommand: expose, list, close or wait"
                                     : "template needs a subcommand: pull, import, ls or rm");
    }
    name = words[first];
  }
  const Command* command = nullptr;
  for (const Command& c : kCommands) {
    if (c.group == group && c.name == name) command = &c;
  }
  if (command == nullptr) {
    return Usage("unknown command '" + std::string(group) + (group.empty() ? "" : " ") +
                 std::string(name) + "'");
  }
  std::span<const Flag> tables[] = {
      kGlobalFlags, command->flags,
      command->exec_flags ? std::span<const Flag>(kExecFlags) : std::span<const Flag>()};
  Args args = std::move(leading);
  std::span<const std::string> rest(words.begin() + static_cast<ptrdiff_t>(first) + 1, words.end());
  if (auto error = ParseArgs(rest, tables, command->command_after, &args)) {
    return Usage(*error);
  }
  if (args.Has("help")) {
    std::fwrite(kHelp.data(), 1, kHelp.size(), stdout);
    return 0;
  }
  if (args.Has("version")) {
    std::printf("sandstream %s\n", kVersion);
    return 0;
  }

  const char* env_url = std::getenv("SANDSTREAM_URL");
  const char* env_key = std::getenv("SANDSTREAM_API_KEY");
  std::string url =
      args.Get("url").value_or(env_url && *env_url ? env_url : "http://127.0.0.1:8080");
  auto endpoint = ParseEndpoint(url);
  if (!endpoint) return Usage(endpoint.error().message);
  Context context{*endpoint, args.Get("key").value_or(env_key ? env_key : "")};
  return command->run(context, args);
}

}  // namespace
}  // namespace sandstream::cli

int main(int argc, char** argv) {
  return sandstream::cli::Main(argc, argv);
}
