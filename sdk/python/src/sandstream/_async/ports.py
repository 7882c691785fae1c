# unasync: async only
"""A sandbox's exposed ports, for asyncio."""
# unasync: sync only
# """A sandbox's exposed ports."""
# unasync: end

from __future__ import annotations

import builtins
import time

import httpx

from .._core import WAIT_SLICE
from ..errors import Timeout
from ..ports import (
    Port,
    close_port_call,
    expose_port_call,
    get_port_call,
    list_ports_call,
    wait_port_call,
)
from .api import _AsyncSandboxSurface


class _AsyncPorts(_AsyncSandboxSurface):
    """The port methods of `AsyncSandbox`."""

    async def expose_port(self, port: int) -> Port:
        """Exposes a port of the sandbox through the daemon and returns it with its two URLs:
        `url` (the host form, for pages with absolute paths) and `path_url`. Exposing it again
        returns the same `Port`. A server on the sandbox's loopback is enough; requests to
        either URL need the API key."""
        return await self._api.call(expose_port_call(self._path, port))

    async def list_ports(self) -> builtins.list[Port]:
        """The sandbox's exposed ports."""
        return await self._api.call(list_ports_call(self._path))

    async def get_port(self, port: int) -> Port:
        """One exposed port; `NotFound` if it is not exposed."""
        return await self._api.call(get_port_call(self._path, port))

    async def close_port(self, port: int) -> None:
        """Stops exposing a port (`NotFound` if it was not); connections already relayed go on."""
        await self._api.call(close_port_call(self._path, port))


    async def get_host(self, port: int) -> str:
        """The host that reaches `port` (`{port}-{id}.{preview_domain}:{daemon port}`), exposing
        the port first if it is not yet."""
        return (await self.expose_port(port)).host

    async def wait_for_port(self, port: int, timeout: float | None = 30.0) -> None:
        """Returns once something in the sandbox accepts connections on `port` (exposed or not);
        raises `Timeout` after `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            piece = min(left, WAIT_SLICE)
            try:
                await self._api.call(
                    wait_port_call(self._path, port, piece),
                    timeout=httpx.Timeout(self._api.config.request_timeout + piece),
                )
                return
            except Timeout as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Timeout(
                        f"nothing accepted connections on port {port} of sandbox {self.id} "
                        f"within {timeout:g} s",
                        status=exc.status,
                    ) from exc

