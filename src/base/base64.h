// Standard base64 (RFC 4648, with padding), for byte-exact output on the wire and in the store.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandstream {

void AppendBase64(std::string& out, std::string_view bytes);
// The code paths of AppendBase64, widest last; it takes the widest this CPU has.
enum class Base64Path { kScalar, kSsse3, kAvx2 };
// AppendBase64 on `path`, for tests and the encoders bench to pin each path in turn; false (and
// nothing appended) when this build or CPU lacks it.
bool AppendBase64ForTesting(Base64Path path, std::string& out, std::string_view bytes);
std::string Base64(std::string_view bytes);
// nullopt for anything that is not valid padded base64.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace sandstream
