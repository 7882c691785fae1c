// The HTTP front up to the handler: raw bytes through Beast's request parser with the limits a
// session sets, the route match (route, captures, query, key, body limit), then what handlers
// read from a request before they act: the JSON body and each kind of request it may hold,
// the query's format, encoding, flow and flags, and the resume point.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/http/read.hpp>

#include "api/request.h"
#include "api/router.h"
#include "api/routes/routes.h"
#include "api/stream.h"
#include "api_context.h"
#include "check.h"
#include "http/headers.h"

namespace sandstream::fuzz {
namespace {

namespace beast = boost::beast;

size_t Captures(std::string_view pattern) {
  size_t n = 0;
  for (size_t at = pattern.find("{}"); at != std::string_view::npos;
       at = pattern.find("{}", at + 2))
    ++n;
  return n;
}

// A port's proxy captures the sandbox, the port and the path's prefix up to the port (empty
// when the request came by its preview host); every other route captures one path segment
// per {}.
void CheckMatch(const api::RouteMatch& match) {
  if (match.route == &api::ProxyRoute()) {
    FUZZ_CHECK(match.params.size() == 3);
    FUZZ_CHECK(!match.params[0].empty() && match.params[0].find('/') == std::string::npos);
    const std::string& port = match.params[1];
    FUZZ_CHECK(!port.empty() && port.size() <= 5 && port.front() != '0' &&
               port.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(port) <= 65535);
    const std::string& prefix = match.params[2];
    FUZZ_CHECK(prefix.empty() ||
               (match.path.starts_with(prefix) && prefix.ends_with("/ports/" + port)));
    FUZZ_CHECK(match.allow.empty());
  } else if (match.route) {
    FUZZ_CHECK(match.params.size() == Captures(match.route->pattern));
    for (const auto& p : match.params) {
      FUZZ_CHECK(!p.empty() && p.find('/') == std::string::npos);
    }
    FUZZ_CHECK(match.allow.empty());
  } else {
    FUZZ_CHECK(match.refusal.has_value());
  }
  if (match.refusal) {
    const ErrorCode code = match.refusal->code;
    FUZZ_CHECK(code == ErrorCode::kNotFound || code == ErrorCode::kMethodNotAllowed ||
               code == ErrorCode::kUnauthorized || code == ErrorCode::kPayloadTooLarge ||
               code == ErrorCode::kForbidden);
    FUZZ_CHECK((code == ErrorCode::kMethodNotAllowed) == !match.allow.empty());
  }
}

// Everything a handler may read from the request before it acts; none of it may fail but as
// an Error.
void ReadAsHandlers(api::Context& ctx) {
  ApiWorld& world = World();
  (void)api::FormatFromQuery(ctx);
  (void)api::EncodingFromQuery(ctx);
  (void)api::FlowFromQuery(ctx, Flow::kWait);
  auto follow = ctx.QueryFlag("follow");
  if (follow) (void)api::WantsStream(ctx, *follow);
  (void)api::ResumePoint(ctx, 0);
  (void)api::TailQuery(ctx);
  auto body = api::ParseBody(ctx);
  if (!body) return;
  (void)api::ParseCommand(ctx, *body, world.sandbox, api::CommandKind::kExec);
  (void)api::ParseCommand(ctx, *body, world.sandbox, api::CommandKind::kBackground);
  (void)api::ParseSandboxRequest(*body);
  (void)api::ParseSessionRequest(*body);
  (void)api::ParseContextRequest(*body);
  (void)api::ParseCellRequest(ctx, *body);
}

}  // namespace
}  // namespace sandstream::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sandstream;
  using namespace sandstream::fuzz;
  namespace http = boost::beast::http;  // Beast's, not sandstream::http
  ApiWorld& world = World();

  beast::test::stream stream(world.io);
  stream.append(std::string_view(reinterpret_cast<const char*>(data), size));
  stream.close_remote();
  beast::flat_buffer buffer;
  http::request_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  parser.header_limit(sandstream::http::kHeaderLimit);
  beast::error_code ec;
  http::read_header(stream, buffer, parser, ec);
  if (ec) {
    (void)sandstream::http::HeaderError(ec);
    return 0;
  }

  api::RouteMatch match = api::MatchRoute(parser, world.server.options());
  CheckMatch(match);
  parser.body_limit(match.body_limit);
  if (match.refusal) return 0;
  const bool stream_body = match.route->stream_body;
  if (!stream_body && !parser.is_done()) {
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::body_limit) {
      (void)sandstream::http::BodyTooLarge(match.body_limit);
      return 0;
    }
    if (ec) return 0;
  }
  auto req = stream_body || !parser.is_done()
                 ? http::request<http::string_body>(parser.get().base())
                 : parser.release();
  FUZZ_CHECK(req.body().size() <= match.body_limit);
  api::Context ctx = world.MakeContext(req, std::move(match.query));
  ctx.params = std::move(match.params);
  ReadAsHandlers(ctx);
  return 0;
}
