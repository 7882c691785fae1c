#include "api/sse.h"

#include <charconv>
#include <cstdint>

#include "base/base64.h"
#include "base/json_string.h"
#include "platform/signals.h"

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

// What Cloudflare's container says as a process's log ends: "Process completed with exit
// code 0" (or failed, killed).
std::string ExitSentence(const ExitRecord& exit) {
  const std::string_view how = exit.reason == ExitReason::kKilled ? "killed"
                               : exit.exit_code == 0              ? "completed"
                                                                  : "failed";
  return "Process " + std::string(how) + " with exit code " + std::to_string(exit.exit_code);
}

}  // namespace

void AppendEntry(std::string& out, Format format, Kind kind, Encoding encoding,
                 const Process& process, const LogEntry& entry) {
  const bool cf = format == Format::kCloudflare;
  // Cloudflare's LogEvent readers expect every event of a log stream to name its process, and
  // every event to carry a string `data` (user code calls `log.data.trim()` on each).
  const auto cf_head = [&](std::string_view type) {
    out += "{\"type\":\"";
    out += type;
    out += "\",";
    AppendTimestamp(out, entry.time);
    if (kind == Kind::kLog) {
      out += ",\"processId\":";
      AppendJsonString(out, process.id());
    }
  };
  out += "id: ";
  AppendNumber(out, static_cast<int64_t>(entry.seq));
  out += "\nevent: ";
  switch (entry.kind) {
    case EntryKind::kStart: {
      out += "start\ndata: ";
      if (cf) {
        cf_head("start");
        out += ",\"data\":\"\"";
        if (kind == Kind::kExec) {
          out += ",\"processId\":";
          AppendJsonString(out, process.id());
        }
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
        out += "{\"process_id\":";
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
      const std::string_view name = entry.kind == EntryKind::kStdout ? "stdout" : "stderr";
      out += name;
      out += "\ndata: ";
      if (cf) {
        cf_head(name);
        out += ",\"data\":";
      } else {
        out += "{\"chunk\":";
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
      if (!cf) {
        out += "exit\ndata: {";
      } else if (kind == Kind::kExec) {
        out += "complete\ndata: ";
        cf_head("complete");
        out += ',';
      } else {
        out += "exit\ndata: ";
        cf_head("exit");
        out += ",\"data\":";
        AppendJsonString(out, process.exit() ? ExitSentence(*process.exit()) : "");
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
    data += ",\"data\":\"\",";
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
    data += ",\"data\":";
    AppendJsonString(data, message);
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
