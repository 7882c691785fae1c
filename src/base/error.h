// The vocabulary of expected failures: an error code plus a message naming the step and object.
// No I/O here; the API layer maps codes to HTTP statuses in one table.
#pragma once

#include <string>
#include <string_view>

namespace sandstream {

enum class ErrorCode {
  kInvalidJson,
  kInvalidRequest,
  kUnauthorized,
  kNotFound,
  kMethodNotAllowed,
  kTimeout,
  kConflict,
  kPayloadTooLarge,
  kRequestHeaderTooLarge,
  kUnsupportedMediaType,
  kQuotaExceeded,
  kSandboxSetupFailed,
  kInternal,
  kShuttingDown,
  kTooManyConnections,
  kBadGateway,
  kForbidden,
  kUnavailable,      // nowhere to run it now: a node full, or no node to place on
  kNodeUnreachable,  // a gateway cannot reach the node that holds the sandbox
  kNotImplemented,   // a route a gateway does not serve; a pause mode this host cannot do
  kPaused,           // a paused sandbox made with auto_resume false: resume it first
};

// The wire name of a code (`invalid_request`), as in spec/errors.md.
std::string_view ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int sys_errno = 0;  // SysError's: the errno it came from, for adapters that map it themselves
};

// "step: object: ENAME (text)" from an errno, for failures at a syscall.
Error SysError(ErrorCode code, std::string_view step, int err);
// The symbolic name of an errno value ("EPERM"), or its number.
std::string ErrnoName(int err);

}  // namespace sandstream
