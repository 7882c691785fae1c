# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do
# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells
# whether this file is current).
"""A sandbox's background processes: `Processes` (`sandbox.processes`) and the `Process`
handle, with the resumable event stream behind `Process.logs`."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

from .._core import (
    WAIT_SLICE,
    command_body,
    deprecated,
    list_processes_call,
    logs_params,
    process_call,
    process_cursor,
    process_path,
    signal_body,
    start_process_call,
    stdin_params,
    wait_call,
)
from ..errors import Timeout
from ..events import Event
from ..models import Flow, ProcessInfo
from .api import _SandboxSurface


class Processes:
    """The background processes of one sandbox: `sandbox.processes`."""

    def __init__(self, sandbox: _SandboxSurface) -> None:
        self._sandbox = sandbox

    def start(
        self,
        cmd: str | Sequence[str],
        *,
        id: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        timeout_seconds: float | None = None,
        idle_timeout_seconds: float | None = None,
        merge_stderr: bool = False,
        log_window_bytes: int | None = None,
        keep_awake: bool = False,
    ) -> Process:
        """Starts a command in the background and returns its handle.

        `id` is an optional caller-chosen process id (`Conflict` if in use). Without `stdin`
        the process's stdin stays open for `write_stdin`. With `keep_awake` the sandbox does
        not pause itself when idle (`auto_pause`) while the process runs.
        """
        body = command_body(
            cmd,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds,
            merge_stderr=merge_stderr,
            log_window_bytes=log_window_bytes,
        )
        if id is not None:
            body["id"] = id
        if keep_awake:
            body["keep_awake"] = True
        info = self._sandbox._api.call(start_process_call(self._sandbox._path, body))
        return Process(self._sandbox, info)

    def list(self, status: str | None = None) -> list[ProcessInfo]:
        """Lists the sandbox's processes; `status` is `running` or `exited` to filter."""
        return self._sandbox._api.call(list_processes_call(self._sandbox._path, status))

    def get(self, process_id: str) -> Process:
        """A handle to an existing process (running or ended); `NotFound` if unknown."""
        path = process_path(self._sandbox._path, process_id)
        return Process(self._sandbox, self._sandbox._api.call(process_call("GET", path)))


class Process:
    """A handle to a background process.

    `logs(follow=True)` yields its events; `disconnect()` stops reading (the process keeps
    running) and `reattach()` continues after the last event this handle saw.
    """

    def __init__(self, sandbox: _SandboxSurface, info: ProcessInfo) -> None:
        self._sandbox = sandbox
        self._info = info
        self._cursor = process_cursor(sandbox.id, info.id)
        self._disconnected = False
        self._flow: Flow | None = None
        self._response: httpx.Response | None = None

    @property
    def id(self) -> str:
        """The process id."""
        return self._info.id

    @property
    def info(self) -> ProcessInfo:
        """The process as last fetched; `refresh()` fetches it again."""
        return self._info

    @property
    def last_event_id(self) -> int:
        """The sequence number of the last event this handle delivered (0: none yet)."""
        return self._cursor.last_seq

    @property
    def _path(self) -> str:
        return process_path(self._sandbox._path, self.id)

    def refresh(self) -> ProcessInfo:
        """Fetches the process's current state."""
        self._info = self._sandbox._api.call(process_call("GET", self._path))
        return self._info

    def logs(
        self,
        follow: bool = True,
        since: int | None = None,
        tail: int | None = None,
        flow: Flow | None = None,
    ) -> Iterator[Event]:
        """Yields the process's events: with `follow`, until its exit, resuming dropped
        connections; without, the events retained now.

        `since` starts after that sequence number (default: after the last event this handle
        saw, so a second call continues where the first stopped); `tail` starts with the last
        N chunks. `flow` paces a follow: `"skip"` (the server's default) never holds the
        process back, and a reader that falls a window behind gets a `Gap`; `"wait"` holds the
        process while this reader is a window behind, so every byte arrives, and keeps its
        place for the server's resume grace when the connection drops.
        """
        if since is not None and since != self._cursor.last_seq:
            self._cursor = process_cursor(self._sandbox.id, self.id, since)
        self._disconnected = False
        self._flow = flow

        @contextmanager
        def open_stream() -> Iterator[httpx.Response]:
            query = logs_params(follow, tail, self._cursor.last_seq, flow)
            with self._sandbox._api.stream(
                "GET", self._path + "/logs", params=query, headers=self._cursor.resume_headers()
            ) as response:
                # Kept so that disconnect(), called from another thread, can close it.
                self._response = response
                try:
                    yield response
                finally:
                    self._response = None

        return self._sandbox._api.follow(
            self._cursor, open_stream, until_exit=follow, stopped=lambda: self._disconnected
        )

    def reattach(self, flow: Flow | None = None) -> Iterator[Event]:
        """Follows the process again from the last event this handle delivered, with `flow` (by
        default the one the last `logs()` call used)."""
        return self.logs(follow=True, flow=flow or self._flow)

    def disconnect(self) -> None:
        """Stops reading the process's output; the process itself keeps running."""
        self._disconnected = True
        response = self._response
        if response is not None:
            response.close()

    def write_stdin(self, data: str | bytes, eof: bool = False) -> int:
        """Writes to the process's stdin (closing it after with `eof`); returns bytes written."""
        raw = data.encode() if isinstance(data, str) else data
        result = self._sandbox._api.request(
            "POST",
            self._path + "/stdin",
            content=raw,
            params=stdin_params(eof),
            headers={"Content-Type": "application/octet-stream"},
        )
        return int(result.get("written", len(raw))) if result else len(raw)

    def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end-of-file)."""
        self.write_stdin(b"", eof=True)

    def send_signal(self, signal: str | int = "TERM", group: bool = True) -> ProcessInfo:
        """Sends a signal (`"TERM"`, `"SIGINT"`, `9`) to the process group (or only its leader)."""
        body = signal_body(signal, group)
        self._info = self._sandbox._api.call(process_call("POST", self._path + "/signal", body))
        return self._info

    def kill(self) -> ProcessInfo:
        """Kills the process group (TERM, grace, KILL) and returns the ended process."""
        self._info = self._sandbox._api.call(process_call("DELETE", self._path))
        return self._info

    def wait_for_exit(self, timeout: float | None = None) -> ProcessInfo:
        """Blocks until the process exits and returns it; raises `Timeout` after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            piece = min(left, WAIT_SLICE)
            try:
                self._info = self._sandbox._api.call(
                    wait_call(self._path, piece),
                    timeout=httpx.Timeout(self._sandbox._api.config.request_timeout + piece),
                )
            except Timeout:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            return self._info

    # Deprecated names, kept until 0.3 (spec/sdk-verbs.md).

    def send_stdin(self, data: str | bytes, eof: bool = False) -> int:
        """Deprecated: `write_stdin`."""
        deprecated("Process.send_stdin", "write_stdin")
        return self.write_stdin(data, eof)

    def signal(self, signal: str | int = "TERM", group: bool = True) -> ProcessInfo:
        """Deprecated: `send_signal`."""
        deprecated("Process.signal", "send_signal")
        return self.send_signal(signal, group)

    def wait(self, timeout: float | None = None) -> ProcessInfo:
        """Deprecated: `wait_for_exit`."""
        deprecated("Process.wait", "wait_for_exit")
        return self.wait_for_exit(timeout)
