// How a child reports which setup step failed: after fork/clone it allocates nothing and
// writes one fixed-size record to a close-on-exec pipe before _exit(). EOF means exec worked.
// The child side (child_report.cc) is also compiled into the sandbox's PID 1 (init_main.cc);
// the parent side is child_report_read.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/result.h"
#include "sandbox/op.h"

namespace sandstream::sandbox {

// Steps are string literals, so the child can pass a pointer's worth of text without allocating.
struct ChildFailure {
  char step[96];
  int32_t err;
};

// In the child: write {step, err} to `fd` and _exit(127). Async-signal-safe.
[[noreturn]] void ReportAndExit(int fd, const char* step, int err);
// How long a child may take to exec or report. A child is slow only when its sandbox starves
// it of CPU; past this it is a setup failure (the daemon awaits it without blocking).
constexpr int kChildReportDeadlineMs = 5000;

// In the parent: read the report pipe until EOF. Ok if the child exec'd; else the failure,
// as "<context>: <step>: ENAME (text)" (no prefix when `context` is empty). `fd` is made
// non-blocking.
Op<Result<void>> AwaitExec(int fd, ErrorCode code, std::string context = "spawn");
// The raw record: nullopt at a clean EOF (the child exec'd); an error after the deadline.
Op<Result<std::optional<ChildFailure>>> ReadChildReport(int fd);

}  // namespace sandstream::sandbox
