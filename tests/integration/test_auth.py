"""Authentication: bearer key, access_token query, the open health route."""

from __future__ import annotations

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
