#include "api/sse.h"

#include <algorithm>
#include <charconv>

#include "base/base64.h"
#include "platform/signals.h"
#include "process/utf8.h"

namespace sandstream::sse {
namespace {

void AppendNumber(std::string& out, int64_t n) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
  out.append(buf, end);
}

void AppendTimestamp(std::string& out, SystemTime t) {
  out += "\"timestamp\":\"";
  out += FormatRfc3339(t);
  out += '"';
}

void AppendExitFields(std::string& out, Format format, const ExitRecord& exit) {
  const bool cf = format == Format::kCloudflare;
  out += cf ? "\"exitCode\":" : "\"exit_code\":";
  AppendNumber(out, exit.exit_code);
  out += ",\"signal\":";
  if (exit.signal) {
    out += '"';
    out += SignalName(*exit.signal);
    out += '"';
  } else {
    out += "null";
  }
  out += ",\"reason\":\"";
  out += ExitReasonName(exit.reason);
  out += cf ? "\",\"durationMs\":" : "\",\"duration_ms\":";
  AppendNumber(out, exit.duration_ms);
}

// Whether any of the 8 bytes in `w` is below 0x20, a '"', a '\\' or not ASCII: the bytes a JSON
// string cannot carry as they are. May say yes for a plain byte next to such a byte (the
// caller then looks byte by byte), never no for one of them.
bool NeedsAttention(uint64_t w) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  const uint64_t control = (w - kOnes * 0x20) & ~w & kHigh;
  return ((w & kHigh) | control | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\'))) != 0;
}

bool NeedsEscape(unsigned char c) {
  return c < 0x20 || c == '"' || c == '\\';
}

// Writes the JSON escape of `c` (at most six bytes) at `p`; returns the end.
char* WriteEscape(char* p, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  char short_form = 0;
  switch (c) {
    case '"':
      short_form = '"';
      break;
    case '\\':
      short_form = '\\';
      break;
    case '\n':
      short_form = 'n';
      break;
    case '\r':
      short_form = 'r';
      break;
    case '\t':
      short_form = 't';
      break;
    default:
      break;
  }
  *p++ = '\\';
  if (short_form != 0) {
    *p++ = short_form;
    return p;
  }
  *p++ = 'u';
  *p++ = '0';
  *p++ = '0';
  *p++ = kHex[c >> 4];
  *p++ = kHex[c & 15];
  return p;
}

}  // namespace

// One pass over the text (the SSE hot path): runs that need nothing are found 8 bytes at a time
// and copied whole; multi-byte sequences are checked as they come. Invalid UTF-8 (rare) starts
// again from a sanitized copy.
void AppendJsonString(std::string& out, std::string_view text) {
  const size_t start = out.size();
  const size_t n = text.size();
  out.reserve(start + n + 2);
  out += '"';
  size_t run = 0;  // start of the bytes not yet copied
  size_t i = 0;
  while (i < n) {
    uint64_t w;
    while (i + 8 <= n && (__builtin_memcpy(&w, text.data() + i, 8), !NeedsAttention(w))) i += 8;
    if (i >= n) break;
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t len = Utf8SequenceAt(text, i);
      if (len == 0) {
        out.resize(start);
        std::string clean;
        AppendSanitizedUtf8(clean, text);
        AppendJsonString(out, clean);
        return;
      }
      i += len;
    } else if (!NeedsEscape(c)) {
      ++i;
    } else {
      // Escapes come in runs in binary output (NULs): write a whole run in place.
      out.append(text.data() + run, i - run);
      size_t end = i + 1;
      while (end < n && NeedsEscape(static_cast<unsigned char>(text[end]))) ++end;
      while (i < end) {
        char buf[6 * 64];
        char* p = buf;
        for (const size_t stop = std::min(end, i + 64); i < stop; ++i) {
          p = WriteEscape(p, static_cast<unsigned char>(text[i]));
        }
        out.append(buf, static_cast<size_t>(p - buf));
      }
      run = i;
    }
  }
  out.append(text.data() + run, n - run);
  out += '"';
}

void AppendEvent(std::string& out, uint64_t id, std::string_view event, std::string_view data) {
  if (id != 0) {
    out += "id: ";
    AppendNumber(out, static_cast<int64_t>(id));
    out += '\n';
  }
  out += "event: ";
  out += event;
  out += "\ndata: ";
  out += data;
  out += "\n\n";
}

void AppendComment(std::string& out, std::string_view text) {
  out += ": ";
  out += text;
  out += "\n\n";
}

void AppendEntry(std::string& out, Format format, Encoding encoding, const Process& process,
                 const LogEntry& entry) {
  const bool cf = format == Format::kCloudflare;
  out += "id: ";
  AppendNumber(out, static_cast<int64_t>(entry.seq));
  out += "\nevent: ";
  switch (entry.kind) {
    case EntryKind::kStart: {
      out += "start\ndata: {";
      if (cf) {
        out += "\"type\":\"start\",";
        AppendTimestamp(out, entry.time);
        out += ",\"processId\":";
        AppendJsonString(out, process.id());
        out += ",\"sandboxId\":";
        AppendJsonString(out, process.spec().sandbox_id);
        out += ",\"pid\":";
        AppendNumber(out, process.pid());
        out += ",\"command\":";
        std::string command = process.spec().cmd;
        if (command.empty()) {
          for (const auto& a : process.spec().argv) command += (command.empty() ? "" : " ") + a;
        }
        AppendJsonString(out, command);
      } else {
        out += "\"process_id\":";
        AppendJsonString(out, process.id());
        out += ",\"sandbox_id\":";
        AppendJsonString(out, process.spec().sandbox_id);
        out += ",\"pid\":";
        AppendNumber(out, process.pid());
      }
      out += "}\n\n";
      return;
    }
    case EntryKind::kStdout:
    case EntryKind::kStderr: {
      out += entry.kind == EntryKind::kStdout ? "stdout" : "stderr";
      out += "\ndata: {";
      if (cf) {
        out += entry.kind == EntryKind::kStdout ? "\"type\":\"stdout\"," : "\"type\":\"stderr\",";
        AppendTimestamp(out, entry.time);
        out += ",\"data\":";
      } else {
        out += "\"chunk\":";
      }
      if (encoding == Encoding::kBase64) {
        out += '"';
        AppendBase64(out, entry.data);
        out += '"';
      } else {
        AppendJsonString(out, entry.data);
      }
      out += "}\n\n";
      return;
    }
    case EntryKind::kExit: {
      out += cf ? "complete\ndata: {\"type\":\"complete\"," : "exit\ndata: {";
      if (cf) {
        AppendTimestamp(out, entry.time);
        out += ',';
      }
      if (process.exit()) AppendExitFields(out, format, *process.exit());
      out += "}\n\n";
      return;
    }
  }
}

void AppendGap(std::string& out, Format format, const Gap& gap) {
  const bool cf = format == Format::kCloudflare;
  std::string data = "{";
  if (cf) {
    data += "\"type\":\"gap\",";
    AppendTimestamp(data, SystemNow());
    data += ',';
  }
  data += cf ? "\"fromSeq\":" : "\"from_seq\":";
  AppendNumber(data, static_cast<int64_t>(gap.from_seq));
  data += cf ? ",\"toSeq\":" : ",\"to_seq\":";
  AppendNumber(data, static_cast<int64_t>(gap.to_seq));
  data += ",\"bytes\":";
  if (gap.bytes) {
    AppendNumber(data, static_cast<int64_t>(*gap.bytes));
  } else {
    data += "null";
  }
  data += '}';
  // The gap's id is its last missed seq, so a reconnect after it resumes after the hole.
  AppendEvent(out, gap.to_seq, "gap", data);
}

void AppendError(std::string& out, Format format, ErrorCode code, std::string_view message) {
  std::string data = "{";
  if (format == Format::kCloudflare) {
    data += "\"type\":\"error\",";
    AppendTimestamp(data, SystemNow());
    data += ",\"error\":";
    AppendJsonString(data, message);
    data += ",\"code\":\"";
    data += ErrorCodeName(code);
    data += "\"}";
  } else {
    data += "\"code\":\"";
    data += ErrorCodeName(code);
    data += "\",\"message\":";
    AppendJsonString(data, message);
    data += '}';
  }
  AppendEvent(out, 0, "error", data);
}

}  // namespace sandstream::sse
