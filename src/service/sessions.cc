#include "service/sessions.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>

#include "base/async.h"
#include "base/ids.h"
#include "base/log.h"
#include "sandbox/files.h"
#include "service/service.h"

namespace sandstream {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Run as `bash -c SCRIPT sandstream-session STATE CMD CWD SUBSHELL K=V...`. The state file
// holds what `declare -p`, `declare -f` and `alias -p` print, the working directory, the umask
// and the options, and is sourced before the command; an EXIT trap writes it again afterwards (also
// after `exit N` or a failure under `set -e`). Options are re-applied only around the command,
// so `set -e`/`set -x` never act on this wrapper. Internal names start with __ss_.
constexpr std::string_view kScript = R"SCRIPT(
__ss_state=$1 __ss_cmd=$2 __ss_cwd=$3 __ss_sub=$4
shift 4
__ss_save() {
  __ss_o=$(shopt -p; set +o)
  case $__ss_flags in *e*) __ss_o+=$'\nset -e' ;; esac
  case $__ss_flags in *x*) __ss_o+=$'\nset -x' ;; esac
  set +e +u +o pipefail
  IFS=$' \t\n'
  __ss_umask=$(umask)
  umask 077  # the state file is the user's alone, and readable whatever umask the command set
  {
    __ss_keep=()
    for __ss_n in $(compgen -v); do
      case $__ss_n in
        __ss_*|BASH|BASH_*|BASHOPTS|BASHPID|EUID|UID|PPID|SHELLOPTS|FUNCNAME|GROUPS|RANDOM|SRANDOM|\
SECONDS|LINENO|HISTCMD|EPOCHREALTIME|EPOCHSECONDS|DIRSTACK|PIPESTATUS|COMP_*|SHLVL|PWD|OLDPWD|_|\
OPTIND|OPTARG|OPTERR|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|COLUMNS|LINES|IFS|PS4) continue ;;
      esac
      case ${!__ss_n@a} in *r*) continue ;; esac
      __ss_keep+=("$__ss_n")
    done
    [ ${#__ss_keep[@]} -eq 0 ] || declare -p "${__ss_keep[@]}"
    for __ss_n in $__ss_env0; do
      [ -n "${!__ss_n+x}" ] || printf 'unset -v %s\n' "$__ss_n"
    done
    for __ss_n in $(compgen -A function); do
      case $__ss_n in __ss_*) ;; *) declare -f "$__ss_n" ;; esac
    done
    alias -p
    printf 'cd -- %q 2>/dev/null\n' "$PWD"
    printf 'OLDPWD=%q\n' "${OLDPWD-}"
    printf 'umask %s\n' "$__ss_umask"
    printf '__ss_o=%q\n' "$__ss_o"
  } >"$__ss_state.tmp" 2>/dev/null && command -p mv -f -- "$__ss_state.tmp" "$__ss_state"
  exit "$__ss_rc"
}
__ss_env0=$(compgen -e)
if [ -f "$__ss_state" ]; then . "$__ss_state" 2>/dev/null; fi
trap '{ __ss_rc=$? __ss_flags=$-; set +x; } 2>/dev/null; __ss_save' EXIT
if [ -n "$__ss_sub" ]; then
  (
    for __ss_kv in "$@"; do export "$__ss_kv"; done
    set --
    if [ -n "$__ss_cwd" ]; then cd -- "$__ss_cwd" || exit 1; fi
    shopt -s expand_aliases
    eval "${__ss_o-}" 2>/dev/null
    eval "$__ss_cmd"
  )
else
  set --
  shopt -s expand_aliases
  eval "${__ss_o-}" 2>/dev/null
  eval "$__ss_cmd"
fi
)SCRIPT";

}  // namespace

std::string ShellQuote(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += '\'';
    for (char c : a) {
      if (c == '\'')
        out += "'\\''";
      else
        out += c;
    }
    out += '\'';
  }
  return out;
}

Session::Session(const asio::any_io_executor& ex, std::string id, std::string sandbox_id,
                 std::map<std::string, std::string> env, std::string cwd)
    : ex_(ex),
      id_(std::move(id)),
      sandbox_id_(std::move(sandbox_id)),
      env_(std::move(env)),
      cwd_(std::move(cwd)),
      created_at_(SystemNow()),
      turns_(ex) {}

std::string Session::StatePath() const {
  return std::string(kSessionStateDir) + "/session-" + id_ + ".sh";
}

CommandSpec Session::Wrap(const Service& service, const SandboxEntry& sb, CommandSpec spec,
                          const std::map<std::string, std::string>& call_env,
                          const std::optional<std::string>& call_cwd) const {
  const std::string command = spec.cmd.empty() ? ShellQuote(spec.argv) : spec.cmd;
  const bool subshell = !call_env.empty() || call_cwd.has_value();
  std::vector<std::string> argv = {
      "/bin/bash",           "--noprofile",        "--norc",    "-c",
      std::string(kScript),  "sandstream-session", StatePath(), command,
      call_cwd.value_or(""), subshell ? "1" : ""};
  for (const auto& [k, v] : call_env) argv.push_back(k + "=" + v);
  spec.argv = std::move(argv);
  spec.cmd = command;
  spec.env = service.ComposeEnv(sb, env_);
  spec.cwd = cwd_;
  return spec;
}

asio::awaitable<Result<std::shared_ptr<Process>>> Session::Run(
    Service& service, CommandSpec spec, std::map<std::string, std::string> call_env,
    std::optional<std::string> call_cwd) {
  auto self = shared_from_this();
  const SandboxEntry* sb = service.Find(sandbox_id_);
  if (!sb) co_return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id_ + "'"};
  // A retry of a command already started attaches to it at once, without queueing.
  if (!spec.idempotency_key.empty() && sb->idempotency.contains(spec.idempotency_key)) {
    CommandSpec wrapped = Wrap(service, *sb, std::move(spec), call_env, call_cwd);
    Result<Service::Started> again = co_await service.StartProcess(sandbox_id_, std::move(wrapped));
    if (!again) co_return std::move(again).error();
    co_return again->process;
  }
  co_await turns_.Acquire();
  sb = service.Find(sandbox_id_);
  if (!sb || closed_) {
    turns_.Release();
    co_return Error{ErrorCode::kNotFound, "session '" + id_ + "' was deleted"};
  }
  CommandSpec wrapped = Wrap(service, *sb, std::move(spec), call_env, call_cwd);
  Result<Service::Started> started = co_await service.StartProcess(sandbox_id_, std::move(wrapped));
  if (!started || started->attached) {
    turns_.Release();
    if (!started) co_return std::move(started).error();
    co_return started->process;
  }
  auto p = started->process;
  ++commands_;
  last_ = p;
  // The next command's turn comes when this one has ended, whatever happens to the wait.
  Spawn(
      ex_,
      [](std::shared_ptr<Process> process) -> asio::awaitable<void> {
        co_await process->WaitExit();
      }(p),
      "session " + id_ + " turn", [self] { self->turns_.Release(); });
  co_return p;
}

asio::awaitable<Result<std::shared_ptr<Session>>> Session::Create(Service& service,
                                                                  std::string sandbox_id,
                                                                  SessionRequest req) {
  std::string id = req.id.empty() ? NewId("sess_") : req.id;
  // Checked before the state directory is made and again after (another request may have
  // taken the id, or the sandbox gone, meanwhile).
  auto check = [&]() -> Result<const SandboxEntry*> {
    const SandboxEntry* sb = service.Find(sandbox_id);
    if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + sandbox_id + "'"};
    if (sb->deleting) return Error{ErrorCode::kNotFound, "sandbox " + sb->id + " is being deleted"};
    if (sb->sessions.contains(id)) {
      return Error{ErrorCode::kConflict, "session id '" + id + "' is in use"};
    }
    if (sb->sessions.size() >= 256) {
      return Error{ErrorCode::kQuotaExceeded, "too many sessions in " + sb->id + " (256)"};
    }
    return sb;
  };
  if (auto sb = check(); !sb) co_return std::move(sb).error();
  // The state directory belongs to `user`, who runs every session command.
  auto fs = service.Files(sandbox_id, 1000);
  if (!fs) co_return std::move(fs).error();
  Result<sandbox::FileInfo> dir = co_await OffThread(
      service.blocking_pool(), [&] { return fs->Mkdir(kSessionStateDir, 0700, true); });
  if (!dir) co_return Error{dir.error().code, "session state: " + dir.error().message};
  auto entry = check();
  if (!entry) co_return std::move(entry).error();
  const SandboxEntry& sb = **entry;
  auto session = std::make_shared<Session>(service.executor(), id, sb.id, std::move(req.env),
                                           req.cwd.empty() ? sb.cwd : req.cwd);
  service.AddSession(sb.id, session);
  log::Info("session created", {{"sandbox", sb.id}, {"session", id}});
  co_return session;
}

Result<void> Session::Delete(Service& service, std::string_view sandbox_id, std::string_view id) {
  const SandboxEntry* sb = service.Find(sandbox_id);
  if (!sb) return Error{ErrorCode::kNotFound, "no sandbox '" + std::string(sandbox_id) + "'"};
  auto session = service.TakeSession(sandbox_id, id);
  if (!session) {
    return Error{ErrorCode::kNotFound,
                 "no session '" + std::string(id) + "' in sandbox '" + sb->id + "'"};
  }
  session->Close();
  if (auto p = session->last_process(); p && p->status() == ProcessStatus::kRunning) {
    p->Kill(ExitReason::kKilled);
  }
  if (auto fs = service.Files(sandbox_id, 1000)) {
    asio::post(service.blocking_pool(), [fs = std::move(*fs), path = session->StatePath()] {
      (void)fs.Remove(path, false);
    });
  }
  return Ok{};
}

json::object SessionJson(const Session& s) {
  json::object env;
  for (const auto& [k, v] : s.env()) env[k] = v;
  json::object o;
  o["id"] = s.id();
  o["sandbox_id"] = s.sandbox_id();
  o["cwd"] = s.cwd();
  o["env"] = std::move(env);
  o["created_at"] = FormatRfc3339(s.created_at());
  o["commands"] = s.commands();
  o["busy"] = s.busy();
  return o;
}

std::shared_ptr<Session> SessionFromStored(const asio::any_io_executor& ex, const json::object& o) {
  try {
    std::map<std::string, std::string> env;
    for (const auto& [k, v] : o.at("env").as_object()) {
      if (v.is_string()) env[std::string(k)] = std::string(v.as_string());
    }
    auto session =
        std::make_shared<Session>(ex, json::value_to<std::string>(o.at("id")),
                                  json::value_to<std::string>(o.at("sandbox_id")), std::move(env),
                                  json::value_to<std::string>(o.at("cwd")));
    session->Resume(ParseRfc3339(o.at("created_at").as_string()).value_or(SystemNow()),
                    o.at("commands").to_number<uint64_t>());
    return session;
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace sandstream
