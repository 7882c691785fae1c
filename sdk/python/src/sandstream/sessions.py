"""Persistent shell sessions: `sandbox.create_session()`. Commands of a session run one at a
time and keep the shell's state (`cd`, `export`, variables, functions) between them.

`Session` and `AsyncSession` differ only in how they send the requests described here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ._core import Call, ChunkCallback, ignore_body
from .models import ExecResult

if TYPE_CHECKING:
    from .aio import AsyncSandbox
    from .sandbox import Sandbox


def _info(data: Any) -> dict[str, Any]:
    return dict(data)


def create_session_call(sandbox_path: str, env: Mapping[str, str] | None, cwd: str | None,
                        session_id: str | None) -> Call[dict[str, Any]]:
    """`POST .../sessions`: starts a shell session."""
    body: dict[str, Any] = {}
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if session_id is not None:
        body["id"] = session_id
    return Call("POST", sandbox_path + "/sessions", _info, json=body)


class _SessionBase:
    """What a session handle is, whichever client sends its requests."""

    def __init__(self, sandbox_path: str, info: dict[str, Any]) -> None:
        self.info = info
        self._path = f"{sandbox_path}/sessions/{quote(self.id, safe='')}"

    @property
    def id(self) -> str:
        """The session id ("sess_...")."""
        return str(self.info["id"])

    def _get(self) -> Call[dict[str, Any]]:
        return Call("GET", self._path, _info)

    def _delete(self) -> Call[None]:
        return Call("DELETE", self._path, ignore_body)


class Session(_SessionBase):
    """A shell session in a sandbox. `env`/`cwd` given to one command apply to it alone."""

    def __init__(self, sandbox: Sandbox, info: dict[str, Any]) -> None:
        super().__init__(sandbox._path, info)
        self._sandbox = sandbox

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
        self.info = self._sandbox._api.call(self._get())
        return self.info

    def delete(self) -> None:
        """Ends the session."""
        self._sandbox._api.call(self._delete())


class AsyncSession(_SessionBase):
    """A shell session in a sandbox, for asyncio; see `Session`."""

    def __init__(self, sandbox: AsyncSandbox, info: dict[str, Any]) -> None:
        super().__init__(sandbox._path, info)
        self._sandbox = sandbox

    async def exec(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                   cwd: str | None = None, stdin: str | None = None,
                   timeout_seconds: float | None = None, check: bool = False) -> ExecResult:
        """Runs a command in the session to its end."""
        return await self._sandbox.exec(cmd, env=env, cwd=cwd, stdin=stdin,
                                        timeout_seconds=timeout_seconds, check=check, session=self.id)

    async def exec_stream(self, cmd: str | Sequence[str], on_stdout: ChunkCallback | None = None,
                          on_stderr: ChunkCallback | None = None, *,
                          env: Mapping[str, str] | None = None, cwd: str | None = None,
                          timeout_seconds: float | None = None, check: bool = False) -> int:
        """Runs a command in the session, streaming its output; returns the exit code."""
        return await self._sandbox.exec_stream(cmd, on_stdout, on_stderr, env=env, cwd=cwd,
                                               timeout_seconds=timeout_seconds, check=check,
                                               session=self.id)

    async def refresh(self) -> dict[str, Any]:
        """The session as the server sees it now (`commands`, `busy`)."""
        self.info = await self._sandbox._api.call(self._get())
        return self.info

    async def delete(self) -> None:
        """Ends the session."""
        await self._sandbox._api.call(self._delete())
