#include "api/cloudflare/errors.h"

#include "base/clock.h"
#include "http/status.h"

namespace sandstream::api::cloudflare {
namespace json = boost::json;

namespace {

// Cloudflare's ErrorCode for sandstream's `code` on `subject` (the package's errors/codes).
std::string_view CodeFor(ErrorCode code, Subject subject) {
  switch (code) {
    case ErrorCode::kInvalidJson:
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kUnsupportedMediaType:
      return "VALIDATION_FAILED";
    case ErrorCode::kNotFound:
      switch (subject) {
        case Subject::kFile:
          return "FILE_NOT_FOUND";
        case Subject::kProcess:
          return "PROCESS_NOT_FOUND";
        case Subject::kContext:
          return "CONTEXT_NOT_FOUND";
        case Subject::kSession:
        case Subject::kAny:
          return "UNKNOWN_ERROR";
      }
      break;
    case ErrorCode::kConflict:
      switch (subject) {
        case Subject::kFile:
          return "FILE_EXISTS";
        case Subject::kProcess:
          return "PROCESS_ERROR";
        case Subject::kSession:
          return "SESSION_ALREADY_EXISTS";
        case Subject::kContext:
          return "CODE_EXECUTION_ERROR";
        case Subject::kAny:
          return "UNKNOWN_ERROR";
      }
      break;
    case ErrorCode::kPayloadTooLarge:
      return subject == Subject::kFile ? "FILE_TOO_LARGE" : "UNKNOWN_ERROR";
    case ErrorCode::kSandboxSetupFailed:
    case ErrorCode::kInternal:
    case ErrorCode::kShuttingDown:
    case ErrorCode::kTooManyConnections:
    case ErrorCode::kBadGateway:
    case ErrorCode::kUnavailable:
    case ErrorCode::kNodeUnreachable:
    case ErrorCode::kNotImplemented:
    case ErrorCode::kPaused:
      return "INTERNAL_ERROR";
    case ErrorCode::kUnauthorized:
    case ErrorCode::kForbidden:
    case ErrorCode::kMethodNotAllowed:
    case ErrorCode::kTimeout:
    case ErrorCode::kRequestHeaderTooLarge:
    case ErrorCode::kQuotaExceeded:
      return "UNKNOWN_ERROR";
  }
  return "UNKNOWN_ERROR";
}

std::string_view ContextKey(Subject subject) {
  switch (subject) {
    case Subject::kFile:
      return "path";
    case Subject::kProcess:
      return "processId";
    case Subject::kSession:
      return "sessionId";
    case Subject::kContext:
      return "contextId";
    case Subject::kAny:
      return {};
  }
  return {};
}

}  // namespace

json::object ErrorJson(const Error& error, Subject subject, std::string_view about) {
  json::object context;
  if (!about.empty() && !ContextKey(subject).empty()) context[ContextKey(subject)] = about;
  json::object body;
  body["code"] = CodeFor(error.code, subject);
  body["message"] = error.message;
  body["context"] = std::move(context);
  body["httpStatus"] = static_cast<int>(sandstream::http::StatusFor(error.code));
  body["timestamp"] = FormatRfc3339(SystemNow());
  // sandstream's own code, for a client that wants the finer distinction.
  body["sandstreamCode"] = ErrorCodeName(error.code);
  return body;
}

boost::asio::awaitable<void> Fail(Context& ctx, const Error& error, Subject subject,
                                  std::string_view about) {
  const http::status status = sandstream::http::StatusFor(error.code);
  LogFailure(ctx, error, status);
  return ReplyJson(ctx, status, ErrorJson(error, subject, about));
}

}  // namespace sandstream::api::cloudflare
