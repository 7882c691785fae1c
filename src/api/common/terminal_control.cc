#include "api/common/terminal_control.h"

#include <cmath>
#include <string>

#include <boost/json.hpp>

#include "api/http.h"
#include "process/terminal.h"

namespace sandstream::api {
namespace json = boost::json;

namespace {

Result<int> Cells(const json::value* v, std::string_view name) {
  if (!v || !v->is_number()) return Invalid(std::string(name) + " must be an integer");
  const double d = v->to_number<double>();
  // In range before the cast: a double past int's range does not convert (1e300 rows).
  if (!(d >= 1 && d <= kMaxCells) || d != std::trunc(d)) {
    return Invalid(std::string(name) + " must be between 1 and " + std::to_string(kMaxCells));
  }
  return static_cast<int>(d);
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

}  // namespace sandstream::api
