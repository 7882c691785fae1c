// JSON string literals, escaped in place: the text of every output chunk goes through here on
// its way to a stream (api/sse.h), so there is no DOM and plain runs are copied a vector at a
// time. Pure: appends bytes to a string.
#pragma once

#include <string>
#include <string_view>

namespace sandstream {

// Appends `text` as a JSON string literal (quotes included); invalid UTF-8 becomes U+FFFD.
void AppendJsonString(std::string& out, std::string_view text);

// The code paths of AppendJsonString, widest last; it takes the widest this CPU has.
enum class JsonPath { kScalar, kSse2, kAvx2 };
// AppendJsonString on `path`, for tests and the encoders bench to pin each path in turn; false
// (and nothing appended) when this build or CPU lacks it.
bool AppendJsonStringForTesting(JsonPath path, std::string& out, std::string_view text);

}  // namespace sandstream
