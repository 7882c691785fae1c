#include "http/status.h"

namespace sandstream::http {
// The table names Beast's statuses as http::status::..., the form spec/check_errors.py reads.
using boost::beast::http::status;

http::status StatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidJson:
      return http::status::bad_request;
    case ErrorCode::kInvalidRequest:
      return http::status::bad_request;
    case ErrorCode::kUnauthorized:
      return http::status::unauthorized;
    case ErrorCode::kNotFound:
      return http::status::not_found;
    case ErrorCode::kMethodNotAllowed:
      return http::status::method_not_allowed;
    case ErrorCode::kTimeout:
      return http::status::request_timeout;
    case ErrorCode::kConflict:
      return http::status::conflict;
    case ErrorCode::kPayloadTooLarge:
      return http::status::payload_too_large;
    case ErrorCode::kRequestHeaderTooLarge:
      return http::status::request_header_fields_too_large;
    case ErrorCode::kUnsupportedMediaType:
      return http::status::unsupported_media_type;
    case ErrorCode::kQuotaExceeded:
      return http::status::too_many_requests;
    case ErrorCode::kSandboxSetupFailed:
      return http::status::internal_server_error;
    case ErrorCode::kInternal:
      return http::status::internal_server_error;
    case ErrorCode::kShuttingDown:
      return http::status::service_unavailable;
    case ErrorCode::kTooManyConnections:
      return http::status::service_unavailable;
    case ErrorCode::kBadGateway:
      return http::status::bad_gateway;
    case ErrorCode::kForbidden:
      return http::status::forbidden;
    case ErrorCode::kUnavailable:
      return http::status::service_unavailable;
    case ErrorCode::kNodeUnreachable:
      return http::status::service_unavailable;
    case ErrorCode::kNotImplemented:
      return http::status::not_implemented;
    case ErrorCode::kPaused:
      return http::status::conflict;
  }
  return http::status::internal_server_error;
}

}  // namespace sandstream::http
