"""A sandbox's exposed ports: `sandbox.expose_port()`, `list_ports()`, `close_port()`,
`wait_for_port()`. A server listening in the sandbox is reached through the daemon, by path
(`Port.path_url`) or by host (`Port.url`), with the API key.

What both clients share, without I/O: the `Port` value and the requests of the ports API. The
sandbox surfaces in `_async/` (and `_sync/`, generated from it) send them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ._core import Call, ignore_body


@dataclass(frozen=True)
class Port:
    """An exposed port of a sandbox and the two URLs that reach the server listening on it."""

    port: int
    url: str  # the host form: http://{port}-{id}.{preview_domain}:{daemon port}/
    path_url: str  # the path form: {daemon}/v1/sandboxes/{id}/ports/{port}/
    created_at: str | None = None

    @property
    def host(self) -> str:
        """The host (and port) of `url`: `8000-sb_....localhost:8080`."""
        return urlsplit(self.url).netloc

    def browser_url(self, token: str) -> str:
        """`url` with `?access_token=` for a browser: the daemon moves the token into an
        HttpOnly cookie of that host alone and redirects to `url`. Pass a scoped token of scope
        `port:N` (`sandbox.browser_url(port)` makes one), never the API key: a URL ends up in
        histories, logs and `Referer` headers."""
        return f"{self.url}?access_token={quote(token, safe='')}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Port:
        """Parses a Port object."""
        created = data.get("created_at")
        return cls(port=int(data["port"]), url=str(data["url"]), path_url=str(data["path_url"]),
                   created_at=None if created is None else str(created))


def _ports(data: Any) -> list[Port]:
    return [Port.from_json(p) for p in data.get("ports", [])]


def _port_number(port: int) -> int:
    # bool is an int; a port of True would be sent as `true` and refused.
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an int, not {type(port).__name__}")
    return port


def ports_path(sandbox_path: str, port: int | None = None) -> str:
    """`.../ports`, or `.../ports/{port}`."""
    base = sandbox_path + "/ports"
    return base if port is None else f"{base}/{_port_number(port)}"


def expose_port_call(sandbox_path: str, port: int) -> Call[Port]:
    """`POST .../ports`: exposes the port (again: the same Port)."""
    return Call("POST", ports_path(sandbox_path), Port.from_json, json={"port": _port_number(port)})


def list_ports_call(sandbox_path: str) -> Call[list[Port]]:
    """`GET .../ports`: every exposed port."""
    return Call("GET", ports_path(sandbox_path), _ports)


def get_port_call(sandbox_path: str, port: int) -> Call[Port]:
    """`GET .../ports/{port}`: `NotFound` unless it is exposed."""
    return Call("GET", ports_path(sandbox_path, port), Port.from_json)


def close_port_call(sandbox_path: str, port: int) -> Call[None]:
    """`DELETE .../ports/{port}`."""
    return Call("DELETE", ports_path(sandbox_path, port), ignore_body)


def wait_port_call(sandbox_path: str, port: int, seconds: float) -> Call[None]:
    """`GET .../ports/{port}/wait`: the server answers once something accepts connections on the
    port, or `408` after `seconds`."""
    return Call("GET", ports_path(sandbox_path, port) + "/wait", ignore_body,
                params={"timeout_seconds": f"{max(seconds, 0.001):g}"})
