"""A sandbox's files: `sandbox.files.read/write/list/stat/mkdir/remove/move/watch`.

`Files` and `AsyncFiles` differ only in how they send the requests described by `_FilesBase`."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._core import Call, ignore_body
from .events import SseMessage, SseParser
from .errors import NotFound, error_from_code

if TYPE_CHECKING:
    from .aio import AsyncSandbox
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
    """The requests of the files API for one sandbox."""

    def __init__(self, sandbox_path: str) -> None:
        self._base = sandbox_path + "/files"

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


class Files(_FilesBase):
    """File operations on one sandbox. Paths are absolute inside the sandbox, or relative to
    its working directory; they never reach outside it."""

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__(sandbox._path)
        self._api = sandbox._api

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        url, params = self._read(path)
        with self._api.stream("GET", url, params=params) as response:
            return response.read()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: str | bytes | Iterable[bytes], *, mode: str | int | None = None,
              parents: bool = True) -> FileInfo:
        """Creates or replaces a file. An iterable of bytes is streamed as it is produced.
        `mode` is octal ("0755" or 0o755); missing parent directories are created."""
        content = data.encode() if isinstance(data, str) else data
        return self._api.call(self._write(path, mode, parents), content=content,
                              timeout=self._api.config.stream_timeout())

    def list(self, path: str = ".") -> list[FileInfo]:
        """A directory's entries (symlinks are not followed)."""
        return self._api.call(self._list(path))

    def stat(self, path: str) -> FileInfo:
        """What `path` is (symlinks followed)."""
        return self._api.call(self._stat(path))

    def exists(self, path: str) -> bool:
        """Whether `path` exists."""
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str, *, parents: bool = True, mode: str | int | None = None) -> FileInfo:
        """Creates a directory (and its parents)."""
        return self._api.call(self._mkdir(path, parents, mode))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Deletes a file, a symlink or an (empty, unless `recursive`) directory."""
        self._api.call(self._remove(path, recursive))

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileInfo:
        """Renames `source` to `destination`."""
        return self._api.call(self._move(source, destination, overwrite))

    def watch(self, path: str, *, recursive: bool = True) -> Iterator[FileEvent]:
        """Yields changes under the directory `path` until the caller stops iterating."""
        url, params = self._watch(path, recursive)
        with self._api.stream("GET", url, params=params) as response:
            parser = SseParser()
            for chunk in response.iter_bytes():
                for message in parser.feed(chunk):
                    event = watch_event(message)
                    if event is not None:
                        yield event


async def _aiter(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


class AsyncFiles(_FilesBase):
    """File operations on one sandbox, for asyncio; see `Files`."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        super().__init__(sandbox._path)
        self._api = sandbox._api

    async def read(self, path: str) -> bytes:
        """The file's bytes."""
        url, params = self._read(path)
        async with self._api.stream("GET", url, params=params) as response:
            return await response.aread()

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return (await self.read(path)).decode(encoding)

    async def write(self, path: str, data: str | bytes | Iterable[bytes] | AsyncIterable[bytes], *,
                    mode: str | int | None = None, parents: bool = True) -> FileInfo:
        """Creates or replaces a file. An iterable or async iterable of bytes is streamed as it
        is produced. `mode` is octal ("0755" or 0o755); missing parent directories are created."""
        content: bytes | AsyncIterable[bytes]
        if isinstance(data, str):
            content = data.encode()
        elif isinstance(data, (bytes, AsyncIterable)):
            content = data
        else:
            content = _aiter(data)
        return await self._api.call(self._write(path, mode, parents), content=content,
                                    timeout=self._api.config.stream_timeout())

    async def list(self, path: str = ".") -> list[FileInfo]:
        """A directory's entries (symlinks are not followed)."""
        return await self._api.call(self._list(path))

    async def stat(self, path: str) -> FileInfo:
        """What `path` is (symlinks followed)."""
        return await self._api.call(self._stat(path))

    async def exists(self, path: str) -> bool:
        """Whether `path` exists."""
        try:
            await self.stat(path)
            return True
        except NotFound:
            return False

    async def mkdir(self, path: str, *, parents: bool = True, mode: str | int | None = None) -> FileInfo:
        """Creates a directory (and its parents)."""
        return await self._api.call(self._mkdir(path, parents, mode))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Deletes a file, a symlink or an (empty, unless `recursive`) directory."""
        await self._api.call(self._remove(path, recursive))

    async def move(self, source: str, destination: str, *, overwrite: bool = False) -> FileInfo:
        """Renames `source` to `destination`."""
        return await self._api.call(self._move(source, destination, overwrite))

    async def watch(self, path: str, *, recursive: bool = True) -> AsyncIterator[FileEvent]:
        """Yields changes under the directory `path` until the caller stops iterating."""
        url, params = self._watch(path, recursive)
        async with self._api.stream("GET", url, params=params) as response:
            parser = SseParser()
            async for chunk in response.aiter_bytes():
                for message in parser.feed(chunk):
                    event = watch_event(message)
                    if event is not None:
                        yield event
