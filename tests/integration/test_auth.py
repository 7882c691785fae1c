"""Authentication: bearer key, access_token query, the open health route."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx

from helpers import API_KEY, Daemon, assert_error


def test_missing_and_wrong_key(daemon: Daemon) -> None:
    """No key or a wrong key is 401 unauthorized in the error shape, on /v1 and /metrics."""
    with daemon.client(key=None) as anon, daemon.client(key="wrong-key") as wrong:
        for c in (anon, wrong):
            assert_error(c.get("/v1/sandboxes"), 401, "unauthorized")
            assert_error(c.post("/v1/sandboxes", json={}), 401, "unauthorized")
            assert_error(c.get("/metrics"), 401, "unauthorized")
        assert_error(anon.get("/v1/sandboxes", params={"access_token": "wrong-key"}),
                     401, "unauthorized")
        assert_error(anon.get("/v1/sandboxes", headers={"Authorization": API_KEY}),
                     401, "unauthorized")


def test_access_token_query(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """?access_token= works where a header cannot be set, including SSE routes."""
    with daemon.client(key=None) as anon:
        r = anon.get("/v1/sandboxes", params={"access_token": API_KEY})
        assert r.status_code == 200 and "sandboxes" in r.json()
        r = anon.get(f"/v1/sandboxes/{sandbox['id']}/events",
                     params={"access_token": API_KEY})
        assert r.status_code == 200, r.text


def test_healthz_open(daemon: Daemon) -> None:
    """GET /healthz needs no key."""
    r = httpx.get(f"{daemon.url}/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and isinstance(body["version"], str) and body["version"]
    assert isinstance(body["uptime_seconds"], (int, float)) and body["uptime_seconds"] >= 0


def test_unauthenticated_body_is_answered_before_it_is_read(daemon: Daemon) -> None:
    """A request without a valid key gets its 401 from the header alone, before any of its body
    (16 MiB announced, none sent) and even when the body is over the limit; the connection
    closes after it."""
    stdin = "/v1/sandboxes/sb_0000000000000000/processes/proc_0000000000000000/stdin"
    for path, length, auth in ((stdin, 16 << 20, ""),
                               (stdin, 64 << 20, "Authorization: Bearer wrong-key\r\n"),
                               ("/v1/sandboxes", 2 << 20, "")):
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as s:
            s.sendall((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
                       f"Content-Type: application/octet-stream\r\n"
                       f"Content-Length: {length}\r\n\r\n").encode())
            f = s.makefile("rb")
            status = f.readline()
            headers = {}
            while (line := f.readline()) not in (b"\r\n", b""):
                k, _, v = line.decode().partition(":")
                headers[k.strip().lower()] = v.strip().lower()
            body = json.loads(f.read(int(headers["content-length"])))
        assert status.split()[1] == b"401", (path, length, status)
        assert body["error"]["code"] == "unauthorized", body
        assert headers.get("connection") == "close", headers
