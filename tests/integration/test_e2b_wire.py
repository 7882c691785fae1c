"""The E2B adapter on the wire: who may use E2B's control plane and envd routes, and the
shapes of their answers where the SDKs read them (the SDKs' own flows run in test_e2b.py and
tests/compat/e2b). Tenants keep to their own sandboxes here as on sandstream's routes; a
sandbox's access token opens that sandbox only; quotas count envd's calls and streams."""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
from typing import Any

import httpx
from helpers import API_KEY, Daemon, tenant


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(body)) + body


def envelopes(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """The (flags, message) pairs of a Connect stream's body."""
    out = []
    while data:
        flags, length = struct.unpack(">BI", data[:5])
        out.append((flags, json.loads(data[5:5 + length])))
        data = data[5 + length:]
    return out


def create(c: httpx.Client, key: str, **body: Any) -> dict[str, Any]:
    r = c.post("/v2/sandboxes", json={"templateID": "base", **body}, headers={"X-API-KEY": key})
    assert r.status_code == 201, r.text
    sandbox: dict[str, Any] = r.json()
    return sandbox


def envd(sandbox: dict[str, Any], token: str | None = None) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox["sandboxID"],
            "X-Access-Token": token if token is not None else sandbox["envdAccessToken"]}


def start(c: httpx.Client, sandbox: dict[str, Any], cmd: str,
          headers: dict[str, str] | None = None) -> list[tuple[int, dict[str, Any]]]:
    """process.Process/Start of `bash -c cmd`, read to its end."""
    r = c.post("/process.Process/Start",
               content=envelope({"process": {"cmd": "/bin/bash", "args": ["-c", cmd]}}),
               headers={"Content-Type": "application/connect+json",
                        **(headers if headers is not None else envd(sandbox))})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/connect+json"
    return envelopes(r.content)


def test_a_command_streams_start_output_end_then_the_stream_end(daemon: Daemon) -> None:
    with daemon.client(key=None) as c:
        sb = create(c, API_KEY)
        events = start(c, sb, "printf 'a\\0b'; printf err >&2; exit 3")
        assert events[0][1]["event"]["start"]["pid"] > 0
        data = b"".join(base64.b64decode(m["event"]["data"]["stdout"])
                        for _, m in events if "data" in m.get("event", {})
                        and "stdout" in m["event"]["data"])
        assert data == b"a\0b"
        assert any(m.get("event", {}).get("data", {}).get("stderr") == "ZXJy" for _, m in events)
        assert events[-2][1]["event"]["end"] == {
            "exitCode": 3, "exited": True, "status": "exit status 3", "error": "exit status 3"}
        assert events[-1] == (2, {})
        # A signal's death is envd's -1 and Go's words.
        end = start(c, sb, "kill -KILL $$")[-2][1]["event"]["end"]
        assert end == {"exitCode": -1, "exited": False, "status": "signal: killed",
                       "error": "signal: killed"}
        c.delete(f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": API_KEY})


def test_errors_in_each_dialect(daemon: Daemon) -> None:
    with daemon.client(key=None) as c:
        key = {"X-API-KEY": API_KEY}
        # The control plane: {"code": <status>, "message"}, the key required.
        r = c.post("/v2/sandboxes", json={})
        assert r.status_code == 401 and r.json()["code"] == 401 and r.json()["message"], r.text
        r = c.post("/v2/sandboxes", json={"templateID": "nope"}, headers=key)
        assert r.status_code == 400 and "unknown template 'nope'" in r.json()["message"], r.text
        r = c.get("/sandboxes/sb_0000000000000000", headers=key)
        assert r.status_code == 404 and r.json() == {
            "code": 404, "message": "sandbox sb_0000000000000000 not found"}, r.text
        # What sandstream does not serve: 404 for a sandbox that is not there (below: 501 for
        # one that is).
        r = c.get("/sandboxes/sb_0000000000000000/logs", headers=key)
        assert r.status_code == 404 and r.json()["code"] == 404, r.text
        r = c.post("/sandboxes/sb_0000000000000000/pause", headers=key)
        assert r.status_code == 404 and r.json()["code"] == 404, r.text
        assert c.get("/v2/nothing/here", headers=key).status_code == 404
        r = c.post("/sandboxes/sb_0000000000000000/timeout", json={"timeout": -1}, headers=key)
        assert r.status_code == 404, r.text
        sb = create(c, API_KEY)
        r = c.post(f"/sandboxes/{sb['sandboxID']}/timeout", json={"timeout": "x"}, headers=key)
        assert r.status_code == 400 and "timeout" in r.json()["message"], r.text
        # The rest of E2B's control plane: 501 naming the route and what to use instead, never a
        # 404 the SDKs would report as a missing sandbox.
        sid = sb["sandboxID"]
        for method, path, instead in [
                ("GET", f"/sandboxes/{sid}/logs", "/v1/sandboxes/{id}/events"),
                ("GET", "/secrets", "secrets"),
                ("POST", "/v3/templates", "/v1/templates"),
                ("GET", "/templates/aliases/base", "/v1/templates")]:
            r = c.request(method, path, json={}, headers=key)
            assert r.status_code == 501 and r.json()["code"] == 501, (path, r.text)
            assert f"{method} {path.split('?')[0]}" in r.json()["message"], r.text
            assert instead in r.json()["message"], r.text
        # Fork and snapshots are served (test_e2b.py); of a sandbox that is not there, E2B's 404,
        # and a bad count E2B's 400.
        for path in ("/sandboxes/sb_0000000000000000/fork", "/sandboxes/sb_0000000000000000/snapshots"):
            r = c.post(path, json={}, headers=key)
            assert r.status_code == 404 and r.json()["code"] == 404, (path, r.text)
        r = c.post(f"/sandboxes/{sid}/fork", json={"count": 0}, headers=key)
        assert r.status_code == 400 and "count" in r.json()["message"], r.text
        r = c.get("/snapshots", params={"limit": "x"}, headers=key)
        assert r.status_code == 400 and "limit" in r.json()["message"], r.text
        assert c.get("/volumes").status_code == 401  # the key first, as for every route
        # A volume's files take its token (test_e2b_volumes.py), never a key.
        r = c.get("/volumecontent/vol_1/file", params={"path": "/f"}, headers=key)
        assert r.status_code == 401 and r.json()["code"] == 401, r.text
        # Network rules change only on a sandbox with egress (test_egress.py): this one has none.
        r = c.put(f"/sandboxes/{sid}/network", json={"denyOut": ["198.18.0.0/15"]}, headers=key)
        assert r.status_code == 409 and r.json()["code"] == 409, r.text

        # envd: a wrong token is a 401, whether or not its sandbox exists (a gone sandbox is the
        # edge's 502 to its own token only: test_an_access_token_opens_its_own_sandbox_only).
        gone = {"E2b-Sandbox-Id": "sb_0000000000000000", "X-Access-Token": "x"}
        for path in ("/process.Process/List", "/filesystem.Filesystem/Stat"):
            r = c.post(path, json={}, headers=gone)
            assert r.status_code == 401 and r.json()["code"] == "unauthenticated", r.text
        r = c.get("/health", headers=gone)
        assert r.status_code == 401 and r.json()["code"] == 401, r.text
        # A unary error: its Connect code and status.
        r = c.post("/process.Process/SendInput", headers=envd(sb),
                   json={"process": {"pid": 999999}, "input": {"stdin": "eA=="}})
        assert r.status_code == 404 and r.json() == {
            "code": "not_found", "message": "process with pid 999999 not found"}, r.text
        r = c.post("/process.Process/Nope", json={}, headers=envd(sb))
        assert r.status_code == 501 and r.json()["code"] == "unimplemented", r.text
        r = c.post("/process.Process/List", content=b"{", headers={
            **envd(sb), "Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
        r = c.post("/process.Process/List", content=b"\x08\x01", headers={
            **envd(sb), "Content-Type": "application/proto"})
        assert r.status_code == 501 and r.json()["code"] == "unimplemented", r.text
        # A stream's error: a 200 whose stream ends with it at once.
        r = c.post("/process.Process/Connect", content=envelope({"process": {"pid": 999999}}),
                   headers={**envd(sb), "Content-Type": "application/connect+json"})
        assert r.status_code == 200 and envelopes(r.content) == [
            (2, {"error": {"code": "not_found", "message": "process with pid 999999 not found"}})]
        r = c.post("/process.Process/Start", content=b"\x00\x00\x00",
                   headers={**envd(sb), "Content-Type": "application/connect+json"})
        assert envelopes(r.content)[0][1]["error"]["code"] == "invalid_argument"
        c.delete(f"/sandboxes/{sb['sandboxID']}", headers=key)


def test_an_access_token_opens_its_own_sandbox_only(daemon: Daemon) -> None:
    with daemon.client(key=None) as c:
        one, two = create(c, API_KEY), create(c, API_KEY)
        assert one["envdAccessToken"] != two["envdAccessToken"]
        assert start(c, one, "echo ok")[-2][1]["event"]["end"]["exitCode"] == 0
        # One sandbox's token names another sandbox: refused, in the stream's end.
        wrong = start(c, two, "echo no", headers=envd(two, one["envdAccessToken"]))
        assert wrong == [(2, {"error": {"code": "unauthenticated", "message": wrong[0][1][
            "error"]["message"]}})]
        for token in ("", "sbt_" + "0" * 64, API_KEY):
            r = c.post("/process.Process/List", json={}, headers=envd(one, token))
            assert r.status_code == 401 and r.json()["code"] == "unauthenticated", (token, r.text)
        # The token is no key: not for the control plane, nor for sandstream's own routes.
        r = c.get(f"/sandboxes/{one['sandboxID']}",
                  headers={"X-API-KEY": one["envdAccessToken"]})
        assert r.status_code == 401, r.text
        r = c.get(f"/v1/sandboxes/{one['sandboxID']}",
                  headers={"Authorization": f"Bearer {one['envdAccessToken']}"})
        assert r.status_code == 401, r.text
        # X-API-KEY is the control plane's header only.
        assert c.get("/v1/sandboxes", headers={"X-API-KEY": API_KEY}).status_code == 401
        for sb in (one, two):
            c.delete(f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": API_KEY})
        # Its sandbox gone, the token opens nothing: the edge's 502.
        r = c.post("/process.Process/List", json={}, headers=envd(one))
        assert r.status_code == 502 and "was not found" in r.json()["message"], r.text
        assert r.json()["sandboxId"] == one["sandboxID"]
        assert c.get("/health", headers=envd(one)).status_code == 502


def test_tenants_keep_to_their_own_sandboxes_and_quotas(daemon_factory: Any) -> None:
    d = daemon_factory()
    with d.client() as admin, d.client(key=None) as c:
        key_a = tenant(admin, "alpha", streams=1)
        key_b = tenant(admin, "beta")
        a, b = create(c, key_a), create(c, key_b)
        listed = c.get("/v2/sandboxes", headers={"X-API-KEY": key_a}).json()
        assert [s["sandboxID"] for s in listed] == [a["sandboxID"]]
        for method, path in (("GET", ""), ("DELETE", ""), ("POST", "/timeout")):
            r = c.request(method, f"/sandboxes/{b['sandboxID']}" + path,
                          json={"timeout": 60} if method == "POST" else None,
                          headers={"X-API-KEY": key_a})
            assert r.status_code == 404, (method, path, r.text)
        r = c.post(f"/v2/sandboxes/{b['sandboxID']}/connect", json={},
                   headers={"X-API-KEY": key_a})
        assert r.status_code == 404, r.text
        # The sandbox is the tenant's on sandstream's own routes too.
        assert admin.get(f"/v1/sandboxes/{a['sandboxID']}").json()["tenant"] == "alpha"
        # A scoped token is no key for the control plane.
        token = admin.post(f"/v1/sandboxes/{a['sandboxID']}/tokens",
                           json={"scopes": ["read"]}).json()["token"]
        r = c.get(f"/sandboxes/{a['sandboxID']}", headers={"X-API-KEY": token})
        assert r.status_code == 403, r.text
        # alpha's one stream: a second is refused while the first runs.
        first = threading.Thread(target=start, args=(c, a, "sleep 2"))
        first.start()
        try:
            deadline = time.monotonic() + 5
            while c.get("/v1/usage", headers={"Authorization": f"Bearer {key_a}"}).json()[
                    "usage"]["streams"] < 1:
                assert time.monotonic() < deadline, "the first stream never opened"
            refused = start(c, a, "echo second")
            assert refused[-1][1]["error"]["code"] == "resource_exhausted", refused
            assert "streams" in refused[-1][1]["error"]["message"]
        finally:
            first.join()
