# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do
# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells
# whether this file is current).
"""A sandbox's exposed ports."""

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
from .api import _SandboxSurface


class _Ports(_SandboxSurface):
    """The port methods of `Sandbox`."""

    def expose_port(self, port: int) -> Port:
        """Exposes a port of the sandbox through the daemon and returns it with its two URLs:
        `url` (the host form, for pages with absolute paths) and `path_url`. Exposing it again
        returns the same `Port`. A server on the sandbox's loopback is enough; requests to
        either URL need the API key."""
        return self._api.call(expose_port_call(self._path, port))

    def list_ports(self) -> builtins.list[Port]:
        """The sandbox's exposed ports."""
        return self._api.call(list_ports_call(self._path))

    def get_port(self, port: int) -> Port:
        """One exposed port; `NotFound` if it is not exposed."""
        return self._api.call(get_port_call(self._path, port))

    def close_port(self, port: int) -> None:
        """Stops exposing a port (`NotFound` if it was not); connections already relayed go on."""
        self._api.call(close_port_call(self._path, port))


    def get_host(self, port: int) -> str:
        """The host that reaches `port` (`{port}-{id}.{preview_domain}:{daemon port}`), exposing
        the port first if it is not yet."""
        return self.expose_port(port).host

    def wait_for_port(self, port: int, timeout: float | None = 30.0) -> None:
        """Returns once something in the sandbox accepts connections on `port` (exposed or not);
        raises `Timeout` after `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            piece = min(left, WAIT_SLICE)
            try:
                self._api.call(
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

