// Structured logging: one line per record, `time level msg key=value ...`, to stderr.
// Safe to call from the io_context thread only (the daemon has one); never after fork().
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace sandstream::log {

enum class Level { kDebug, kInfo, kWarn, kError };

void SetLevel(Level level);
bool ParseLevel(std::string_view text, Level* out);

// A key and its already formatted value; values with spaces or quotes are quoted on output.
using Field = std::pair<std::string_view, std::string>;

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});

inline void Debug(std::string_view msg, std::initializer_list<Field> f = {}) { Write(Level::kDebug, msg, f); }
inline void Info(std::string_view msg, std::initializer_list<Field> f = {}) { Write(Level::kInfo, msg, f); }
inline void Warn(std::string_view msg, std::initializer_list<Field> f = {}) { Write(Level::kWarn, msg, f); }
inline void Error(std::string_view msg, std::initializer_list<Field> f = {}) { Write(Level::kError, msg, f); }

}  // namespace sandstream::log
