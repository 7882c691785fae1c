# unasync: async only
"""The asyncio client's HTTP layer: URL building, auth, error mapping and retries over an
httpx.AsyncClient, and the follower behind every resumable stream. Each surface of
`AsyncSandbox` builds on `_AsyncSandboxSurface`. Knows no surface itself."""
# unasync: sync only
# """The sync client's HTTP layer: URL building, auth, error mapping and retries over an
# httpx.Client, and the follower behind every resumable stream. Each surface of `Sandbox` builds
# on `_SandboxSurface`. Knows no surface itself."""
# unasync: end

from __future__ import annotations

import asyncio
import inspect
# unasync: sync only
# import time
# unasync: end
# unasync: async only
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
# unasync: sync only
# from collections.abc import Callable, Iterable, Iterator, Mapping
# unasync: end
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar

import httpx

from .._core import Call, ClientConfig, Cursor, connection_failed, sandbox_path
from ..errors import ConnectionFailed, SandboxError, SandstreamError, error_from_response
from ..events import SseParser
from ..models import SandboxInfo

T = TypeVar("T")
E = TypeVar("E")
K = TypeVar("K", bound="_AsyncKeyClient")


# unasync: async only
async def _invoke(callback: Callable[..., object], *args: object) -> None:
    """Calls a callback and awaits what it returns if that is awaitable (a coroutine's)."""
    result = callback(*args)
    if inspect.isawaitable(result):
        await result
# unasync: end


class _AsyncApi:
    """One server: URL building, auth, error mapping and retries over an httpx.AsyncClient."""

    def __init__(self, config: ClientConfig, client: httpx.AsyncClient | None) -> None:
        self.config = config
        self._owns_client = client is None
        self.client = client if client is not None else httpx.AsyncClient(timeout=config.timeout())

    def url(self, path: str) -> str:
        return self.config.base_url + path

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | AsyncIterable[bytes] | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Sends a request and returns its JSON body (None when empty); raises typed errors.

        With an `idempotency_key` a broken connection is retried: the server attaches the
        retry to what the first attempt started instead of doing it again.
        """
        all_headers = {**self.config.headers(), **(headers or {})}
        if idempotency_key is not None:
            all_headers["Idempotency-Key"] = idempotency_key
        failures = 0
        while True:
            try:
                response = await self.client.request(
                    method,
                    self.url(path),
                    json=json,
                    content=content,
                    params=params,
                    headers=all_headers,
                    timeout=timeout or self.config.timeout(),
                )
                break
            except httpx.TransportError as exc:
                failures += 1
                if idempotency_key is None or failures > self.config.max_reconnects:
                    raise connection_failed(method, self.url(path), exc, idempotency_key) from exc
                await asyncio.sleep(self.config.backoff(failures))
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response.json() if response.content else None

    async def call(
        self,
        call: Call[T],
        *,
        content: bytes | AsyncIterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> T:
        """Sends a request described by the shared code and parses its answer."""
        data = await self.request(
            call.method,
            call.path,
            json=call.json,
            params=call.params,
            content=content,
            headers=headers,
            timeout=timeout,
            idempotency_key=call.idempotency_key,
        )
        return call.parse(data)

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """Opens a streamed response; an error status raises its typed error."""
        async with self.client.stream(
            method,
            self.url(path),
            json=json,
            params=params,
            headers={**self.config.headers(), **(headers or {})},
            timeout=self.config.stream_timeout(),
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise error_from_response(response.status_code, response.content)
            yield response

    async def follow(
        self,
        cursor: Cursor[E],
        open_stream: Callable[[], Any],
        *,
        until_exit: bool = True,
        stopped: Callable[[], bool] = lambda: False,
        refused: Callable[[SandboxError], SandstreamError | None] = lambda _: None,
    ) -> AsyncIterator[E]:
        """Yields a stream's events (a process's, a cell's), reconnecting after the last one
        seen when the stream drops.

        A stream that ends (or breaks) before its last event (`exit` or `error`) is resumed
        with `Last-Event-ID`; after `max_reconnects` attempts in a row without an event it
        raises `StreamLost`; a `204` answer (a follow resumed at or past its exit) ends it
        cleanly. `until_exit=False` is for non-following reads, which end early by design. An
        error answer to (re)opening the stream is raised as `refused` maps it, or as it is.
        """
        sent = False
        while not stopped():
            try:
                async with open_stream() as response:
                    sent = True
                    # Its last event was delivered before: nothing more will come.
                    if response.status_code == 204:
                        return
                    parser = SseParser()
                    async for chunk in response.aiter_bytes():
                        # After the last event the server ends the response at once; reading
                        # its end lets the connection serve the next call.
                        if cursor.decoder.ended:
                            continue
                        for message in parser.feed(chunk):
                            for event in cursor.decoder.decode(message):
                                cursor.seen(event)
                                yield event
                                if stopped():
                                    return
                            if cursor.decoder.ended:
                                break
                    if cursor.decoder.ended:
                        return
                if not until_exit:
                    return
                detail = "the stream ended without an exit event"
            except SandboxError as exc:
                replacement = refused(exc)
                if replacement is None:
                    raise
                raise replacement from exc
            except httpx.ConnectError as exc:
                if not sent:
                    raise ConnectionFailed(f"cannot reach {self.config.base_url}: {exc}") from exc
                detail = f"reconnecting failed ({exc})"
            except httpx.TransportError as exc:
                sent = True
                # (After the last event, a break while reading the response's end loses nothing.)
                if stopped() or cursor.decoder.ended:
                    return
                detail = f"the connection broke ({type(exc).__name__}: {exc})"
            await asyncio.sleep(cursor.failed(detail, self.config))

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()



class _AsyncSandboxSurface:
    """What every surface of a sandbox (commands, processes, files, ports, ...) reads: the API
    it talks through, and the sandbox's id and path."""

    _api: _AsyncApi
    _info: SandboxInfo

    @property
    def id(self) -> str:
        """The sandbox id (`sb_...`)."""
        return self._info.id

    @property
    def _path(self) -> str:
        return sandbox_path(self.id)


class _AsyncKeyClient:
    """A client of a key's own API (not of one sandbox): `AsyncAdmin`, `AsyncVolumes`. The
    server is `base_url`, else `SANDSTREAM_URL`; the key is `api_key`, else
    `SANDSTREAM_API_KEY`. Used as a context manager, its connections close on exit."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self._api = _AsyncApi(config or ClientConfig.resolve(base_url, api_key), http_client)

    async def close(self) -> None:
        """Closes the HTTP connections."""
        await self._api.aclose()

    async def __aenter__(self: K) -> K:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._api.aclose()


# unasync: async only
async def _aiter(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
# unasync: end
