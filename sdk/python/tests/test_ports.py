"""Exposed ports against the real daemon: `python3 -m http.server` in a sandbox, waited for,
exposed, and fetched through the daemon by path and by host, with the sync and async clients."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest

import sandstream
from sandstream import AsyncSandbox, Port, Sandbox
from sandstream.errors import error_from_response

from .conftest import API_KEY, Daemon

PAGE = "<!doctype html><title>site</title><link rel=stylesheet href=style.css><h1>hello port</h1>\n"
STYLE = "h1 { color: teal }\n"


def serve(sb: Sandbox, port: int) -> None:
    """Writes a two-file site to /workspace/site and serves it on `port` in the background."""
    sb.files.write("/workspace/site/index.html", PAGE)
    sb.files.write("/workspace/site/style.css", STYLE)
    sb.processes.start(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1",
                        "--directory", "/workspace/site"], id=f"web-{port}")


def test_expose_wait_and_fetch_by_path_and_by_host(daemon: Daemon) -> None:
    with Sandbox.create() as sb:
        serve(sb, 8000)
        sb.wait_for_port(8000, timeout=20)
        port = sb.expose_port(8000)
        assert port.port == 8000
        listen = urlsplit(daemon.url).netloc.rsplit(":", 1)[1]
        assert port.url == f"http://8000-{sb.id}.localhost:{listen}/"
        assert port.path_url == f"{daemon.url}/v1/sandboxes/{sb.id}/ports/8000/"
        assert port.host == f"8000-{sb.id}.localhost:{listen}"
        assert port.created_at is not None
        assert port.browser_url("k/y") == port.url + "?access_token=k%2Fy"
        auth = {"Authorization": f"Bearer {API_KEY}"}

        by_path = httpx.get(port.path_url, headers=auth)
        assert by_path.status_code == 200, by_path.text
        assert by_path.text == PAGE
        css = httpx.get(port.path_url + "style.css", params={"access_token": API_KEY})
        assert css.status_code == 200 and css.text == STYLE

        # The host form's name need not resolve: the request goes to the daemon's address.
        by_host = httpx.get(daemon.url + "/style.css", headers={**auth, "Host": port.host})
        assert by_host.status_code == 200, by_host.text
        assert by_host.text == STYLE
        assert httpx.get(daemon.url + "/", headers={"Host": port.host}).status_code == 401

        assert sb.expose_port(8000) == port
        assert sb.list_ports() == [port]
        assert sb.get_port(8000) == port
        assert sb.get_host(8000) == port.host
        sb.close_port(8000)
        assert sb.list_ports() == []
        with pytest.raises(sandstream.NotFound):
            sb.get_port(8000)
        with pytest.raises(sandstream.NotFound):
            sb.close_port(8000)
        assert httpx.get(port.path_url, headers=auth).status_code == 404
        # get_host exposes the port it names.
        assert sb.get_host(8000) == port.host
        assert [p.port for p in sb.list_ports()] == [8000]


def test_errors_of_ports(daemon: Daemon) -> None:
    with Sandbox.create() as sb:
        started = time.monotonic()
        with pytest.raises(sandstream.Timeout, match="port 9 .* within 0.5 s"):
            sb.wait_for_port(9, timeout=0.5)
        assert time.monotonic() - started < 5
        port = sb.expose_port(9)
        answer = httpx.get(port.path_url, headers={"Authorization": f"Bearer {API_KEY}"})
        err = error_from_response(answer.status_code, answer.content)
        assert isinstance(err, sandstream.BadGateway) and err.status == 502
        for bad in (0, 65536):
            with pytest.raises(sandstream.InvalidRequest):
                sb.expose_port(bad)
        with pytest.raises(TypeError):
            sb.expose_port(True)


async def test_async_ports(daemon: Daemon) -> None:
    async with await AsyncSandbox.create() as sb:
        await sb.files.write("/workspace/index.html", PAGE)
        await sb.processes.start("python3 -m http.server 8080 --bind 127.0.0.1")
        await sb.wait_for_port(8080, timeout=20)
        port = await sb.expose_port(8080)
        assert isinstance(port, Port) and port.port == 8080
        assert await sb.list_ports() == [port]
        assert await sb.get_port(8080) == port
        assert await sb.get_host(8080) == port.host
        async with httpx.AsyncClient() as client:
            page = await client.get(port.path_url, headers={"Authorization": f"Bearer {API_KEY}"})
        assert page.status_code == 200 and page.text == PAGE
        await sb.close_port(8080)
        assert await sb.list_ports() == []
        with pytest.raises(sandstream.Timeout):
            await sb.wait_for_port(8081, timeout=0.3)
