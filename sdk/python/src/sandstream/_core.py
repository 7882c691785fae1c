"""What the sync and async clients share: configuration, request bodies, response parsing,
the resume bookkeeping of a followed stream, and the callback dispatch of `exec_stream`.

No I/O here; `_async/` (and `_sync/`, generated from it) drive it with httpx's async and sync
clients. A plain request is described once as a `Call` (method, path, body, how to parse the
answer) and sent by either client's `call()`.
"""

from __future__ import annotations

import base64
import os
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

import httpx

from .errors import CommandFailed, ConnectionFailed, StreamLost, error_from_code
from .events import Error, Event, EventDecoder, Exit, SseMessage, Start, Stderr, Stdout
from .helpers import OutputDigest
from .models import (
    Egress,
    ExecResult,
    Flow,
    Limits,
    Network,
    ProcessInfo,
    SandboxInfo,
    SandboxMetrics,
    VolumeMount,
)
from ._version import __version__

DEFAULT_URL = "http://127.0.0.1:8080"

# A chunk callback; any return value is ignored (so `lambda c: (buf.append(c), print(c))` fits).
ChunkCallback = Callable[[str], object]

T = TypeVar("T")
E = TypeVar("E")

# How long a followed stream may stay silent before it counts as dropped. The server sends a
# keepalive comment every 15 s by default, so a minute of silence means a dead connection.
STREAM_READ_TIMEOUT = 60.0

# Long waits are made of server-side waits of this many seconds, so a dead connection is noticed.
WAIT_SLICE = 30.0


@dataclass(frozen=True)
class ClientConfig:
    """Where the server is and how to talk to it."""

    base_url: str
    api_key: str | None
    request_timeout: float = 30.0
    stream_read_timeout: float = STREAM_READ_TIMEOUT
    # Consecutive reconnect attempts without receiving an event, before `StreamLost`.
    max_reconnects: int = 5

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        api_key: str | None = None,
        **kwargs: Any,
    ) -> ClientConfig:
        """Fills in the server from `SANDSTREAM_URL` and the key from `SANDSTREAM_API_KEY`."""
        url = base_url or os.environ.get("SANDSTREAM_URL") or DEFAULT_URL
        key = api_key if api_key is not None else os.environ.get("SANDSTREAM_API_KEY")
        return cls(url.rstrip("/"), key or None, **kwargs)

    def headers(self) -> dict[str, str]:
        """Headers sent with every request."""
        headers = {"User-Agent": f"sandstream-python/{__version__}"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def timeout(self) -> httpx.Timeout:
        """The default timeout of plain requests."""
        return httpx.Timeout(self.request_timeout)

    def stream_timeout(self) -> httpx.Timeout:
        """The timeout of a followed stream: reads may wait for keepalives."""
        return httpx.Timeout(self.request_timeout, read=self.stream_read_timeout)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before reconnect attempt `attempt` (1-based)."""
        return float(min(0.1 * 2 ** (attempt - 1), 2.0))


def connection_failed(
    method: str, url: str, exc: Exception, idempotency_key: str | None
) -> ConnectionFailed:
    """The error for a request whose connection failed; with a key it says how to attach."""
    message = f"{method} {url} failed: {type(exc).__name__}: {exc}"
    if idempotency_key is not None:
        message += (
            f"; what it started may still be running - a retry with Idempotency-Key "
            f"{idempotency_key} attaches to it without running it again"
        )
    return ConnectionFailed(message)


def deprecated(old: str, new: str) -> None:
    """Warns that `old` is deprecated in favour of `new`, its name in both SDKs
    (spec/sdk-verbs.md); the warning points at the caller of `old`."""
    warnings.warn(f"{old} is deprecated and goes in sandstream 0.3; use {new}",
                  DeprecationWarning, stacklevel=3)


def ignore_body(_: Any) -> None:
    """The parser of a response whose body means nothing (`204`)."""
    return None


@dataclass(frozen=True)
class Call(Generic[T]):
    """One plain request and how to read its JSON answer; the clients only send it."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, str] | None = None
    # Set for a request that starts something: a retry after a broken connection attaches to it.
    idempotency_key: str | None = None


def sandbox_path(sandbox_id: str) -> str:
    """`/v1/sandboxes/{id}`."""
    return f"/v1/sandboxes/{quote(sandbox_id, safe='')}"


def create_sandbox_call(body: Mapping[str, Any]) -> Call[SandboxInfo]:
    """`POST /v1/sandboxes` with a `sandbox_body`."""
    return Call("POST", "/v1/sandboxes", SandboxInfo.from_json, json=body)


def get_sandbox_call(sandbox_id: str) -> Call[SandboxInfo]:
    """`GET /v1/sandboxes/{id}`."""
    return Call("GET", sandbox_path(sandbox_id), SandboxInfo.from_json)


def pause_sandbox_call(sandbox_id: str, mode: str) -> Call[SandboxInfo]:
    """`POST /v1/sandboxes/{id}/pause`: the sandbox as it is once paused (or was already)."""
    return Call("POST", sandbox_path(sandbox_id) + "/pause", SandboxInfo.from_json,
                json={"mode": mode})


def resume_sandbox_call(sandbox_id: str) -> Call[SandboxInfo]:
    """`POST /v1/sandboxes/{id}/resume`: the sandbox running again (or as it was, running)."""
    return Call("POST", sandbox_path(sandbox_id) + "/resume", SandboxInfo.from_json)


def update_sandbox_call(sandbox_id: str, body: Mapping[str, Any]) -> Call[SandboxInfo]:
    """`PATCH /v1/sandboxes/{id}`: auto_pause, on_timeout, auto_resume."""
    return Call("PATCH", sandbox_path(sandbox_id), SandboxInfo.from_json, json=dict(body))


def network_body(network: Network | Egress | Mapping[str, Any]) -> Any:
    """`network` on the wire: an `Egress` as its rules (`{"egress": {"allow", "deny"}}`), a
    mapping as given, a mode as it is; the server checks what it gets."""
    if isinstance(network, Egress):
        return network.to_json()
    if isinstance(network, Mapping):
        return dict(network)
    return network


def update_network_call(sandbox_id: str,
                        network: Network | Egress | Mapping[str, Any]) -> Call[SandboxInfo]:
    """`PATCH /v1/sandboxes/{id}/network`: the sandbox with its new egress rules."""
    return Call("PATCH", sandbox_path(sandbox_id) + "/network", SandboxInfo.from_json,
                json=network_body(network))


def time_param(name: str, value: datetime | float) -> str:
    """A time for the query (`start`, `end`): whole Unix seconds as they are, anything finer
    (a datetime, a fractional float) as RFC 3339 in UTC with milliseconds, the form the server
    reads. A naive datetime is local time, as `datetime.timestamp()` takes it."""
    if isinstance(value, datetime):
        at = value.astimezone(timezone.utc)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if float(value).is_integer():
            return str(int(value))
        at = datetime.fromtimestamp(value, timezone.utc)
    else:
        raise TypeError(f"{name} must be a datetime or Unix seconds, not {type(value).__name__}")
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def metrics_call(sandbox_id: str, start: datetime | float | None,
                 end: datetime | float | None) -> Call[SandboxMetrics]:
    """`GET /v1/sandboxes/{id}/metrics`: the samples taken in [start, end] (either side open
    when None), oldest first."""
    params = {name: time_param(name, value)
              for name, value in (("start", start), ("end", end)) if value is not None}
    return Call("GET", sandbox_path(sandbox_id) + "/metrics", SandboxMetrics.from_json,
                params=params or None)


def auto_pause_body(idle_seconds: int | None, mode: str | None = None) -> dict[str, Any] | None:
    """`auto_pause` on the wire: `{"idle_seconds": N, "mode": M}` (`mode`, "freeze" or
    "checkpoint", only when given: the server's default is "freeze"), or None (off) for 0 or
    None, whatever the mode."""
    if not idle_seconds:
        return None
    body: dict[str, Any] = {"idle_seconds": int(idle_seconds)}
    if mode is not None:
        body["mode"] = mode
    return body


def check_auto_pause(idle_seconds: int | None, mode: str | None) -> None:
    """Raises `ValueError` for an `auto_pause_mode` given without `auto_pause`: the server
    takes the mode with the idle seconds only."""
    if mode is not None and idle_seconds is None:
        raise ValueError("auto_pause_mode needs auto_pause (the idle seconds) beside it")


def list_sandboxes_call() -> Call[list[SandboxInfo]]:
    """`GET /v1/sandboxes`, oldest first."""
    return Call("GET", "/v1/sandboxes",
                lambda data: [SandboxInfo.from_json(s) for s in data.get("sandboxes", [])])


def exec_call(sandbox_path: str, body: Mapping[str, Any]) -> Call[ExecResult]:
    """`POST .../exec` with a `command_body`."""
    return Call("POST", sandbox_path + "/exec", exec_result, json=body,
                idempotency_key=new_idempotency_key())


def exec_timeout(config: ClientConfig, timeout_seconds: float | None) -> httpx.Timeout:
    """A buffered exec answers when the command ends: the read waits out its own timeout."""
    read = None if timeout_seconds is None else timeout_seconds + 30.0
    return httpx.Timeout(config.request_timeout, read=read)


def process_path(sandbox_path: str, process_id: str) -> str:
    """`.../processes/{pid}`."""
    return f"{sandbox_path}/processes/{quote(process_id, safe='')}"


def start_process_call(sandbox_path: str, body: Mapping[str, Any]) -> Call[ProcessInfo]:
    """`POST .../processes` with a `command_body` (plus an optional `id`)."""
    return Call("POST", sandbox_path + "/processes", ProcessInfo.from_json, json=body,
                idempotency_key=new_idempotency_key())


def list_processes_call(sandbox_path: str, status: str | None) -> Call[list[ProcessInfo]]:
    """`GET .../processes`, filtered by `running` or `exited`."""
    return Call("GET", sandbox_path + "/processes",
                lambda data: [ProcessInfo.from_json(p) for p in data.get("processes", [])],
                params={"status": status} if status else None)


def process_call(method: str, path: str, body: Any = None) -> Call[ProcessInfo]:
    """A request on one process that answers with it: get, kill (DELETE), signal."""
    return Call(method, path, ProcessInfo.from_json, json=body)


def signal_body(signal: str | int, group: bool) -> dict[str, Any]:
    """The body of `POST .../processes/{pid}/signal`."""
    body: dict[str, Any] = {"signal": signal}
    if not group:
        body["group"] = False
    return body


def wait_call(path: str, seconds: float) -> Call[ProcessInfo]:
    """`GET .../processes/{pid}/wait`: the server holds it up to `seconds`, then `408`."""
    return Call("GET", path + "/wait", ProcessInfo.from_json,
                params={"timeout_seconds": f"{max(seconds, 0.001):g}"})


def stdin_params(eof: bool) -> dict[str, str] | None:
    """The query of `POST .../processes/{pid}/stdin`."""
    return {"eof": "1"} if eof else None


def logs_params(follow: bool, tail: int | None, last_seq: int, flow: Flow | None) -> dict[str, str]:
    """The query of `GET .../processes/{pid}/logs`; `tail` applies only to a first read, `flow`
    only to a follow (None: the server's default, skip)."""
    params = {"encoding": "base64", "format": "pandastack"}
    if follow:
        params["follow"] = "1"
        if flow is not None:
            params["flow"] = flow
    if tail is not None and last_seq == 0:
        params["tail"] = str(tail)
    return params


def volumes_body(volumes: Sequence[VolumeMount | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`volumes` on the wire: a `VolumeMount` as its request form (its `id` left out), a
    mapping (`{"name", "path", "read_only"}`) as given, for the server to check."""
    # A str or a mapping is iterable too: "data" must not become four mounts named by letters.
    if isinstance(volumes, (str, Mapping)):
        raise TypeError(f"volumes is a list of mounts, not {type(volumes).__name__}: "
                        f"[VolumeMount(name, path)] or [{{'name': ..., 'path': ...}}]")
    return [v.to_json() if isinstance(v, VolumeMount) else dict(v) for v in volumes]


def sandbox_body(
    template: str,
    env: Mapping[str, str] | None,
    timeout: int | None,
    cwd: str | None,
    limits: Limits | Mapping[str, int] | None,
    metadata: Mapping[str, str] | None,
    limit_fields: Mapping[str, int | None],
    network: Network | Egress | Mapping[str, Any] | None = None,
    volumes: Sequence[VolumeMount | Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The body of `POST /v1/sandboxes`; `timeout` is the sandbox's TTL in seconds. `network`
    as a mapping is sent as given (`{"egress": {"allow": [...]}}`), for the server to check;
    so is each of `volumes` given as a mapping."""
    body: dict[str, Any] = {"template": template}
    if env:
        body["env"] = dict(env)
    if timeout is not None:
        body["ttl_seconds"] = int(timeout)
    if cwd is not None:
        body["cwd"] = cwd
    merged: dict[str, int] = {}
    if isinstance(limits, Limits):
        merged.update(limits.to_json())
    elif limits:
        merged.update(limits)
    merged.update({k: int(v) for k, v in limit_fields.items() if v is not None})
    if merged:
        body["limits"] = merged
    if network is not None:
        body["network"] = network_body(network)
    if volumes is not None:
        body["volumes"] = volumes_body(volumes)
    if metadata:
        body["metadata"] = dict(metadata)
    return body


def command_body(
    cmd: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: str | None = None,
    timeout_seconds: float | None = None,
    idle_timeout_seconds: float | None = None,
    merge_stderr: bool = False,
    log_window_bytes: int | None = None,
    session: str | None = None,
    flow: Flow | None = None,
) -> dict[str, Any]:
    """The command request shared by exec, exec/stream and processes (`session`: the shell
    session an exec runs in; `flow`: how the request's own reading paces the command).

    Output is requested as base64: chunks are then the exact bytes the process wrote, and the
    SDK decodes them with one incremental UTF-8 decoder per stream. That keeps a code point
    split across chunks whole no matter how the server cut them, and across a reconnect too,
    because the decoder lives in the client, not in one HTTP response; it also keeps raw bytes
    available (`Stdout.raw`) for binary output.
    """
    body: dict[str, Any] = {"encoding": "base64", "format": "pandastack"}
    if isinstance(cmd, str):
        body["cmd"] = cmd
    else:
        body["argv"] = list(cmd)
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if stdin is not None:
        body["stdin"] = stdin
    if timeout_seconds is not None:
        body["timeout_seconds"] = timeout_seconds
    if idle_timeout_seconds is not None:
        body["idle_timeout_seconds"] = idle_timeout_seconds
    if merge_stderr:
        body["merge_stderr"] = True
    if log_window_bytes is not None:
        body["log_window_bytes"] = log_window_bytes
    if session is not None:
        body["session"] = session
    if flow is not None:
        body["flow"] = flow
    return body


def new_idempotency_key() -> str:
    """A fresh key that makes retries of one request attach instead of re-running."""
    return "sdk-" + uuid.uuid4().hex


def exec_result(data: Mapping[str, Any]) -> ExecResult:
    """Parses the buffered `exec` response (output fields are base64, see `command_body`)."""
    out = base64.b64decode(str(data.get("stdout", "")))
    err = base64.b64decode(str(data.get("stderr", "")))
    duration = data.get("duration_ms")
    return ExecResult(
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        exit_code=int(data.get("exit_code", -1)),
        reason=str(data.get("reason", "exited")),
        signal=data.get("signal"),
        duration_ms=int(duration) if isinstance(duration, (int, float)) else None,
        truncated=bool(data.get("truncated", False)),
        process_id=data.get("process_id"),
        stdout_bytes=out,
        stderr_bytes=err,
    )


def check_exec(result: ExecResult) -> ExecResult:
    """Raises `CommandFailed` for a non-zero exit; returns the result otherwise."""
    if result.exit_code != 0:
        digest = OutputDigest(tail_lines=20)
        digest.feed(result.stdout)
        digest.flush()
        digest.feed(result.stderr)
        raise CommandFailed(
            exit_code=result.exit_code,
            reason=result.reason,
            signal=result.signal,
            output_tail=digest.tail(),
            process_id=result.process_id,
        )
    return result


class StreamDecoder(Protocol[E]):
    """Turns a followed stream's SSE messages into events, dropping any it already delivered."""

    last_seq: int  # the sequence number of the last event decoded
    ended: bool  # the stream's last event was decoded

    def decode(self, message: SseMessage) -> list[E]:
        """The events one message yields ([] for a replayed one)."""
        ...


@dataclass
class Cursor(Generic[E]):
    """Where a followed stream stands: the decoder (with the last seq) and reconnect attempts."""

    sandbox_id: str
    decoder: StreamDecoder[E]
    process_id: str | None = None
    idempotency_key: str | None = None
    failures: int = 0

    @property
    def last_seq(self) -> int:
        """The sequence number of the last event received."""
        return self.decoder.last_seq

    def resume_headers(self) -> dict[str, str]:
        """Headers for (re)opening the stream after the events already seen."""
        headers = {"Accept": "text/event-stream"}
        if self.idempotency_key is not None:
            headers["Idempotency-Key"] = self.idempotency_key
        if self.last_seq > 0:
            headers["Last-Event-ID"] = str(self.last_seq)
        return headers

    def seen(self, event: E) -> None:
        """Records an event received: progress resets the failure count."""
        self.failures = 0
        if isinstance(event, Start):
            self.process_id = event.process_id

    def failed(self, detail: str, config: ClientConfig) -> float:
        """Counts a dropped connection; returns the delay before retrying or raises `StreamLost`."""
        self.failures += 1
        if self.failures > config.max_reconnects:
            raise StreamLost(
                detail,
                sandbox_id=self.sandbox_id,
                process_id=self.process_id,
                last_event_id=self.last_seq,
                attempts=self.failures,
                idempotency_key=self.idempotency_key,
            )
        return config.backoff(self.failures)


def process_cursor(sandbox_id: str, process_id: str, since: int = 0) -> Cursor[Event]:
    """A cursor on a process's log that delivers the events after `since`."""
    cursor = Cursor[Event](sandbox_id, EventDecoder(), process_id=process_id)
    cursor.decoder.last_seq = since
    return cursor


class Dispatch:
    """Routes events to `exec_stream`'s callbacks and works out its return value."""

    def __init__(
        self, on_stdout: ChunkCallback | None, on_stderr: ChunkCallback | None, check: bool
    ) -> None:
        self.on_stdout = on_stdout
        self.on_stderr = on_stderr
        self.check = check
        self.digest = OutputDigest(tail_lines=20) if check else None
        self.process_id: str | None = None

    def callback_for(self, event: Event) -> tuple[ChunkCallback | None, str]:
        """The chunk callback an event goes to (after the digest has seen it)."""
        if isinstance(event, Start):
            self.process_id = event.process_id
        if isinstance(event, (Stdout, Stderr)):
            if self.digest is not None:
                self.digest.feed(event.data)
            return (self.on_stdout if isinstance(event, Stdout) else self.on_stderr), event.data
        return None, ""

    def lost(self, sandbox_id: str) -> StreamLost:
        """The error for a stream that ended without its exit event."""
        return StreamLost(
            "the stream ended without an exit event",
            sandbox_id=sandbox_id,
            process_id=self.process_id,
            last_event_id=0,
            attempts=0,
        )

    def finish(self, event: Exit | Error) -> int:
        """Turns the final event into the exit code, or raises."""
        if isinstance(event, Error):
            raise error_from_code(event.code, event.message)
        if self.check and event.exit_code != 0:
            assert self.digest is not None
            raise CommandFailed(
                exit_code=event.exit_code,
                reason=event.reason,
                signal=event.signal,
                output_tail=self.digest.tail(),
                process_id=self.process_id,
            )
        return event.exit_code
