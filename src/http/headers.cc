#include "http/headers.h"

#include <string>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

namespace sandstream::http {
namespace beast = boost::beast;

Error BodyTooLarge(uint64_t limit) {
  return Error{ErrorCode::kPayloadTooLarge,
               "request body is larger than " + std::to_string(limit) + " bytes"};
}

std::optional<Error> HeaderError(const boost::system::error_code& ec) {
  if (ec == beast::http::error::header_limit) {
    return Error{ErrorCode::kRequestHeaderTooLarge,
                 "request header is larger than " + std::to_string(kHeaderLimit) + " bytes"};
  }
  if (ec.category() != make_error_code(beast::http::error::header_limit).category() ||
      ec == beast::http::error::end_of_stream || ec == beast::http::error::partial_message) {
    return std::nullopt;
  }
  return Error{ErrorCode::kInvalidRequest, "malformed HTTP request: " + ec.message()};
}

bool IsJsonType(std::string_view content_type) {
  std::string_view base = content_type.substr(0, content_type.find(';'));
  while (!base.empty() && (base.back() == ' ' || base.back() == '\t')) base.remove_suffix(1);
  return beast::iequals(base, "application/json");
}

}  // namespace sandstream::http
