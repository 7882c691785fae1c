"""Persistent shell sessions: `sandbox.create_session()`. Commands of a session run one at a
time and keep the shell's state (`cd`, `export`, variables, functions) between them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .models import ExecResult
from ._core import ChunkCallback

if TYPE_CHECKING:
    from .sandbox import Sandbox


class Session:
    """A shell session in a sandbox. `env`/`cwd` given to one command apply to it alone."""

    def __init__(self, sandbox: Sandbox, info: dict[str, Any]) -> None:
        self._sandbox = sandbox
        self.info = info

    @property
    def id(self) -> str:
        """The session id ("sess_...")."""
        return str(self.info["id"])

    def exec(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
             cwd: str | None = None, stdin: str | None = None, timeout_seconds: float | None = None,
             check: bool = False) -> ExecResult:
        """Runs a command in the session to its end."""
        return self._sandbox.exec(cmd, env=env, cwd=cwd, stdin=stdin, timeout_seconds=timeout_seconds,
                                  check=check, session=self.id)

    def exec_stream(self, cmd: str | Sequence[str], on_stdout: ChunkCallback | None = None,
                    on_stderr: ChunkCallback | None = None, *, env: Mapping[str, str] | None = None,
                    cwd: str | None = None, timeout_seconds: float | None = None,
                    check: bool = False) -> int:
        """Runs a command in the session, streaming its output; returns the exit code."""
        return self._sandbox.exec_stream(cmd, on_stdout, on_stderr, env=env, cwd=cwd,
                                         timeout_seconds=timeout_seconds, check=check, session=self.id)

    def refresh(self) -> dict[str, Any]:
        """The session as the server sees it now (`commands`, `busy`)."""
        self.info = self._sandbox._api.request("GET", f"/v1/sandboxes/{self._sandbox.id}/sessions/{self.id}")
        return self.info

    def delete(self) -> None:
        """Ends the session."""
        self._sandbox._api.request("DELETE", f"/v1/sandboxes/{self._sandbox.id}/sessions/{self.id}")
