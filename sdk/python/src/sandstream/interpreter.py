"""Code interpreter contexts: `sandbox.create_code_context()` and `sandbox.run_code()`.

A context is a persistent interpreter (python, javascript) or shell (bash) inside the
sandbox; cells run in it one at a time and keep their variables. `run_code` streams the
cell's output to callbacks as it happens and returns an `Execution` with the structured
results (MIME bundles: text, HTML tables, PNG charts)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .events import SseParser
from .errors import StreamLost, error_from_code

if TYPE_CHECKING:
    from .sandbox import Sandbox


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
        return cls(id=data["id"], language=data["language"], cwd=data["cwd"], status=data["status"],
                   execution_count=int(data.get("execution_count", 0)),
                   restarts=int(data.get("restarts", 0)))


TextCallback = Callable[[str], object]


def _context_path(sandbox: Sandbox, context_id: str | None = None) -> str:
    base = f"/v1/sandboxes/{sandbox.id}/contexts"
    return base if context_id is None else f"{base}/{context_id}"


def create_code_context(sandbox: Sandbox, language: str = "python", *, cwd: str | None = None,
                        env: dict[str, str] | None = None) -> CodeContext:
    """Starts an interpreter in the sandbox."""
    body: dict[str, Any] = {"language": language}
    if cwd is not None:
        body["cwd"] = cwd
    if env:
        body["env"] = dict(env)
    return CodeContext.from_json(sandbox._api.request("POST", _context_path(sandbox), json=body))


def run_code(
    sandbox: Sandbox,
    code: str,
    context: CodeContext | str,
    *,
    on_stdout: TextCallback | None = None,
    on_stderr: TextCallback | None = None,
    on_result: Callable[[Result], object] | None = None,
    on_error: Callable[[ExecutionError], object] | None = None,
    timeout_seconds: float | None = None,
) -> Execution:
    """Runs one cell, calling the callbacks as its events arrive; returns the `Execution`."""
    context_id = context if isinstance(context, str) else context.id
    body: dict[str, Any] = {"code": code}
    if timeout_seconds is not None:
        body["timeout_seconds"] = timeout_seconds
    execution = Execution()
    path = _context_path(sandbox, context_id) + "/run"
    with sandbox._api.stream("POST", path, json=body) as response:
        parser = SseParser()
        for chunk in response.iter_bytes():
            for message in parser.feed(chunk):
                data = json.loads(message.data) if message.data else {}
                if message.event == "start":
                    execution.execution_count = int(data.get("execution_count", 0))
                elif message.event in ("stdout", "stderr"):
                    text = str(data.get("chunk", ""))
                    if message.event == "stdout":
                        execution.logs.stdout.append(text)
                        if on_stdout is not None:
                            on_stdout(text)
                    else:
                        execution.logs.stderr.append(text)
                        if on_stderr is not None:
                            on_stderr(text)
                elif message.event == "result":
                    result = Result(data=dict(data.get("data", {})),
                                    is_main_result=bool(data.get("is_main_result")))
                    execution.results.append(result)
                    if on_result is not None:
                        on_result(result)
                elif message.event == "error" and "code" in data and "name" not in data:
                    # An infrastructure failure (the daemon stopping), not the cell's error.
                    raise error_from_code(str(data["code"]), str(data.get("message", "")), 503)
                elif message.event == "error":
                    execution.error = ExecutionError(
                        name=str(data.get("name", "Error")), value=str(data.get("value", "")),
                        traceback=str(data.get("traceback", "")), timeout=bool(data.get("timeout")),
                        restarted=bool(data.get("restarted")))
                    if on_error is not None:
                        on_error(execution.error)
                    return execution
                elif message.event == "exit":
                    return execution
    raise StreamLost("the cell's stream ended without an exit or error event",
                     sandbox_id=sandbox.id, process_id=None, last_event_id=0, attempts=0)


def list_code_contexts(sandbox: Sandbox) -> list[CodeContext]:
    """The sandbox's contexts."""
    data = sandbox._api.request("GET", _context_path(sandbox))
    return [CodeContext.from_json(c) for c in data["contexts"]]


def restart_code_context(sandbox: Sandbox, context: CodeContext | str) -> CodeContext:
    """Starts the context's interpreter afresh (its state is lost)."""
    context_id = context if isinstance(context, str) else context.id
    return CodeContext.from_json(sandbox._api.request("POST", _context_path(sandbox, context_id) + "/restart"))


def delete_code_context(sandbox: Sandbox, context: CodeContext | str) -> None:
    """Stops the context's interpreter and forgets it."""
    context_id = context if isinstance(context, str) else context.id
    sandbox._api.request("DELETE", _context_path(sandbox, context_id))
