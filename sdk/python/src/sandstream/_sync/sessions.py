# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do
# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells
# whether this file is current).
"""Shell sessions of a sandbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core import ChunkCallback
from ..models import ExecResult
from ..sessions import _SessionBase
from .commands import _Commands


class Session(_SessionBase):
    """A shell session in a sandbox. `env`/`cwd` given to one command apply to it alone."""

    def __init__(self, sandbox: _Commands, info: dict[str, Any]) -> None:
        super().__init__(sandbox._path, info)
        self._sandbox = sandbox

    def exec(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
             cwd: str | None = None, stdin: str | None = None,
             timeout_seconds: float | None = None, check: bool = False) -> ExecResult:
        """Runs a command in the session to its end."""
        return self._sandbox.exec(cmd, env=env, cwd=cwd, stdin=stdin,
                                  timeout_seconds=timeout_seconds, check=check, session=self.id)

    def exec_stream(self, cmd: str | Sequence[str], on_stdout: ChunkCallback | None = None,
                    on_stderr: ChunkCallback | None = None, *,
                    env: Mapping[str, str] | None = None, cwd: str | None = None,
                    timeout_seconds: float | None = None, check: bool = False) -> int:
        """Runs a command in the session, streaming its output; returns the exit code."""
        return self._sandbox.exec_stream(cmd, on_stdout, on_stderr, env=env, cwd=cwd,
                                         timeout_seconds=timeout_seconds, check=check,
                                         session=self.id)

    def refresh(self) -> dict[str, Any]:
        """The session as the server sees it now (`commands`, `busy`)."""
        self.info = self._sandbox._api.call(self._get())
        return self.info

    def delete(self) -> None:
        """Ends the session."""
        self._sandbox._api.call(self._delete())

