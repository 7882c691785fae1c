# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do
# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells
# whether this file is current).
"""Running a command in a sandbox: `exec` to its end, `exec_events` as events, `exec_stream`
with callbacks per chunk."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from .._core import (
    ChunkCallback,
    Cursor,
    Dispatch,
    check_exec,
    command_body,
    exec_call,
    exec_timeout,
    new_idempotency_key,
)
from ..events import Error, Event, EventDecoder, Exit
from ..models import ExecResult
from .api import _SandboxSurface


class _Commands(_SandboxSurface):
    """`exec`, `exec_events` and `exec_stream` of `Sandbox` (and of its sessions)."""

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        merge_stderr: bool = False,
        check: bool = False,
        session: str | None = None,
    ) -> ExecResult:
        """Runs a command to its end and returns its whole output and exit record.

        `cmd` as a string runs under `sh -c`; a sequence runs as argv. With `check=True` a
        non-zero exit raises `CommandFailed`. With `session` it runs in that shell session.
        """
        body = command_body(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            session=session,
            flow="wait",
        )
        timeout = exec_timeout(self._api.config, timeout_seconds)
        result = self._api.call(exec_call(self._path, body), timeout=timeout)
        return check_exec(result) if check else result

    def exec_events(
        self,
        cmd: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        merge_stderr: bool = False,
        idempotency_key: str | None = None,
        session: str | None = None,
    ) -> Iterator[Event]:
        """Runs a command and yields its events as they happen: `Start`, `Stdout`/`Stderr`
        chunks, then one `Exit` or `Error`.

        The stream waits (`flow="wait"`): while this reader is a window behind, the server holds
        the command back instead of dropping output, so a `Gap` comes only to a reader that
        takes nothing for the server's stall limit (300 s by default). A dropped connection is
        resumed after the last event seen; the command never runs twice (the request carries
        an `Idempotency-Key`).
        """
        body = command_body(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            session=session,
            flow="wait",
        )
        cursor = Cursor[Event](
            self.id, EventDecoder(), idempotency_key=idempotency_key or new_idempotency_key()
        )
        path = self._path + "/exec/stream"
        return self._api.follow(
            cursor,
            lambda: self._api.stream("POST", path, json=body, headers=cursor.resume_headers()),
        )

    def exec_stream(
        self,
        cmd: str | Sequence[str],
        on_stdout: ChunkCallback | None = None,
        on_stderr: ChunkCallback | None = None,
        *,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        merge_stderr: bool = False,
        check: bool = False,
        on_exit: Callable[[Exit], object] | None = None,
        session: str | None = None,
    ) -> int:
        """Runs a command, calling `on_stdout`/`on_stderr` with each chunk as it arrives, and
        returns the exit code.

        Chunks are not lines (see `LineBuffer`). A slow callback holds the command back, as a
        pipe would, instead of losing output (see `exec_events`). `on_exit` receives the whole
        exit record (reason, signal, duration). With `check=True` a non-zero exit raises
        `CommandFailed` carrying the tail of the output. A stream that cannot be resumed raises
        `StreamLost`; an infrastructure failure raises the server's error (e.g. `ShuttingDown`).
        """
        dispatch = Dispatch(on_stdout, on_stderr, check)
        events = self.exec_events(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            session=session,
        )
        for event in events:
            callback, text = dispatch.callback_for(event)
            if callback is not None and text:
                callback(text)
            if isinstance(event, Exit) and on_exit is not None:
                on_exit(event)
            if isinstance(event, (Exit, Error)):
                return dispatch.finish(event)
        raise dispatch.lost(self.id)
