# unasync: async only
"""File operations on one sandbox, for asyncio; a volume's (`_async/volumes.py`) are the same
but `watch`."""
# unasync: sync only
# """File operations on one sandbox; a volume's (`_sync/volumes.py`) are the same but `watch`."""
# unasync: end

from __future__ import annotations

# unasync: async only
from collections.abc import AsyncIterable, AsyncIterator, Iterable
# unasync: sync only
# from collections.abc import Iterable, Iterator
# unasync: end

from ..errors import NotFound
from ..events import SseParser
from ..files import FileEvent, FileInfo, _FilesBase, watch_event
# unasync: async only
from .api import _AsyncApi, _AsyncSandboxSurface, _aiter
# unasync: sync only
# from .api import _Api, _SandboxSurface
# unasync: end


class _AsyncFileOps(_FilesBase):
    """The file operations of a sandbox and of a volume: the same requests under their own
    path (`/v1/sandboxes/{id}` or `/v1/volumes/{id}`)."""

    def __init__(self, api: _AsyncApi, owner_path: str) -> None:
        super().__init__(owner_path)
        self._api = api

    async def read(self, path: str) -> bytes:
        """The file's bytes."""
        url, params = self._read(path)
        async with self._api.stream("GET", url, params=params) as response:
            return await response.aread()

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return (await self.read(path)).decode(encoding)

    # unasync: async only
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
    # unasync: sync only
    # def write(self, path: str, data: str | bytes | Iterable[bytes], *, mode: str | int | None = None,
    #           parents: bool = True) -> FileInfo:
    #     """Creates or replaces a file. An iterable of bytes is streamed as it is produced.
    #     `mode` is octal ("0755" or 0o755); missing parent directories are created."""
    #     content = data.encode() if isinstance(data, str) else data
    #     return self._api.call(self._write(path, mode, parents), content=content,
    #                           timeout=self._api.config.stream_timeout())
    # unasync: end

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


class AsyncFiles(_AsyncFileOps):
    # unasync: async only
    """File operations on one sandbox, for asyncio; see `Files`."""
    # unasync: sync only
    # """File operations on one sandbox. Paths are absolute inside the sandbox, or relative to
    # its working directory; they never reach outside it."""
    # unasync: end

    def __init__(self, sandbox: _AsyncSandboxSurface) -> None:
        super().__init__(sandbox._api, sandbox._path)

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

