"""Persistent shell sessions: `sandbox.create_session()`. Commands of a session run one at a
time and keep the shell's state (`cd`, `export`, variables, functions) between them.

What both clients share, without I/O: the requests of a session. `AsyncSession` (_async/sessions.py)
and `Session` (_sync/sessions.py, generated from it) send them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from ._core import Call, ignore_body


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

