// What the code interpreters of other products' APIs (E2B's, Cloudflare's) share when they are
// served from sandstream's code contexts: the default context of a language, made on first
// use, and the fields a result's MIME bundle turns into.
#pragma once

#include <memory>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>

#include "api/server.h"
#include "base/result.h"
#include "service/contexts.h"

namespace sandstream::api {

// The MIME types of a result that both SDKs read as fields of their own ("text/plain" is
// "text"), and the sandstream-specific ones of the Python driver (a chart's data, a table's
// columns), which E2B's SDK reads as `chart` and `data`.
struct ResultFormat {
  std::string_view mime;
  std::string_view field;
};
inline constexpr ResultFormat kResultFormats[] = {
    {"text/plain", "text"},       {"text/html", "html"},
    {"image/png", "png"},         {"image/jpeg", "jpeg"},
    {"image/svg+xml", "svg"},     {"application/pdf", "pdf"},
    {"text/latex", "latex"},      {"text/markdown", "markdown"},
    {"application/json", "json"}, {"application/javascript", "javascript"}};
inline constexpr std::string_view kChartMime = "application/vnd.sandstream.chart+json";
inline constexpr std::string_view kDataMime = "application/vnd.sandstream.data+json";

// Copies each format of `bundle` (a result's `data`) that kResultFormats names into `out`
// under its field.
void CopyFormats(const boost::json::object& bundle, boost::json::object& out);

// The default context of `language` in `sb` ("default-python"), made when missing; one made
// by a concurrent request meanwhile is that one.
boost::asio::awaitable<Result<std::shared_ptr<CodeContext>>> DefaultContext(Context& ctx,
                                                                            const SandboxEntry& sb,
                                                                            Language language);

}  // namespace sandstream::api
