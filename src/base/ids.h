// Random identifiers and secrets, from the kernel's CSPRNG.
#pragma once

#include <string>
#include <string_view>

namespace sandstream {

// prefix + 16 lowercase hex digits: "sb_6f1c2a9e0b7d4e3a".
std::string NewId(std::string_view prefix);
// A bearer key: "ss_" + 40 hex digits.
std::string NewApiKey();
// Whether a caller-chosen id is acceptable: [A-Za-z0-9][A-Za-z0-9_.-]{0,63}.
bool IsValidClientId(std::string_view id);
// Constant-time comparison for secrets.
bool SecretEquals(std::string_view a, std::string_view b);

}  // namespace sandstream
