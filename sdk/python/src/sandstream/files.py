"""A sandbox's files: `sandbox.files.read/write/list/stat/mkdir/remove/move/watch`; a volume's,
`volume.files`, are the same but `watch`.

What both clients share, without I/O: the requests of the files API (`_FilesBase`) and what they
answer. `AsyncFiles` (_async/files.py) and `Files` (_sync/files.py, generated from it) send them,
and so do `AsyncVolumeFiles` and `VolumeFiles` (`volumes.py` of each)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._core import Call, ignore_body
from .events import SseMessage
from .errors import error_from_code


@dataclass(frozen=True)
class FileInfo:
    """A file or directory inside a sandbox or a volume."""

    path: str
    name: str
    type: str  # file, directory, symlink, other
    size: int
    mtime: str
    mode: str  # octal, "0644"
    target: str | None = None  # symlinks

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.type == "directory"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileInfo:
        """Parses a File object."""
        return cls(path=data["path"], name=data["name"], type=data["type"], size=int(data["size"]),
                   mtime=data["mtime"], mode=data["mode"], target=data.get("target"))


@dataclass(frozen=True)
class FileEvent:
    """A change under a watched directory: create, modify, delete, move (with `from_path`)."""

    type: str
    path: str
    is_dir: bool
    from_path: str | None = None


def _entries(data: Any) -> list[FileInfo]:
    return [FileInfo.from_json(e) for e in data["entries"]]


def _octal(mode: str | int) -> str:
    return mode if isinstance(mode, str) else format(mode, "04o")


def watch_event(message: SseMessage) -> FileEvent | None:
    """The change one message of a watch stream reports (None for `ready`); the stream's
    `error` event (the directory went away) raises its typed error."""
    if message.event == "ready":
        return None
    data = message.payload()
    if message.event == "error":
        code = str(data.get("code", "internal"))
        raise error_from_code(code, str(data.get("message", "")), 404 if code == "not_found" else 503)
    return FileEvent(type=message.event, path=str(data.get("path", "")), is_dir=bool(data.get("is_dir")),
                     from_path=data.get("from"))


class _FilesBase:
    """The requests of the files API for one sandbox (`/v1/sandboxes/{id}`) or one volume
    (`/v1/volumes/{id}`): the same routes under either."""

    def __init__(self, owner_path: str) -> None:
        self._base = owner_path + "/files"

    def _read(self, path: str) -> tuple[str, dict[str, str]]:
        return self._base + "/content", {"path": path}

    def _write(self, path: str, mode: str | int | None, parents: bool) -> Call[FileInfo]:
        params = {"path": path, "parents": "1" if parents else "0"}
        if mode is not None:
            params["mode"] = _octal(mode)
        return Call("PUT", self._base + "/content", FileInfo.from_json, params=params)

    def _list(self, path: str) -> Call[list[FileInfo]]:
        return Call("GET", self._base, _entries, params={"path": path})

    def _stat(self, path: str) -> Call[FileInfo]:
        return Call("GET", self._base + "/stat", FileInfo.from_json, params={"path": path})

    def _mkdir(self, path: str, parents: bool, mode: str | int | None) -> Call[FileInfo]:
        body: dict[str, Any] = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = _octal(mode)
        return Call("POST", self._base + "/mkdir", FileInfo.from_json, json=body)

    def _remove(self, path: str, recursive: bool) -> Call[None]:
        params = {"path": path, "recursive": "1" if recursive else "0"}
        return Call("DELETE", self._base, ignore_body, params=params)

    def _move(self, source: str, destination: str, overwrite: bool) -> Call[FileInfo]:
        body = {"from": source, "to": destination, "overwrite": overwrite}
        return Call("POST", self._base + "/move", FileInfo.from_json, json=body)

    def _watch(self, path: str, recursive: bool) -> tuple[str, dict[str, str]]:
        return self._base + "/watch", {"path": path, "recursive": "1" if recursive else "0"}

