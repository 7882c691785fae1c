// Typed errors: one class per code of spec/errors.md, plus the client-side failures
// (transport, a stream that ended without its exit). Never carries a guessed exit code.

/** Base class of every error this SDK throws. */
export class SandstreamError extends Error {
  override name = "SandstreamError";
}

/** An error response of the daemon: `{"error": {"code", "message"}}` with its HTTP status. */
export class ApiError extends SandstreamError {
  override name = "ApiError";
  constructor(
    message: string,
    readonly code: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export class InvalidJsonError extends ApiError {
  override name = "InvalidJsonError";
}
export class InvalidRequestError extends ApiError {
  override name = "InvalidRequestError";
}
/** No key, or a wrong, revoked or expired key or token. */
export class UnauthorizedError extends ApiError {
  override name = "UnauthorizedError";
}
/** A tenant's key on an admin route, or a scoped token on a route it has no scope for. */
export class ForbiddenError extends ApiError {
  override name = "ForbiddenError";
}
export class NotFoundError extends ApiError {
  override name = "NotFoundError";
}
export class MethodNotAllowedError extends ApiError {
  override name = "MethodNotAllowedError";
}
/** `408 timeout` from the daemon, or a local wait (waitForLog, waitForExit) that ran out. */
export class TimeoutError extends ApiError {
  override name = "TimeoutError";
}
export class ConflictError extends ApiError {
  override name = "ConflictError";
}
export class PayloadTooLargeError extends ApiError {
  override name = "PayloadTooLargeError";
}
export class UnsupportedMediaTypeError extends ApiError {
  override name = "UnsupportedMediaTypeError";
}
/**
 * Too many processes or queued cells for the daemon's maximum, a tenant past one of its quotas,
 * or a process start refused by the sandbox's `pids` limit. A daemon at its maximum of sandboxes
 * answers UnavailableError instead.
 */
export class QuotaExceededError extends ApiError {
  override name = "QuotaExceededError";
}
export class SandboxSetupFailedError extends ApiError {
  override name = "SandboxSetupFailedError";
}
export class InternalError extends ApiError {
  override name = "InternalError";
}
export class ShuttingDownError extends ApiError {
  override name = "ShuttingDownError";
}
/** The request's header is over the server's limit. */
export class RequestHeaderTooLargeError extends ApiError {
  override name = "RequestHeaderTooLargeError";
}
/** The server has as many connections open as it takes; retry later. */
export class TooManyConnectionsError extends ApiError {
  override name = "TooManyConnectionsError";
}
/** An exposed port of a sandbox: nothing accepts connections on it, or the connection failed. */
export class BadGatewayError extends ApiError {
  override name = "BadGatewayError";
}
/**
 * Nowhere to run it now: the daemon is at its maximum of sandboxes, or a gateway has no node
 * with room or cannot read the cluster's membership.
 */
export class UnavailableError extends ApiError {
  override name = "UnavailableError";
}
/** Through a gateway: the node that holds the sandbox cannot be reached; the message names both. */
export class NodeUnreachableError extends ApiError {
  override name = "NodeUnreachableError";
}
/**
 * Through a gateway: a route it does not serve, one that changes what each node holds on its own
 * (templates, tenants).
 */
export class NotImplementedError extends ApiError {
  override name = "NotImplementedError";
}

/** The sandbox is paused and was created with `autoResume: false`: resume it first. */
export class SandboxPausedError extends ApiError {
  override name = "SandboxPausedError";
}

type ApiErrorClass = new (message: string, code: string, status: number) => ApiError;

/** spec/errors.md: code -> [class, status]. */
export const ERROR_TABLE: Readonly<Record<string, readonly [ApiErrorClass, number]>> = {
  invalid_json: [InvalidJsonError, 400],
  invalid_request: [InvalidRequestError, 400],
  unauthorized: [UnauthorizedError, 401],
  forbidden: [ForbiddenError, 403],
  not_found: [NotFoundError, 404],
  method_not_allowed: [MethodNotAllowedError, 405],
  timeout: [TimeoutError, 408],
  conflict: [ConflictError, 409],
  payload_too_large: [PayloadTooLargeError, 413],
  unsupported_media_type: [UnsupportedMediaTypeError, 415],
  quota_exceeded: [QuotaExceededError, 429],
  sandbox_setup_failed: [SandboxSetupFailedError, 500],
  internal: [InternalError, 500],
  shutting_down: [ShuttingDownError, 503],
  bad_gateway: [BadGatewayError, 502],
  request_header_too_large: [RequestHeaderTooLargeError, 431],
  too_many_connections: [TooManyConnectionsError, 503],
  unavailable: [UnavailableError, 503],
  node_unreachable: [NodeUnreachableError, 503],
  not_implemented: [NotImplementedError, 501],
  paused: [SandboxPausedError, 409],
};

const STATUS_FALLBACK: Readonly<Record<number, string>> = {
  400: "invalid_request",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  408: "timeout",
  409: "conflict",
  413: "payload_too_large",
  415: "unsupported_media_type",
  429: "quota_exceeded",
  431: "request_header_too_large",
  501: "not_implemented",
  502: "bad_gateway",
  503: "shutting_down",
};

/** Builds the typed error for a code (from a body or an SSE `error` event) and a status. */
export function apiError(code: string | undefined, message: string, status: number): ApiError {
  const resolved = code ?? STATUS_FALLBACK[status] ?? (status >= 500 ? "internal" : "");
  const entry = ERROR_TABLE[resolved];
  if (entry === undefined) return new ApiError(message, resolved || `http_${status}`, status);
  const [cls, tableStatus] = entry;
  return new cls(message, resolved, status || tableStatus);
}

/** The daemon could not be reached, or the connection failed and retries ran out. */
export class ConnectionFailedError extends SandstreamError {
  override name = "ConnectionFailedError";
}

/**
 * A stream of a process's output ended without its `exit` (or `error`) event and could not be
 * resumed. The process may still be running; its exit code is unknown, so none is reported.
 */
export class StreamLostError extends SandstreamError {
  override name = "StreamLostError";
  constructor(
    message: string,
    /** The last event id received; resume from it with `Last-Event-ID`. */
    readonly lastEventId: string | undefined,
    readonly processId: string | undefined,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** A process ended before the awaited condition (waitForLog) held. */
export class ProcessExitedError extends SandstreamError {
  override name = "ProcessExitedError";
  constructor(
    message: string,
    readonly processId: string,
    readonly exitCode: number | null,
  ) {
    super(message);
  }
}
