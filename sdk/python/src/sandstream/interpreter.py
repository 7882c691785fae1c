"""Code interpreter contexts: `sandbox.create_code_context()` and `sandbox.run_code()`.

A context is a persistent interpreter (python, javascript) or shell (bash) inside the
sandbox; cells run in it one at a time and keep their variables. `run_code` streams the
cell's output to callbacks as it happens and returns an `Execution` with the structured
results (MIME bundles: text, HTML tables, PNG charts).

This module holds what both clients share and does no I/O: the requests, the decoding of a
run's events into an `Execution`, and the routing of those events to the callbacks.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union
from urllib.parse import quote

from ._core import Call, Cursor, ignore_body, new_idempotency_key
from .errors import NotFound, SandboxError, StreamLost, error_from_code
from .events import Error, SseMessage


@dataclass(frozen=True)
class Result:
    """One rich result of a cell: a MIME bundle (`data`) keyed by type."""

    data: dict[str, Any]
    is_main_result: bool = False

    @property
    def text(self) -> str | None:
        """text/plain: the value's repr."""
        value = self.data.get("text/plain")
        return None if value is None else str(value)

    @property
    def html(self) -> str | None:
        """text/html, e.g. a pandas DataFrame."""
        value = self.data.get("text/html")
        return None if value is None else str(value)

    @property
    def png(self) -> bytes | None:
        """image/png decoded, e.g. a matplotlib figure."""
        value = self.data.get("image/png")
        return None if value is None else base64.b64decode(value)

    @property
    def formats(self) -> list[str]:
        """The MIME types present."""
        return list(self.data)


@dataclass(frozen=True)
class ExecutionError:
    """The exception a cell raised (or why it could not finish)."""

    name: str
    value: str
    traceback: str
    timeout: bool = False  # the cell hit its timeout
    restarted: bool = False  # ... and the interpreter had to be restarted (state lost)


@dataclass
class Logs:
    """What the cell printed, chunk by chunk."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


@dataclass
class Execution:
    """The outcome of one cell."""

    results: list[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: ExecutionError | None = None
    execution_count: int = 0

    @property
    def text(self) -> str | None:
        """The main result's text/plain (the last expression's value), if any."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None


@dataclass(frozen=True)
class CodeContext:
    """A context on the server."""

    id: str
    language: str
    cwd: str
    status: str  # idle, busy, dead
    execution_count: int = 0
    restarts: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CodeContext:
        """Parses a Context object."""
        return cls(id=data["id"], language=data["language"], cwd=data["cwd"], status=data["status"],
                   execution_count=int(data.get("execution_count", 0)),
                   restarts=int(data.get("restarts", 0)))


TextCallback = Callable[[str], object]


def context_id(context: CodeContext | str) -> str:
    """The id of a context given as itself or as its id."""
    return context if isinstance(context, str) else context.id


def context_path(sandbox_path: str, context: CodeContext | str | None = None) -> str:
    """`/v1/sandboxes/{id}/contexts`, or one context's path under it."""
    base = sandbox_path + "/contexts"
    return base if context is None else f"{base}/{quote(context_id(context), safe='')}"


def create_context_call(sandbox_path: str, language: str, cwd: str | None,
                        env: Mapping[str, str] | None) -> Call[CodeContext]:
    """`POST .../contexts`: starts an interpreter."""
    body: dict[str, Any] = {"language": language}
    if cwd is not None:
        body["cwd"] = cwd
    if env:
        body["env"] = dict(env)
    return Call("POST", context_path(sandbox_path), CodeContext.from_json, json=body)


def list_contexts_call(sandbox_path: str) -> Call[list[CodeContext]]:
    """`GET .../contexts`."""
    return Call("GET", context_path(sandbox_path),
                lambda data: [CodeContext.from_json(c) for c in data["contexts"]])


def restart_context_call(sandbox_path: str, context: CodeContext | str) -> Call[CodeContext]:
    """`POST .../contexts/{cid}/restart`: a fresh interpreter, the old state lost."""
    return Call("POST", context_path(sandbox_path, context) + "/restart", CodeContext.from_json)


def delete_context_call(sandbox_path: str, context: CodeContext | str) -> Call[None]:
    """`DELETE .../contexts/{cid}`: the interpreter is killed."""
    return Call("DELETE", context_path(sandbox_path, context), ignore_body)


def forget_context(defaults: dict[str, CodeContext], context: CodeContext | str) -> dict[str, CodeContext]:
    """The default contexts (one per language) without a deleted one."""
    gone = context_id(context)
    return {language: c for language, c in defaults.items() if c.id != gone}


@dataclass(frozen=True)
class RunOutput:
    """A chunk the cell wrote to `stream` ("stdout" or "stderr")."""

    stream: str
    text: str


@dataclass(frozen=True)
class RunMark:
    """The cell's `start` or `exit` event: nothing to deliver, but progress on the stream."""

    kind: str


RunEvent = Union[RunOutput, Result, ExecutionError, RunMark, Error]


class RunDecoder:
    """Turns a run's SSE messages into `RunEvent`s and accumulates them into its `Execution`.

    Events after a reconnect that the server sends again (their `id` at or below the last one
    seen) are dropped, so each is accumulated and delivered once.
    """

    def __init__(self) -> None:
        self.execution = Execution()
        self.last_seq = 0
        self.ended = False
        self.failure: Error | None = None  # an infrastructure error ended the stream

    def decode(self, message: SseMessage) -> list[RunEvent]:
        """The events one message yields."""
        seq = message.seq
        if seq:
            if seq <= self.last_seq:
                return []
            self.last_seq = seq
        data = message.payload()
        kind = message.event
        if kind in ("stdout", "stderr"):
            text = str(data.get("chunk", ""))
            (self.execution.logs.stdout if kind == "stdout" else self.execution.logs.stderr).append(text)
            return [RunOutput(kind, text)]
        if kind == "result":
            result = Result(data=dict(data.get("data") or {}), is_main_result=bool(data.get("is_main_result")))
            self.execution.results.append(result)
            return [result]
        if kind == "start":
            self.execution.execution_count = int(data.get("execution_count", 0))
            return [RunMark(kind)]
        if kind == "exit":
            self.ended = True
            return [RunMark(kind)]
        if kind == "error" and "code" in data and "name" not in data:
            # An infrastructure failure (the daemon stopping), not the cell's error.
            self.ended = True
            self.failure = Error(str(data["code"]), str(data.get("message", "")))
            return [self.failure]
        if kind == "error":
            self.ended = True
            self.execution.error = ExecutionError(
                name=str(data.get("name", "Error")), value=str(data.get("value", "")),
                traceback=str(data.get("traceback", "")), timeout=bool(data.get("timeout")),
                restarted=bool(data.get("restarted")))
            return [self.execution.error]
        return []


class CellRun:
    """One `run_code` call: its request, the cursor that resumes it after a dropped connection,
    and the routing of its events to the callbacks.

    Until the `start` event the run is known only by its `Idempotency-Key`: a resume posts the
    cell again with it (the server attaches to the queued or running run, `Last-Event-ID` skips
    what was seen). After `start` the run has a number, and a resume reads it with
    `GET .../runs/{n}`, which never runs the cell: the server forgets old runs and their keys,
    so a re-post could run it a second time.
    """

    def __init__(
        self,
        sandbox_id: str,
        sandbox_path: str,
        context: CodeContext | str,
        code: str,
        timeout_seconds: float | None,
        *,
        on_stdout: TextCallback | None,
        on_stderr: TextCallback | None,
        on_result: Callable[[Result], object] | None,
        on_error: Callable[[ExecutionError], object] | None,
    ) -> None:
        self.context_id = context_id(context)
        self.context_path = context_path(sandbox_path, context)
        self.body: dict[str, Any] = {"code": code}
        if timeout_seconds is not None:
            self.body["timeout_seconds"] = timeout_seconds
        self.decoder = RunDecoder()
        self.cursor = Cursor[RunEvent](sandbox_id, self.decoder, idempotency_key=new_idempotency_key())
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr
        self._on_result = on_result
        self._on_error = on_error

    @property
    def number(self) -> int:
        """The run's `execution_count` once its `start` event arrived, else 0."""
        return self.decoder.execution.execution_count

    def request(self) -> tuple[str, str, dict[str, Any] | None, dict[str, str]]:
        """The method, path, JSON body and headers that (re)open the run's stream."""
        headers = self.cursor.resume_headers()
        if not self.number:
            return "POST", self.context_path + "/run", self.body, headers
        headers.pop("Idempotency-Key", None)
        return "GET", f"{self.context_path}/runs/{self.number}", None, headers

    def refused(self, error: SandboxError) -> StreamLost | None:
        """The error that replaces `error` when the server refuses to reopen the stream: a
        started run it no longer knows was forgotten, and must not be posted again."""
        if not self.number or not isinstance(error, NotFound):
            return None
        return StreamLost(
            f"the stream of run {self.number} of code context {self.context_id} broke and the "
            "server has since forgotten that run (a context keeps only its last runs)",
            sandbox_id=self.cursor.sandbox_id,
            process_id=None,
            last_event_id=self.cursor.last_seq,
            attempts=self.cursor.failures,
            hint="the cell was not run again; the rest of its output is lost",
        )

    def route(self, event: RunEvent) -> Callable[[], object] | None:
        """The callback call an event makes (the caller awaits its result if it is awaitable)."""
        if isinstance(event, RunOutput):
            callback = self._on_stdout if event.stream == "stdout" else self._on_stderr
            text = event.text
            return None if callback is None or not text else lambda: callback(text)
        if isinstance(event, Result) and self._on_result is not None:
            on_result, result = self._on_result, event
            return lambda: on_result(result)
        if isinstance(event, ExecutionError) and self._on_error is not None:
            on_error, error = self._on_error, event
            return lambda: on_error(error)
        return None

    def finish(self) -> Execution:
        """The `Execution` once the stream has ended; an infrastructure error raises."""
        failure = self.decoder.failure
        if failure is not None:
            raise error_from_code(failure.code, failure.message, 503)
        return self.decoder.execution
