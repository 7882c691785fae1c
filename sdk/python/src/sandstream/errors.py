"""Exceptions raised by the SDK; the server's error codes mirror spec/errors.md one to one."""

from __future__ import annotations

import json
from typing import Any


class SandstreamError(Exception):
    """Base class of every error this package raises."""


class SandboxError(SandstreamError):
    """The server answered with an error (`{"error": {"code", "message"}}`).

    Every server error code has a subclass below; an unknown code raises this class itself.
    """

    code: str = "unknown"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status

    def __str__(self) -> str:
        prefix = f"{self.status} {self.code}" if self.status is not None else self.code
        return f"{prefix}: {self.message}"


class InvalidJson(SandboxError):
    """The request body was not JSON, or not an object (400)."""

    code = "invalid_json"


class InvalidRequest(SandboxError):
    """A field was missing, of the wrong type or out of range (400); the message names it."""

    code = "invalid_request"


class Unauthorized(SandboxError):
    """No key, or a wrong, revoked or expired key or token (401)."""

    code = "unauthorized"


class Forbidden(SandboxError):
    """A tenant's key on an admin route, or a scoped token on a route it has no scope for (403)."""

    code = "forbidden"


class NotFound(SandboxError):
    """Unknown sandbox, process or route (404)."""

    code = "not_found"


class MethodNotAllowed(SandboxError):
    """The route exists, the method does not (405)."""

    code = "method_not_allowed"


class Timeout(SandboxError):
    """A `wait` whose timeout passed before the process exited (408)."""

    code = "timeout"


class Conflict(SandboxError):
    """An id in use, an idempotency key reused for another command, stdin of an ended process (409)."""

    code = "conflict"


class PayloadTooLarge(SandboxError):
    """A request body over the server's limit (413)."""

    code = "payload_too_large"


class UnsupportedMediaType(SandboxError):
    """A body that is neither JSON nor, where allowed, octet-stream (415)."""

    code = "unsupported_media_type"


class QuotaExceeded(SandboxError):
    """Too many processes or queued cells for the server's configured maximum, a tenant past one
    of its quotas, named with its value in the message, or a process start refused by the
    sandbox's `pids` limit (429). A server at its maximum of sandboxes raises `Unavailable`."""

    code = "quota_exceeded"


class SandboxSetupFailed(SandboxError):
    """A sandbox or process could not be set up (500); the message names the step and errno."""

    code = "sandbox_setup_failed"


class InternalError(SandboxError):
    """A bug in the server (500); it is logged there with the request id."""

    code = "internal"


class ShuttingDown(SandboxError):
    """The server is stopping (503)."""

    code = "shutting_down"


class RequestHeaderTooLarge(SandboxError):
    """The request's header is over the server's limit (431)."""

    code = "request_header_too_large"


class TooManyConnections(SandboxError):
    """The server has as many connections open as it takes (503); retry later."""

    code = "too_many_connections"


class BadGateway(SandboxError):
    """An exposed port of a sandbox: nothing accepts connections on it, or the connection to it
    failed (502)."""

    code = "bad_gateway"


class Unavailable(SandboxError):
    """Nowhere to run it now (503): the server is at its maximum of sandboxes, or a gateway has
    no node with room or cannot read the cluster's membership."""

    code = "unavailable"


class NodeUnreachable(SandboxError):
    """Through a gateway: the node that holds the sandbox cannot be reached (503); the message
    names the node, the sandbox and why."""

    code = "node_unreachable"


class RouteNotImplemented(SandboxError):
    """Through a gateway: a route it does not serve, one that changes what each node holds on
    its own, such as templates or tenants (501)."""

    code = "not_implemented"


class SandboxPaused(SandboxError):
    """The sandbox is paused and was created with ``auto_resume=False`` (409): resume it first."""

    code = "paused"


ERROR_TYPES: dict[str, type[SandboxError]] = {
    cls.code: cls
    for cls in (
        InvalidJson,
        InvalidRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Timeout,
        Conflict,
        PayloadTooLarge,
        UnsupportedMediaType,
        QuotaExceeded,
        SandboxSetupFailed,
        InternalError,
        ShuttingDown,
        BadGateway,
        RequestHeaderTooLarge,
        TooManyConnections,
        Unavailable,
        NodeUnreachable,
        RouteNotImplemented,
        SandboxPaused,
    )
}


def error_from_code(code: str, message: str, status: int | None = None) -> SandboxError:
    """Builds the typed exception for a server error code."""
    cls = ERROR_TYPES.get(code, SandboxError)
    return cls(message, code=code, status=status)


def error_from_response(status: int, body: bytes) -> SandboxError:
    """Builds the typed exception for an error response, tolerating bodies not in the spec shape."""
    try:
        parsed: Any = json.loads(body)
        err = parsed["error"]
        return error_from_code(str(err["code"]), str(err["message"]), status)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip() or "(empty body)"
        return SandboxError(f"HTTP {status}: {text[:500]}", status=status)


class ConnectionFailed(SandstreamError):
    """The server could not be reached, or the connection broke during a request."""


class CommandFailed(SandstreamError):
    """A command run with `check=True` ended with a non-zero exit code.

    Attributes carry the exit record and the last lines of its output.
    """

    def __init__(
        self,
        *,
        exit_code: int,
        reason: str,
        signal: str | None,
        output_tail: str,
        process_id: str | None,
    ) -> None:
        self.exit_code = exit_code
        self.reason = reason
        self.signal = signal
        self.output_tail = output_tail
        self.process_id = process_id
        how = f"exit code {exit_code}, reason {reason}"
        if signal:
            how += f", signal {signal}"
        message = f"command failed ({how})"
        if output_tail:
            message += "; last output:\n" + output_tail
        super().__init__(message)


class StreamLost(SandstreamError):
    """A process's output stream broke and could not be resumed, or ended without an exit.

    The process itself may still be running on the server: reattach with
    `sandbox.processes.get(process_id).logs(follow=True, since=last_event_id, flow="wait")`
    (a waiting reader's place is kept for a while, so that gets every byte). `hint`, when
    given, replaces that advice in the message.
    """

    def __init__(
        self,
        detail: str,
        *,
        sandbox_id: str,
        process_id: str | None,
        last_event_id: int,
        attempts: int,
        idempotency_key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.process_id = process_id
        self.last_event_id = last_event_id
        self.attempts = attempts
        self.idempotency_key = idempotency_key
        if hint is not None:
            how = hint
        elif process_id is not None:
            how = (
                f"process {process_id} in sandbox {sandbox_id} may still be running; reattach with "
                f"sandbox.processes.get({process_id!r}).logs(follow=True, since={last_event_id}, "
                f"flow='wait')"
            )
        elif idempotency_key is not None:
            how = (
                f"the command may still be running in sandbox {sandbox_id}; retrying with "
                f"Idempotency-Key {idempotency_key} attaches to it without running it again"
            )
        else:
            how = f"the process may still be running in sandbox {sandbox_id}"
        super().__init__(f"{detail} (after {attempts} attempt(s)); {how}")
