#include "base/log.h"

#include <cstdio>
#include <string>

#include "base/clock.h"

namespace sandstream::log {
namespace {

Level g_level = Level::kInfo;

std::string_view LevelName(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
  }
  return "info";
}

void AppendValue(std::string& out, std::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      plain = false;
      break;
    }
  }
  if (plain) {
    out += value;
    return;
  }
  out += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

void SetLevel(Level level) { g_level = level; }

bool ParseLevel(std::string_view text, Level* out) {
  for (Level l : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (text == LevelName(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

void Write(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  if (level < g_level) return;
  std::string line;
  line.reserve(128);
  line += "time=";
  line += FormatRfc3339(SystemNow());
  line += " level=";
  line += LevelName(level);
  line += " msg=";
  AppendValue(line, msg);
  for (const auto& [key, value] : fields) {
    line += ' ';
    line += key;
    line += '=';
    AppendValue(line, value);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace sandstream::log
