#include "base/error.h"

#include <cstring>
#include <string>

namespace sandstream {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidJson:
      return "invalid_json";
    case ErrorCode::kInvalidRequest:
      return "invalid_request";
    case ErrorCode::kUnauthorized:
      return "unauthorized";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kMethodNotAllowed:
      return "method_not_allowed";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kConflict:
      return "conflict";
    case ErrorCode::kPayloadTooLarge:
      return "payload_too_large";
    case ErrorCode::kRequestHeaderTooLarge:
      return "request_header_too_large";
    case ErrorCode::kUnsupportedMediaType:
      return "unsupported_media_type";
    case ErrorCode::kQuotaExceeded:
      return "quota_exceeded";
    case ErrorCode::kSandboxSetupFailed:
      return "sandbox_setup_failed";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kShuttingDown:
      return "shutting_down";
    case ErrorCode::kTooManyConnections:
      return "too_many_connections";
    case ErrorCode::kBadGateway:
      return "bad_gateway";
    case ErrorCode::kForbidden:
      return "forbidden";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kNodeUnreachable:
      return "node_unreachable";
    case ErrorCode::kNotImplemented:
      return "not_implemented";
    case ErrorCode::kPaused:
      return "paused";
  }
  return "internal";
}

std::string ErrnoName(int err) {
  // strerrorname_np is glibc >= 2.32; Debian 12 has 2.36.
  if (const char* name = strerrordesc_np(err) ? strerrorname_np(err) : nullptr) return name;
  return std::to_string(err);
}

Error SysError(ErrorCode code, std::string_view step, int err) {
  std::string message(step);
  message += ": ";
  message += ErrnoName(err);
  message += " (";
  message += std::strerror(err);
  message += ")";
  return Error{code, std::move(message), err};
}

}  // namespace sandstream
