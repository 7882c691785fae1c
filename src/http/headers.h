// What a node and a gateway answer from a request's header alone: the header's size limit, the
// error for a header that could not be read or a body past its limit, and whether a
// Content-Type is JSON's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <boost/system/error_code.hpp>

#include "base/error.h"

namespace sandstream::http {

// The largest request header read; a larger one is answered 431.
inline constexpr size_t kHeaderLimit = 64 * 1024;

// The answer to a body past `limit` bytes.
Error BodyTooLarge(uint64_t limit);

// What to answer a request whose header could not be read, if anything: nothing when the
// client closed or went quiet.
std::optional<Error> HeaderError(const boost::system::error_code& ec);

// Whether a Content-Type is JSON's (parameters and case aside): how a node and a gateway tell
// a template's pull from an image archive alike.
bool IsJsonType(std::string_view content_type);

}  // namespace sandstream::http
