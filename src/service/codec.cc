#include "service/codec.h"

#include <boost/json.hpp>

#include "base/base64.h"
#include "platform/signals.h"
#include "service/service.h"

namespace sandstream {
namespace json = boost::json;

namespace {

json::value TimeOrNull(const std::optional<SystemTime>& t) {
  if (!t) return nullptr;
  return json::string(FormatRfc3339(*t));
}

std::string_view KindName(EntryKind k) {
  switch (k) {
    case EntryKind::kStart:
      return "start";
    case EntryKind::kStdout:
      return "stdout";
    case EntryKind::kStderr:
      return "stderr";
    case EntryKind::kExit:
      return "exit";
  }
  return "stdout";
}

std::optional<EntryKind> ParseKind(std::string_view s) {
  for (EntryKind k : {EntryKind::kStart, EntryKind::kStdout, EntryKind::kStderr, EntryKind::kExit})
    if (KindName(k) == s) return k;
  return std::nullopt;
}

std::optional<SystemTime> ParseTime(const json::value* v) {
  if (!v || !v->is_string()) return std::nullopt;
  return ParseRfc3339(v->as_string());
}

json::array VolumesJson(const std::vector<SandboxVolume>& volumes) {
  json::array out;
  for (const auto& v : volumes) {
    out.push_back(
        json::object{{"id", v.id}, {"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
  }
  return out;
}

}  // namespace

json::object LimitsJson(const sandbox::Limits& l) {
  return {{"memory_mb", l.memory_mb},
          {"pids", l.pids},
          {"cpu_percent", l.cpu_percent},
          {"disk_mb", l.disk_mb},
          {"open_files", l.open_files}};
}

json::value EgressJson(const SandboxEntry& sb) {
  if (!sb.egress) return nullptr;
  auto strings = [](const std::vector<std::string>& v) {
    json::array a;
    for (const auto& s : v) a.emplace_back(s);
    return a;
  };
  json::object o{
      {"allow", sb.egress->allow ? json::value(strings(*sb.egress->allow)) : json::value(nullptr)},
      {"deny", strings(sb.egress->deny)}};
  const auto addresses = sb.runtime ? sb.runtime->Egress() : std::nullopt;
  o["address"] = addresses ? json::value(net::FormatAddress(addresses->address)) : nullptr;
  o["gateway"] = addresses ? json::value(net::FormatAddress(addresses->gateway)) : nullptr;
  return o;
}

Result<net::EgressPolicy> EgressFromJson(const json::value& v) {
  if (!v.is_object()) return Error{ErrorCode::kInternal, "egress is not an object"};
  auto strings = [](const json::value* a) -> std::optional<std::vector<std::string>> {
    if (!a || !a->is_array()) return std::nullopt;
    std::vector<std::string> out;
    for (const auto& s : a->as_array()) {
      if (s.is_string()) out.emplace_back(s.as_string());
    }
    return out;
  };
  return net::ParseEgressPolicy(
      strings(v.as_object().if_contains("allow")),
      strings(v.as_object().if_contains("deny")).value_or(std::vector<std::string>{}));
}

json::object SandboxJson(const SandboxEntry& sb) {
  json::object env;
  for (const auto& [k, v] : sb.env) env[k] = v;
  return {{"id", sb.id},
          {"tenant", sb.tenant.empty() ? json::value(nullptr) : json::value(sb.tenant)},
          {"template", sb.template_name},
          {"status", SandboxState(sb)},
          {"lost_reason", sb.lost ? json::value(*sb.lost) : json::value(nullptr)},
          {"created_at", FormatRfc3339(sb.created_at)},
          // While paused: when it is deleted unless resumed (its own TTL does not run).
          {"expires_at", TimeOrNull(EndsAt(sb))},
          {"paused_at", sb.paused ? json::value(FormatRfc3339(sb.paused->at)) : nullptr},
          {"pause_mode", sb.paused ? json::value(PauseModeName(sb.paused->mode)) : nullptr},
          {"auto_resume", sb.auto_resume},
          {"auto_pause",
           sb.auto_pause ? json::value(json::object{{"idle_seconds", sb.auto_pause->idle_seconds},
                                                    {"mode", PauseModeName(sb.auto_pause->mode)}})
                         : json::value(nullptr)},
          {"on_timeout", sb.pause_on_timeout ? "pause" : "kill"},
          {"ttl_seconds", sb.ttl_seconds},
          {"env", std::move(env)},
          {"cwd", sb.cwd},
          {"limits", LimitsJson(sb.limits)},
          {"network", sandbox::NetworkModeName(sb.network)},
          {"egress", EgressJson(sb)},
          {"allow_nested_userns", sb.allow_nested_userns},
          {"volumes", VolumesJson(sb.volumes)},
          {"metadata", sb.metadata},
          {"processes_running", sb.RunningProcesses()},
          {"limits_view", sb.runtime != nullptr && sb.runtime->LimitsView()}};
}

Result<StoredSandbox> StoredSandboxFromJson(std::string_view text) {
  try {
    const json::object o = json::parse(text).as_object();
    StoredSandbox r;
    r.deleting = o.at("status") == "deleting";
    if (auto* t = o.if_contains("tenant"); t && t->is_string()) r.tenant = t->as_string();
    r.template_name = json::value_to<std::string>(o.at("template"));
    for (const auto& [k, v] : o.at("env").as_object()) {
      if (v.is_string()) r.env[std::string(k)] = std::string(v.as_string());
    }
    r.cwd = json::value_to<std::string>(o.at("cwd"));
    const auto& l = o.at("limits").as_object();
    r.limits = {l.at("memory_mb").to_number<int64_t>(), l.at("pids").to_number<int64_t>(),
                l.at("cpu_percent").to_number<int64_t>(), l.at("disk_mb").to_number<int64_t>(),
                l.at("open_files").to_number<int64_t>()};
    const auto network = sandbox::ParseNetworkMode(o.at("network").as_string());
    if (!network) return Error{ErrorCode::kInvalidRequest, "unknown network mode"};
    r.network = *network;
    if (r.network == sandbox::NetworkMode::kEgress) {
      const json::value* egress = o.if_contains("egress");
      r.egress =
          egress ? EgressFromJson(*egress)
                 : Result<net::EgressPolicy>(Error{ErrorCode::kInvalidRequest, "no egress policy"});
    }
    if (auto* n = o.if_contains("allow_nested_userns"); n && n->is_bool()) {
      r.allow_nested_userns = n->as_bool();
    }
    if (auto* m = o.if_contains("metadata"); m && m->is_object()) r.metadata = m->as_object();
    r.ttl_seconds = o.at("ttl_seconds").to_number<int64_t>();
    r.created_at = ParseTime(o.if_contains("created_at"));
    if (auto* ports = o.if_contains("ports"); ports && ports->is_array()) {
      for (const auto& v : ports->as_array()) {
        const auto* p = v.if_object();
        const auto* port = p ? p->if_contains("port") : nullptr;
        if (!port || !port->is_int64() || port->as_int64() < 1 || port->as_int64() > 65535) {
          continue;
        }
        r.ports[static_cast<uint16_t>(port->as_int64())] =
            ParseTime(p->if_contains("created_at")).value_or(SystemNow());
      }
    }
    r.paused_at = ParseTime(o.if_contains("paused_at"));
    if (auto* m = o.if_contains("pause_mode"); m && m->is_string()) {
      r.pause_mode = ParsePauseMode(m->as_string());
    }
    if (auto* a = o.if_contains("auto_resume"); a && a->is_bool()) r.auto_resume = a->as_bool();
    if (auto* a = o.if_contains("auto_pause"); a && a->is_object()) {
      const auto* idle = a->as_object().if_contains("idle_seconds");
      const auto* mode = a->as_object().if_contains("mode");
      std::optional<PauseMode> parsed =
          mode && mode->is_string() ? ParsePauseMode(mode->as_string()) : PauseMode::kFreeze;
      if (idle && idle->is_int64() && idle->as_int64() > 0 && parsed) {
        r.auto_pause = AutoPause{idle->as_int64(), *parsed};
      }
    }
    if (auto* t = o.if_contains("on_timeout"); t && t->is_string()) {
      r.pause_on_timeout = t->as_string() == "pause";
    }
    if (auto* t = o.if_contains("ttl_period"); t && t->is_int64()) r.ttl_period = t->as_int64();
    if (auto* a = o.if_contains("volumes"); a && a->is_array()) {
      for (const auto& v : a->as_array()) {
        const json::object& m = v.as_object();
        r.volumes.push_back(SandboxVolume{
            json::value_to<std::string>(m.at("id")), json::value_to<std::string>(m.at("name")),
            json::value_to<std::string>(m.at("path")), m.at("read_only").as_bool()});
      }
    }
    if (auto* a = o.if_contains("sessions"); a && a->is_array()) r.sessions = a->as_array();
    if (auto* a = o.if_contains("contexts"); a && a->is_array()) r.contexts = a->as_array();
    return r;
  } catch (const std::exception& e) {
    return Error{ErrorCode::kInvalidRequest, std::string("unreadable sandbox record: ") + e.what()};
  }
}

void EndStoredAsKilled(json::object& o, SystemTime now) {
  o["status"] = "exited";
  o["exit_code"] = 137;
  o["signal"] = "SIGKILL";
  o["reason"] = "killed";
  o["ended_at"] = FormatRfc3339(now);
  o["duration_ms"] = 0;
  json::array tail = o["tail"].is_array() ? o["tail"].as_array() : json::array{};
  const uint64_t next = o["next_seq"].to_number<uint64_t>();
  tail.push_back(json::object{
      {"seq", next},
      {"kind", "exit"},
      {"time", FormatRfc3339(now)},
      {"offset", o["stdout_bytes"].to_number<uint64_t>() + o["stderr_bytes"].to_number<uint64_t>()},
      {"data", ""}});
  o["tail"] = std::move(tail);
  o["next_seq"] = next + 1;
}

json::value ExitJson(const std::optional<ExitRecord>& exit) {
  if (!exit) return nullptr;
  return json::object{
      {"exit_code", exit->exit_code},
      {"signal", exit->signal ? json::value(SignalName(*exit->signal)) : json::value(nullptr)},
      {"reason", ExitReasonName(exit->reason)},
      {"duration_ms", exit->duration_ms}};
}

json::object ProcessJson(const Process& p) {
  const auto& spec = p.spec();
  json::array argv;
  for (const auto& a : spec.argv) argv.emplace_back(a);
  const auto& exit = p.exit();
  json::object o{{"id", spec.id},
                 {"sandbox_id", spec.sandbox_id},
                 {"cmd", spec.cmd.empty() ? json::value(nullptr) : json::value(spec.cmd)},
                 {"argv", std::move(argv)},
                 {"status", exit ? "exited" : "running"},
                 {"pid", p.pid()},
                 {"keep_awake", spec.keep_awake},
                 {"started_at", FormatRfc3339(p.started_at())},
                 {"ended_at", exit ? TimeOrNull(exit->ended_at) : json::value(nullptr)},
                 {"exit_code", nullptr},
                 {"signal", nullptr},
                 {"reason", nullptr},
                 {"duration_ms", nullptr},
                 {"stdout_bytes", p.stdout_bytes()},
                 {"stderr_bytes", p.stderr_bytes()},
                 {"next_seq", p.log().next_seq()}};
  if (exit) {
    const json::value exit_json = ExitJson(exit);
    for (const auto& [k, v] : exit_json.as_object()) o[k] = v;
  }
  return o;
}

json::object StoredProcessJson(const Process& p, uint64_t tail_bytes) {
  json::object o = ProcessJson(p);
  const auto& spec = p.spec();
  o["cwd"] = spec.cwd;
  o["merge_stderr"] = spec.merge_stderr;
  o["idempotency_key"] = spec.idempotency_key;
  o["keep_stdin_open"] = spec.keep_stdin_open;
  o["as_root"] = spec.as_root;
  o["timeout_seconds"] = spec.timeout_seconds ? json::value(*spec.timeout_seconds) : nullptr;
  o["idle_timeout_seconds"] =
      spec.idle_timeout_seconds ? json::value(*spec.idle_timeout_seconds) : nullptr;
  o["pty"] = spec.pty
                 ? json::value(json::object{{"rows", spec.pty->rows}, {"cols", spec.pty->cols}})
                 : json::value(nullptr);
  o["log_limits"] = json::object{{"max_bytes", spec.log_limits.max_bytes},
                                 {"max_entries", spec.log_limits.max_entries}};
  json::array tail;
  const auto& entries = p.log().entries();
  // Keep the last tail_bytes of output exactly: whole entries, then the end of the one
  // before them, cut at a code point boundary.
  uint64_t bytes = 0;
  size_t first = entries.size();
  size_t cut = 0;  // bytes dropped from the front of entries[first]
  while (first > 0) {
    const auto& e = entries[first - 1];
    if (bytes + e.data.size() > tail_bytes) {
      const uint64_t room = tail_bytes - bytes;
      if (room > 0) {
        cut = e.data.size() - room;
        while (cut < e.data.size() && (static_cast<unsigned char>(e.data[cut]) & 0xC0) == 0x80)
          ++cut;
        if (cut < e.data.size()) --first;
      }
      break;
    }
    bytes += e.data.size();
    --first;
  }
  for (size_t i = first; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const size_t skip = i == first ? std::min(cut, e.data.size()) : 0;
    tail.push_back(json::object{{"seq", e.seq},
                                {"kind", KindName(e.kind)},
                                {"time", FormatRfc3339(e.time)},
                                {"offset", e.offset + skip},
                                {"data", Base64(std::string_view(e.data).substr(skip))}});
  }
  o["tail"] = std::move(tail);
  return o;
}

CommandSpec CommandSpecFromStored(const json::object& o) {
  auto number = [&](const char* key) -> std::optional<double> {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || !v->is_number()) return std::nullopt;
    return v->to_number<double>();
  };
  auto flag = [&](const char* key) {
    const json::value* v = o.if_contains(key);
    return v != nullptr && v->is_bool() && v->as_bool();
  };
  CommandSpec spec;
  spec.id = json::value_to<std::string>(o.at("id"));
  spec.sandbox_id = json::value_to<std::string>(o.at("sandbox_id"));
  if (o.at("cmd").is_string()) spec.cmd = json::value_to<std::string>(o.at("cmd"));
  spec.argv = json::value_to<std::vector<std::string>>(o.at("argv"));
  if (auto* cwd = o.if_contains("cwd"); cwd && cwd->is_string()) {
    spec.cwd = json::value_to<std::string>(*cwd);
  }
  spec.merge_stderr = flag("merge_stderr");
  spec.keep_stdin_open = flag("keep_stdin_open");
  spec.as_root = flag("as_root");
  spec.keep_awake = flag("keep_awake");
  if (auto* k = o.if_contains("idempotency_key"); k && k->is_string()) {
    spec.idempotency_key = json::value_to<std::string>(*k);
  }
  spec.timeout_seconds = number("timeout_seconds");
  spec.idle_timeout_seconds = number("idle_timeout_seconds");
  if (auto* pty = o.if_contains("pty"); pty && pty->is_object()) {
    sandbox::PtySize size;
    size.rows = static_cast<uint16_t>(pty->as_object().at("rows").to_number<int64_t>());
    size.cols = static_cast<uint16_t>(pty->as_object().at("cols").to_number<int64_t>());
    spec.pty = size;
  }
  if (auto* l = o.if_contains("log_limits"); l && l->is_object()) {
    spec.log_limits.max_bytes = l->as_object().at("max_bytes").to_number<uint64_t>();
    spec.log_limits.max_entries = l->as_object().at("max_entries").to_number<uint64_t>();
  }
  return spec;
}

std::shared_ptr<Process> ProcessFromStored(const boost::asio::any_io_executor& ex,
                                           const json::object& o) {
  try {
    CommandSpec spec = CommandSpecFromStored(o);
    ExitRecord exit;
    if (o.at("exit_code").is_int64())
      exit.exit_code = static_cast<int>(o.at("exit_code").as_int64());
    if (auto* s = o.if_contains("signal"); s && s->is_string()) {
      std::string name(s->as_string());
      exit.signal = ParseSignal(name);
    }
    if (auto* r = o.if_contains("reason"); r && r->is_string()) {
      exit.reason = ParseExitReason(r->as_string()).value_or(ExitReason::kKilled);
    }
    if (auto* d = o.if_contains("duration_ms"); d && d->is_int64())
      exit.duration_ms = d->as_int64();
    exit.ended_at = ParseTime(o.if_contains("ended_at")).value_or(SystemNow());

    std::vector<StoredEntry> tail;
    if (auto* t = o.if_contains("tail"); t && t->is_array()) {
      for (const auto& v : t->as_array()) {
        const auto& e = v.as_object();
        StoredEntry entry;
        entry.seq = e.at("seq").to_number<uint64_t>();
        entry.kind = ParseKind(e.at("kind").as_string()).value_or(EntryKind::kStdout);
        entry.time = ParseTime(e.if_contains("time")).value_or(exit.ended_at);
        entry.offset = e.at("offset").to_number<uint64_t>();
        entry.data = DecodeBase64(e.at("data").as_string()).value_or("");
        tail.push_back(std::move(entry));
      }
    }
    const auto started = ParseTime(o.if_contains("started_at")).value_or(exit.ended_at);
    const int pid = o.at("pid").is_int64() ? static_cast<int>(o.at("pid").as_int64()) : -1;
    return Process::Restore(ex, std::move(spec), started, pid, exit, std::move(tail),
                            o.at("stdout_bytes").to_number<uint64_t>(),
                            o.at("stderr_bytes").to_number<uint64_t>());
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace sandstream
