#include "api/request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include "base/ids.h"
#include "net/policy.h"

namespace sandstream::api {
namespace json = boost::json;

namespace {

Result<std::optional<std::string>> OptString(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return std::optional<std::string>();
  if (!v->is_string()) return Invalid(std::string(key) + " must be a string");
  return std::optional<std::string>(std::string(v->as_string()));
}

Result<std::optional<bool>> OptBool(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return std::optional<bool>();
  if (!v->is_bool()) return Invalid(std::string(key) + " must be true or false");
  return std::optional<bool>(v->as_bool());
}

Result<std::optional<double>> OptNumber(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return std::optional<double>();
  if (!v->is_number()) return Invalid(std::string(key) + " must be a number");
  return std::optional<double>(v->to_number<double>());
}

// An integral JSON number, saturated at the ends of int64 so that a range check still names
// the field's range; nullopt for anything else.
std::optional<int64_t> IntegerOf(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64()) return static_cast<int64_t>(std::min<uint64_t>(v.as_uint64(), INT64_MAX));
  if (!v.is_double() || std::floor(v.as_double()) != v.as_double()) return std::nullopt;
  const double d = v.as_double();
  if (d >= 0x1p63) return INT64_MAX;
  if (d < -0x1p63) return INT64_MIN;
  return static_cast<int64_t>(d);
}

// An optional integer field in [min, max]; anything else is one message naming both.
Result<std::optional<int64_t>> OptInt(const json::object& o, std::string_view key, int64_t min,
                                      int64_t max) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return std::optional<int64_t>();
  const std::optional<int64_t> n = IntegerOf(*v);
  if (!n || *n < min || *n > max) {
    return Invalid(std::string(key) + " must be an integer between " + std::to_string(min) +
                   " and " + std::to_string(max));
  }
  return n;
}

Result<std::map<std::string, std::string>> StringMap(const json::object& o, std::string_view key) {
  std::map<std::string, std::string> out;
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return out;
  if (!v->is_object()) return Invalid(std::string(key) + " must be an object of strings");
  for (const auto& [k, val] : v->as_object()) {
    if (!val.is_string())
      return Invalid(std::string(key) + "." + std::string(k) + " must be a string");
    if (k.empty() || k.find('=') != json::string_view::npos ||
        k.find('\0') != json::string_view::npos)
      return Invalid(std::string(key) + " has an invalid name '" + std::string(k) + "'");
    out[std::string(k)] = std::string(val.as_string());
  }
  return out;
}

// The `env` and `cwd` that sandboxes, sessions and contexts take: strings, an absolute path.
struct Environment {
  std::map<std::string, std::string> env;
  std::optional<std::string> cwd;
};

Result<Environment> ParseEnvironment(const json::object& body) {
  Environment e;
  auto env = StringMap(body, "env");
  if (!env) return std::move(env).error();
  e.env = std::move(*env);
  auto cwd = OptString(body, "cwd");
  if (!cwd) return std::move(cwd).error();
  if (*cwd && ((*cwd)->empty() || (**cwd)[0] != '/')) {
    return Invalid("cwd must be an absolute path");
  }
  e.cwd = std::move(*cwd);
  return e;
}

Result<std::string> IdempotencyKey(const Context& ctx) {
  auto it = ctx.req.find("Idempotency-Key");
  if (it == ctx.req.end()) return std::string();
  if (it->value().empty()) return Invalid("Idempotency-Key must not be empty");
  if (it->value().size() > 256) return Invalid("Idempotency-Key is longer than 256 bytes");
  return std::string(it->value());
}

Result<std::optional<double>> Timeout(const json::object& o, std::string_view key, double max) {
  auto t = OptNumber(o, key);
  if (!t) return std::move(t).error();
  if (*t && !(**t > 0 && **t <= max)) {
    return Invalid(std::string(key) + " must be greater than 0 and at most " +
                   std::to_string(static_cast<int64_t>(max)));
  }
  return *t;
}

Result<sse::Format> ParseFormat(std::string_view text) {
  if (text == "pandastack") return sse::Format::kPandastack;
  if (text == "cloudflare") return sse::Format::kCloudflare;
  return Invalid("format must be \"pandastack\" or \"cloudflare\"");
}

}  // namespace

Result<sse::Encoding> ParseEncoding(std::string_view text) {
  if (text == "utf8" || text == "utf-8") return sse::Encoding::kUtf8;
  if (text == "base64") return sse::Encoding::kBase64;
  return Invalid("encoding must be \"utf8\" or \"base64\"");
}

Result<json::value> ParseBodyValue(const Context& ctx) {
  const std::string& body = ctx.req.body();
  if (body.empty()) return json::value(json::object{});
  std::string_view type = ctx.Header(http::field::content_type);
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
  const bool json_type = type.empty() || type == "application/json" || type.ends_with("+json");
  // curl's `-d` labels a body form-urlencoded by default: accept it when it is JSON, so
  // `curl -d '{"cmd":"ls"}'` works without a Content-Type header.
  const bool curl_default = type == "application/x-www-form-urlencoded";
  if (!json_type && !curl_default) {
    return Error{ErrorCode::kUnsupportedMediaType,
                 "the body must be application/json, not " + std::string(type)};
  }
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec && curl_default) {
    return Error{ErrorCode::kUnsupportedMediaType,
                 "the body must be application/json, not " + std::string(type)};
  }
  if (ec) return Error{ErrorCode::kInvalidJson, "body is not valid JSON: " + ec.message()};
  return v;
}

Result<json::object> ParseBody(const Context& ctx) {
  auto v = ParseBodyValue(ctx);
  if (!v) return std::move(v).error();
  if (!v->is_object()) return Error{ErrorCode::kInvalidJson, "body must be a JSON object"};
  return std::move(v->as_object());
}

Result<sse::Format> FormatFromQuery(const Context& ctx) {
  auto text = ctx.Query("format");
  if (!text) return sse::Format::kPandastack;
  return ParseFormat(*text);
}

Result<sse::Encoding> EncodingFromQuery(const Context& ctx) {
  auto text = ctx.Query("encoding");
  if (!text) return sse::Encoding::kUtf8;
  return ParseEncoding(*text);
}

Result<double> TimeoutFromQuery(const Context& ctx, double fallback, double max) {
  auto t = ctx.Query("timeout_seconds");
  if (!t) return fallback;
  const std::string text(*t);
  char* end = nullptr;
  const double timeout = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(timeout > 0) || !(timeout <= max)) {
    char bound[32];
    std::snprintf(bound, sizeof bound, "%g", max);
    return Invalid(std::string("timeout_seconds must be a number greater than 0, at most ") +
                   bound);
  }
  return timeout;
}

std::string QueryWithout(std::string_view target, std::string_view name) {
  auto url = boost::urls::parse_origin_form(target);
  std::string query;
  if (!url) return query;
  for (auto param : url->encoded_params()) {
    if (param.key == name) continue;
    query += query.empty() ? '?' : '&';
    query += param.key;
    if (param.has_value) {
      query += '=';
      query += param.value;
    }
  }
  return query;
}

Result<CommandRequest> ParseCommand(const Context& ctx, const json::object& body,
                                    const SandboxEntry& sb, CommandKind kind) {
  const ServiceOptions& opts = ctx.service.options();
  CommandRequest r;
  CommandSpec& s = r.spec;

  auto cmd = OptString(body, "cmd");
  if (!cmd) return std::move(cmd).error();
  const json::value* argv = body.if_contains("argv");
  const bool has_argv = argv && !argv->is_null();
  if (cmd->has_value() == has_argv)
    return Invalid("give exactly one of cmd (a string) or argv (an array)");
  if (cmd->has_value()) {
    if ((*cmd)->empty()) return Invalid("cmd is empty");
    s.cmd = **cmd;
    s.argv = {"/bin/sh", "-c", s.cmd};
  } else {
    if (!argv->is_array() || argv->as_array().empty())
      return Invalid("argv must be a non-empty array of strings");
    for (const auto& a : argv->as_array()) {
      if (!a.is_string()) return Invalid("argv must be a non-empty array of strings");
      s.argv.emplace_back(a.as_string());
    }
  }
  for (const auto& a : s.argv) {
    if (a.find('\0') != std::string::npos) return Invalid("cmd/argv must not contain NUL bytes");
  }

  auto env = StringMap(body, "env");
  if (!env) return std::move(env).error();
  r.env = std::move(*env);
  s.env = ctx.service.ComposeEnv(sb, r.env);

  auto cwd = OptString(body, "cwd");
  if (!cwd) return std::move(cwd).error();
  s.cwd = cwd->value_or(sb.cwd);
  if (s.cwd.empty() || s.cwd[0] != '/') return Invalid("cwd must be an absolute path");

  auto in = OptString(body, "stdin");
  if (!in) return std::move(in).error();
  s.stdin_data = std::move(*in);
  s.keep_stdin_open = kind == CommandKind::kBackground && !s.stdin_data;

  auto timeout = Timeout(body, "timeout_seconds", opts.max_timeout_seconds);
  if (!timeout) return std::move(timeout).error();
  s.timeout_seconds = *timeout;
  if (!s.timeout_seconds && kind == CommandKind::kExec && opts.exec_default_timeout_seconds > 0) {
    s.timeout_seconds = opts.exec_default_timeout_seconds;
  }
  auto idle = Timeout(body, "idle_timeout_seconds", opts.max_timeout_seconds);
  if (!idle) return std::move(idle).error();
  s.idle_timeout_seconds = *idle;

  auto user = OptString(body, "user");
  if (!user) return std::move(user).error();
  if (*user && **user != "user" && **user != "root")
    return Invalid("user must be \"user\" or \"root\"");
  s.as_root = *user && **user == "root";

  auto merge = OptBool(body, "merge_stderr");
  if (!merge) return std::move(merge).error();
  s.merge_stderr = merge->value_or(false);
  // A process that keeps its sandbox from pausing when idle (auto_pause) while it runs: a
  // background job nobody is watching. A request in flight is activity already.
  auto awake = OptBool(body, "keep_awake");
  if (!awake) return std::move(awake).error();
  s.keep_awake = awake->value_or(false);

  auto window =
      OptInt(body, "log_window_bytes", 1, static_cast<int64_t>(opts.log_window_max_bytes));
  if (!window) return std::move(window).error();
  s.log_limits = opts.default_log_limits;
  if (*window) s.log_limits.max_bytes = static_cast<uint64_t>(**window);

  auto format = OptString(body, "format");
  if (!format) return std::move(format).error();
  // The body's value wins over the query's (exec/stream also takes ?format= and ?flow=).
  auto f = *format ? ParseFormat(**format) : FormatFromQuery(ctx);
  if (!f) return std::move(f).error();
  r.format = *f;
  auto encoding = OptString(body, "encoding");
  if (!encoding) return std::move(encoding).error();
  auto e = *encoding ? ParseEncoding(**encoding) : EncodingFromQuery(ctx);
  if (!e) return std::move(e).error();
  r.encoding = *e;
  auto flow = OptString(body, "flow");
  if (!flow) return std::move(flow).error();
  const std::string flow_name = flow->value_or(std::string(ctx.Query("flow").value_or("wait")));
  auto parsed_flow = ParseFlow(flow_name);
  if (!parsed_flow) return Invalid("flow must be \"wait\" or \"skip\"");
  r.flow = *parsed_flow;
  // Only exec runs in a session (the route reads it); the field's type holds everywhere.
  auto session = OptString(body, "session");
  if (!session) return std::move(session).error();

  if (kind == CommandKind::kBackground) {
    auto id = OptString(body, "id");
    if (!id) return std::move(id).error();
    if (*id) {
      if (!IsValidClientId(**id)) {
        return Invalid("id must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}");
      }
      s.id = **id;
    }
  }
  auto key = IdempotencyKey(ctx);
  if (!key) return std::move(key).error();
  s.idempotency_key = std::move(*key);
  return r;
}

namespace {

// A list of rule strings, or nullopt for null or absent.
Result<std::optional<std::vector<std::string>>> OptRules(const json::object& o,
                                                         std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return std::optional<std::vector<std::string>>();
  if (!v->is_array())
    return Invalid("network.egress." + std::string(key) + " must be an array of strings");
  std::vector<std::string> rules;
  for (const auto& item : v->as_array()) {
    if (!item.is_string()) {
      return Invalid("network.egress." + std::string(key) + " must be an array of strings");
    }
    rules.emplace_back(item.as_string());
  }
  return std::optional(std::move(rules));
}

// "none", "loopback", "egress" (every public address and name), or {"egress": {"allow": [...],
// "deny": [...]}}.
Result<void> ParseNetwork(const json::value& v, SandboxRequest& r) {
  constexpr const char* kShape =
      "network must be \"none\", \"loopback\", \"egress\" or {\"egress\": {\"allow\": [...], "
      "\"deny\": [...]}}";
  if (v.is_string()) {
    r.network = std::string(v.as_string());
    if (!sandbox::ParseNetworkMode(r.network)) return Invalid(kShape);
    if (r.network == "egress") {
      auto policy = net::ParseEgressPolicy(std::nullopt, {});
      if (!policy) return std::move(policy).error();
      r.egress = std::move(*policy);
    }
    return Ok{};
  }
  if (!v.is_object()) return Invalid(kShape);
  for (const auto& [k, unused] : v.as_object()) {
    if (k != "egress") return Invalid("network." + std::string(k) + ": unknown; " + kShape);
  }
  const json::value* egress = v.as_object().if_contains("egress");
  if (!egress || !(egress->is_object() || egress->is_bool())) return Invalid(kShape);
  if (egress->is_bool() && !egress->as_bool()) {
    r.network = "loopback";
    return Ok{};
  }
  std::optional<std::vector<std::string>> allow;
  std::vector<std::string> deny;
  if (egress->is_object()) {
    for (const auto& [k, unused] : egress->as_object()) {
      if (k != "allow" && k != "deny") {
        return Invalid("network.egress." + std::string(k) + ": unknown (allow, deny)");
      }
    }
    auto a = OptRules(egress->as_object(), "allow");
    if (!a) return std::move(a).error();
    auto d = OptRules(egress->as_object(), "deny");
    if (!d) return std::move(d).error();
    allow = std::move(*a);
    deny = std::move(*d).value_or(std::vector<std::string>{});
  }
  auto policy = net::ParseEgressPolicy(std::move(allow), std::move(deny));
  if (!policy) return std::move(policy).error();
  r.network = "egress";
  r.egress = std::move(*policy);
  return Ok{};
}

}  // namespace

Result<net::EgressPolicy> ParseEgressUpdate(const json::value& body) {
  SandboxRequest r;
  if (auto parsed = ParseNetwork(body, r); !parsed) return std::move(parsed).error();
  if (r.network != "egress" || !r.egress) {
    return Error{ErrorCode::kConflict,
                 "a sandbox's network mode is set at create: only the rules of one with egress "
                 "change (to cut every address, give {\"egress\": {\"allow\": []}})"};
  }
  return std::move(*r.egress);
}

Result<PauseMode> ParsePauseRequest(const json::object& body) {
  auto mode = OptString(body, "mode");
  if (!mode) return std::move(mode).error();
  const std::optional<PauseMode> parsed = ParsePauseMode(mode->value_or("freeze"));
  if (!parsed) return Invalid("mode must be \"freeze\" or \"checkpoint\"");
  return *parsed;
}

namespace {

// `auto_pause`: null (off) or {"idle_seconds": N, "mode": "freeze" | "checkpoint"}.
Result<std::optional<AutoPause>> ParseAutoPause(const json::value& v) {
  if (v.is_null()) return std::optional<AutoPause>();
  if (!v.is_object()) {
    return Invalid("auto_pause must be null or {\"idle_seconds\": N, \"mode\": \"freeze\"}");
  }
  const json::object& o = v.as_object();
  for (const auto& [k, value] : o) {
    if (k != "idle_seconds" && k != "mode") {
      return Invalid("auto_pause has no field '" + std::string(k) + "' (idle_seconds, mode)");
    }
  }
  auto idle = OptInt(o, "idle_seconds", 1, kMaxTtlSeconds);
  if (!idle) return Error{ErrorCode::kInvalidRequest, "auto_pause." + idle.error().message};
  if (!*idle) return Invalid("auto_pause.idle_seconds is required");
  auto mode = ParsePauseRequest(o);
  if (!mode) return Error{ErrorCode::kInvalidRequest, "auto_pause." + mode.error().message};
  return std::optional<AutoPause>(AutoPause{**idle, *mode});
}

Result<std::optional<bool>> ParseOnTimeout(const json::object& body) {
  auto on_timeout = OptString(body, "on_timeout");
  if (!on_timeout) return std::move(on_timeout).error();
  if (!*on_timeout) return std::optional<bool>();
  if (**on_timeout != "kill" && **on_timeout != "pause") {
    return Invalid("on_timeout must be \"kill\" or \"pause\"");
  }
  return std::optional<bool>(**on_timeout == "pause");
}

}  // namespace

Result<Service::LifecycleSettings> ParseLifecycleUpdate(const json::object& body) {
  Service::LifecycleSettings change;
  for (const auto& [k, v] : body) {
    if (k != "auto_pause" && k != "on_timeout" && k != "auto_resume") {
      return Invalid("a sandbox's '" + std::string(k) +
                     "' cannot be changed (auto_pause, on_timeout, auto_resume can)");
    }
  }
  if (const json::value* v = body.if_contains("auto_pause")) {
    auto auto_pause = ParseAutoPause(*v);
    if (!auto_pause) return std::move(auto_pause).error();
    change.auto_pause = *auto_pause;
  }
  auto on_timeout = ParseOnTimeout(body);
  if (!on_timeout) return std::move(on_timeout).error();
  change.pause_on_timeout = *on_timeout;
  auto auto_resume = OptBool(body, "auto_resume");
  if (!auto_resume) return std::move(auto_resume).error();
  change.auto_resume = *auto_resume;
  return change;
}

Result<std::vector<SandboxVolume>> ParseVolumeMounts(const json::value& v, std::string_view field) {
  std::vector<SandboxVolume> mounts;
  if (v.is_null()) return mounts;
  const std::string shape = std::string(field) +
                            " must be an array of {\"name\": a volume, \"path\": \"/mnt/data\", "
                            "\"read_only\": false}";
  if (!v.is_array()) return Invalid(shape);
  for (const json::value& item : v.as_array()) {
    if (!item.is_object()) return Invalid(shape);
    const json::object& o = item.as_object();
    for (const auto& [k, unused] : o) {
      if (k != "name" && k != "path" && k != "read_only") {
        return Invalid(std::string(field) + "." + std::string(k) +
                       ": unknown (name, path, read_only)");
      }
    }
    const json::value* name = o.if_contains("name");
    const json::value* path = o.if_contains("path");
    if (!name || !name->is_string() || name->as_string().empty() || !path || !path->is_string()) {
      return Invalid(shape);
    }
    auto read_only = OptBool(o, "read_only");
    if (!read_only) return std::move(read_only).error();
    mounts.push_back(SandboxVolume{"", std::string(name->as_string()),
                                   std::string(path->as_string()), read_only->value_or(false)});
  }
  return mounts;
}

Result<SandboxRequest> ParseSandboxRequest(const json::object& body) {
  SandboxRequest r;
  auto tmpl = OptString(body, "template");
  if (!tmpl) return std::move(tmpl).error();
  if (*tmpl) r.template_name = **tmpl;
  auto environment = ParseEnvironment(body);
  if (!environment) return std::move(environment).error();
  r.env = std::move(environment->env);
  if (environment->cwd) r.cwd = std::move(*environment->cwd);
  auto ttl = OptInt(body, "ttl_seconds", 0, kMaxTtlSeconds);
  if (!ttl) return std::move(ttl).error();
  if (*ttl && **ttl > 0) r.ttl_seconds = **ttl;
  if (const json::value* limits = body.if_contains("limits"); limits && !limits->is_null()) {
    if (!limits->is_object()) return Invalid("limits must be an object");
    for (const auto& [k, v] : limits->as_object()) {
      if (v.is_null()) continue;
      // The service checks the range against the configured maximum and names it.
      const std::optional<int64_t> n = IntegerOf(v);
      if (!n) return Invalid("limits." + std::string(k) + " must be an integer");
      r.limits[std::string(k)] = *n;
    }
  }
  auto nested = OptBool(body, "allow_nested_userns");
  if (!nested) return std::move(nested).error();
  r.allow_nested_userns = nested->value_or(false);
  auto auto_resume = OptBool(body, "auto_resume");
  if (!auto_resume) return std::move(auto_resume).error();
  r.auto_resume = auto_resume->value_or(true);
  if (const json::value* v = body.if_contains("auto_pause")) {
    auto auto_pause = ParseAutoPause(*v);
    if (!auto_pause) return std::move(auto_pause).error();
    r.auto_pause = *auto_pause;
  }
  auto on_timeout = ParseOnTimeout(body);
  if (!on_timeout) return std::move(on_timeout).error();
  r.pause_on_timeout = on_timeout->value_or(false);
  if (const json::value* network = body.if_contains("network"); network && !network->is_null()) {
    if (auto parsed = ParseNetwork(*network, r); !parsed) return std::move(parsed).error();
  }
  if (const json::value* m = body.if_contains("metadata"); m && !m->is_null()) {
    if (!m->is_object()) return Invalid("metadata must be an object of strings");
    for (const auto& [k, v] : m->as_object()) {
      if (!v.is_string()) return Invalid("metadata." + std::string(k) + " must be a string");
    }
    r.metadata = m->as_object();
  }
  if (const json::value* v = body.if_contains("volumes")) {
    auto volumes = ParseVolumeMounts(*v, "volumes");
    if (!volumes) return std::move(volumes).error();
    r.volumes = std::move(*volumes);
  }
  return r;
}

Result<SessionRequest> ParseSessionRequest(const json::object& body) {
  SessionRequest r;
  auto id = OptString(body, "id");
  if (!id) return std::move(id).error();
  if (*id && !IsValidClientId(**id))
    return Invalid("id must match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}");
  r.id = id->value_or("");
  auto environment = ParseEnvironment(body);
  if (!environment) return std::move(environment).error();
  r.env = std::move(environment->env);
  if (environment->cwd) r.cwd = std::move(*environment->cwd);
  return r;
}

Result<ContextRequest> ParseContextRequest(const json::object& body) {
  ContextRequest r;
  auto language = OptString(body, "language");
  if (!language) return std::move(language).error();
  if (*language) {
    auto parsed = ParseLanguage(**language);
    if (!parsed) return Invalid(std::string(kLanguageChoices));
    r.language = *parsed;
  }
  auto environment = ParseEnvironment(body);
  if (!environment) return std::move(environment).error();
  r.env = std::move(environment->env);
  if (environment->cwd) r.cwd = std::move(*environment->cwd);
  return r;
}

Result<CellRequest> ParseCellRequest(const Context& ctx, const json::object& body) {
  CellRequest r;
  const json::value* code = body.if_contains("code");
  if (!code || !code->is_string()) return Invalid("code must be a string");
  r.code = std::string(code->as_string());
  const auto& opts = ctx.service.options();
  auto timeout = Timeout(body, "timeout_seconds", opts.max_timeout_seconds);
  if (!timeout) return std::move(timeout).error();
  r.timeout_seconds =
      timeout->value_or(opts.exec_default_timeout_seconds > 0 ? opts.exec_default_timeout_seconds
                                                              : opts.max_timeout_seconds);
  auto key = IdempotencyKey(ctx);
  if (!key) return std::move(key).error();
  r.idempotency_key = std::move(*key);
  return r;
}

Result<PullRequest> ParsePullRequest(const json::object& body) {
  for (const auto& [key, value] : body) {
    if (key != "name" && key != "image" && key != "auth") {
      return Invalid("unknown field '" + std::string(key) + "'");
    }
  }
  auto name = OptString(body, "name");
  if (!name) return std::move(name).error();
  auto image = OptString(body, "image");
  if (!image) return std::move(image).error();
  if (!*image || (*image)->empty()) {
    return Invalid("image is required: a reference such as registry.example.com/team/app:1.0");
  }
  auto reference = image::ParseReference(**image);
  if (!reference) return std::move(reference).error();
  PullRequest out{name->value_or(""), std::move(*reference), {}};
  const json::value* auth = body.if_contains("auth");
  if (!auth || auth->is_null()) return out;
  if (!auth->is_object()) return Invalid("auth must be an object {username, password}");
  for (const auto& [key, value] : auth->as_object()) {
    if (key != "username" && key != "password") {
      return Invalid("unknown field 'auth." + std::string(key) + "'");
    }
  }
  auto username = OptString(auth->as_object(), "username");
  if (!username) return Invalid("auth." + username.error().message);
  auto password = OptString(auth->as_object(), "password");
  if (!password) return Invalid("auth." + password.error().message);
  if (!*username || (*username)->empty()) return Invalid("auth.username is required with auth");
  out.credentials = {std::move(**username), password->value_or("")};
  return out;
}

}  // namespace sandstream::api
