// A command request (POST .../exec, .../processes, a message of exec/ws) into the command spec
// a process starts from: the body as the client sent it, with the query and headers that
// select format, encoding and flow. Whatever is accepted must be a spec the spawner can run.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "api/request.h"
#include "api_context.h"
#include "check.h"

namespace sandstream::fuzz {
namespace {

constexpr const char* kContentTypes[] = {"",
                                         "application/json",
                                         "application/json; charset=utf-8",
                                         "application/x-www-form-urlencoded",
                                         "application/merge-patch+json",
                                         "text/plain"};
constexpr const char* kQueryNames[] = {"format", "encoding", "flow"};

void CheckSpec(const api::CommandRequest& r, api::CommandKind kind) {
  const CommandSpec& s = r.spec;
  const ServiceOptions& opts = World().service.options();
  FUZZ_CHECK(!s.argv.empty());
  for (const auto& a : s.argv) FUZZ_CHECK(a.find('\0') == std::string::npos);
  FUZZ_CHECK(!s.cwd.empty() && s.cwd[0] == '/');
  for (const auto& e : s.env) {
    const size_t eq = e.find('=');
    FUZZ_CHECK(eq != std::string::npos && eq > 0);
    FUZZ_CHECK(e.substr(0, eq).find('\0') == std::string::npos);
  }
  for (const auto& [name, value] : r.env) {
    FUZZ_CHECK(!name.empty() && name.find('=') == std::string::npos);
  }
  if (s.timeout_seconds) {
    FUZZ_CHECK(*s.timeout_seconds > 0 && *s.timeout_seconds <= opts.max_timeout_seconds);
  }
  if (s.idle_timeout_seconds) {
    FUZZ_CHECK(*s.idle_timeout_seconds > 0 && *s.idle_timeout_seconds <= opts.max_timeout_seconds);
  }
  FUZZ_CHECK(s.log_limits.max_bytes >= 1);
  FUZZ_CHECK(s.log_limits.max_bytes <=
             std::max<uint64_t>(opts.log_window_max_bytes, opts.default_log_limits.max_bytes));
  if (kind == api::CommandKind::kExec) FUZZ_CHECK(s.id.empty());
  FUZZ_CHECK(s.idempotency_key.size() <= 256);
}

}  // namespace
}  // namespace sandstream::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  using namespace sandstream::fuzz;
  namespace http = boost::beast::http;  // Beast's, not sandstream::http
  ApiWorld& world = World();
  FuzzedDataProvider in(data, size);

  http::request<http::string_body> req{http::verb::post, "/v1/sandboxes/sb_fuzz/exec", 11};
  const auto* type =
      kContentTypes[in.ConsumeIntegralInRange<size_t>(0, std::size(kContentTypes) - 1)];
  if (*type) req.set(http::field::content_type, type);
  std::map<std::string, std::string, std::less<>> query;
  for (const char* name : kQueryNames) {
    if (in.ConsumeBool()) query[name] = in.ConsumeRandomLengthString(16);
  }
  if (in.ConsumeBool()) req.set("Idempotency-Key", in.ConsumeRandomLengthString(300));
  const auto kind = in.ConsumeBool() ? api::CommandKind::kExec : api::CommandKind::kBackground;
  req.body() = in.ConsumeRemainingBytesAsString();

  api::Context ctx = world.MakeContext(req, std::move(query));
  auto body = api::ParseBody(ctx);
  if (!body) return 0;
  auto command = api::ParseCommand(ctx, *body, world.sandbox, kind);
  if (command) CheckSpec(*command, kind);
  // exec/ws: the same object, its `id` the client's tag rather than a process id.
  body->erase("id");
  auto message = api::ParseCommand(ctx, *body, world.sandbox, api::CommandKind::kExec);
  if (message) CheckSpec(*message, api::CommandKind::kExec);
  return 0;
}
