"""A sandbox's files: `sandbox.files.read/write/list/stat/mkdir/remove/move/watch`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .events import SseParser
from .errors import NotFound, error_from_response

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass(frozen=True)
class FileInfo:
    """A file or directory inside a sandbox."""

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
        return cls(path=data["path"], name=data["name"], type=data["type"], size=int(data["size"]),
                   mtime=data["mtime"], mode=data["mode"], target=data.get("target"))


@dataclass(frozen=True)
class FileEvent:
    """A change under a watched directory: create, modify, delete, move (with `from_path`)."""

    type: str
    path: str
    is_dir: bool
    from_path: str | None = None


class Files:
    """File operations on one sandbox. Paths are absolute inside the sandbox, or relative to
    its working directory; they never reach outside it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self._sandbox.id}/files"

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        api = self._sandbox._api
        with api.stream("GET", self._path + "/content", params={"path": path}) as response:
            return response.read()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: str | bytes | Iterable[bytes], *, mode: str | int | None = None,
              parents: bool = True) -> FileInfo:
        """Creates or replaces a file. An iterable of bytes is streamed as it is produced.
        `mode` is octal ("0755" or 0o755); missing parent directories are created."""
        params = {"path": path, "parents": "1" if parents else "0"}
        if mode is not None:
            params["mode"] = mode if isinstance(mode, str) else format(mode, "04o")
        body: bytes | Iterable[bytes] = data.encode() if isinstance(data, str) else data
        api = self._sandbox._api
        response = api.client.put(api.url(self._path + "/content"), params=params, content=body,
                                  headers=api.config.headers(), timeout=api.config.stream_timeout())
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return FileInfo.from_json(response.json())

    def list(self, path: str = ".") -> list[FileInfo]:
        """A directory's entries (symlinks are not followed)."""
        data = self._sandbox._api.request("GET", self._path, params={"path": path})
        return [FileInfo.from_json(e) for e in data["entries"]]

    def stat(self, path: str) -> FileInfo:
        """What `path` is (symlinks followed)."""
        return FileInfo.from_json(self._sandbox._api.request("GET", self._path + "/stat",
                                                             params={"path": path}))

    def exists(self, path: str) -> bool:
        """Whether `path` exists."""
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str, *, parents: bool = True, mode: str | int | None = None) -> FileInfo:
        """Creates a directory (and its parents)."""
        body: dict[str, Any] = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = mode if isinstance(mode, str) else format(mode, "04o")
        return FileInfo.from_json(self._sandbox._api.request("POST", self._path + "/mkdir", json=body))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Deletes a file, a symlink or an (empty, unless `recursive`) directory."""
        self._sandbox._api.request("DELETE", self._path,
                                   params={"path": path, "recursive": "1" if recursive else "0"})

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileInfo:
        """Renames `source` to `destination`."""
        body = {"from": source, "to": destination, "overwrite": overwrite}
        return FileInfo.from_json(self._sandbox._api.request("POST", self._path + "/move", json=body))

    def watch(self, path: str, *, recursive: bool = True) -> Iterator[FileEvent]:
        """Yields changes under the directory `path` until the caller stops iterating."""
        params = {"path": path, "recursive": "1" if recursive else "0"}
        with self._sandbox._api.stream("GET", self._path + "/watch", params=params) as response:
            parser = SseParser()
            for chunk in response.iter_bytes():
                for message in parser.feed(chunk):
                    if message.event == "ready":
                        continue
                    data = json.loads(message.data)
                    if message.event == "error":
                        raise error_from_response(404 if data.get("code") == "not_found" else 503,
                                                  json.dumps({"error": data}).encode())
                    yield FileEvent(type=message.event, path=data["path"], is_dir=bool(data.get("is_dir")),
                                    from_path=data.get("from"))
