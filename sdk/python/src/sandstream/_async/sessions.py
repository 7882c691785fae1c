# unasync: async only
"""Shell sessions of a sandbox, for asyncio."""
# unasync: sync only
# """Shell sessions of a sandbox."""
# unasync: end

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core import ChunkCallback
from ..models import ExecResult
from ..sessions import _SessionBase
from .commands import _AsyncCommands


class AsyncSession(_SessionBase):
    # unasync: async only
    """A shell session in a sandbox, for asyncio; see `Session`."""
    # unasync: sync only
    # """A shell session in a sandbox. `env`/`cwd` given to one command apply to it alone."""
    # unasync: end

    def __init__(self, sandbox: _AsyncCommands, info: dict[str, Any]) -> None:
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

