// UTF-8 helpers for chunking: a chunk must never end inside a code point, and text sent as
// JSON must be valid UTF-8. Pure functions; no allocation beyond the returned string.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sandstream {

// Length of the longest prefix of `bytes` that does not end inside an incomplete (but so far
// valid) multi-byte sequence. Only the last 1-3 bytes can be held back; bytes that can never
// become valid are not held back (they will be replaced when rendered).
size_t Utf8CompletePrefix(std::string_view bytes);

// Appends `bytes` to `out` with every invalid sequence replaced by U+FFFD (one per maximal
// invalid subpart, as the Unicode standard recommends).
void AppendSanitizedUtf8(std::string& out, std::string_view bytes);

// Whether `bytes` is entirely valid UTF-8 (fast path for the above).
bool IsValidUtf8(std::string_view bytes);

// Length of the valid sequence (1-4 bytes) that starts at bytes[i], or 0 when the bytes there
// are invalid or cut short by the end of `bytes`.
size_t Utf8SequenceAt(std::string_view bytes, size_t i);

}  // namespace sandstream
