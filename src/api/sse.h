// The two event encodings of spec/events.md, in SSE framing (http/sse.h). Pure: appends bytes
// to a string. This is on the hot path of every stream, so it encodes in place, without a DOM
// (strings escaped by base/json_string.h).
#pragma once

#include <string>
#include <string_view>

#include "base/error.h"
#include "http/sse.h"
#include "process/output_log.h"
#include "process/process.h"

namespace sandstream::sse {

enum class Format { kPandastack, kCloudflare };
enum class Encoding { kUtf8, kBase64 };
// Which stream an entry is sent on. In format=cloudflare a command's own stream (exec/stream)
// ends in `complete`, a process's log stream in `exit`: what the Cloudflare package's
// ExecEvent and LogEvent readers each wait for.
enum class Kind { kExec, kLog };

// One output-log entry of `process` as an event in `format`.
void AppendEntry(std::string& out, Format format, Kind kind, Encoding encoding,
                 const Process& process, const LogEntry& entry);
void AppendGap(std::string& out, Format format, const Gap& gap);
void AppendError(std::string& out, Format format, ErrorCode code, std::string_view message);

}  // namespace sandstream::sse
