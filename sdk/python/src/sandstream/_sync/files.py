# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do
# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells
# whether this file is current).
"""File operations on one sandbox; a volume's (`_sync/volumes.py`) are the same but `watch`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..errors import NotFound
from ..events import SseParser
from ..files import FileEvent, FileInfo, _FilesBase, watch_event
from .api import _Api, _SandboxSurface


class _FileOps(_FilesBase):
    """The file operations of a sandbox and of a volume: the same requests under their own
    path (`/v1/sandboxes/{id}` or `/v1/volumes/{id}`)."""

    def __init__(self, api: _Api, owner_path: str) -> None:
        super().__init__(owner_path)
        self._api = api

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


class Files(_FileOps):
    """File operations on one sandbox. Paths are absolute inside the sandbox, or relative to
    its working directory; they never reach outside it."""

    def __init__(self, sandbox: _SandboxSurface) -> None:
        super().__init__(sandbox._api, sandbox._path)

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

