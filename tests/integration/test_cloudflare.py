"""The routes of Cloudflare's SandboxClient under /v1/sandboxes/{id}/api: how the router and
the handlers answer them. Their errors, refusals included, are in the container's flat shape;
sandstream's own routes keep theirs. The client's flows run in tests/compat/cloudflare."""

from __future__ import annotations

import re
from typing import Any

import httpx

from helpers import Daemon, create_sandbox

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def flat_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Asserts Cloudflare's ErrorResponse: {code, message, context, httpStatus, timestamp}."""
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert "error" not in body, body
    assert body["code"] == code and body["httpStatus"] == status, body
    assert isinstance(body["message"], str) and body["message"], body
    assert isinstance(body["context"], dict) and RFC3339_MS.match(body["timestamp"]), body
    return body


def test_router_refusals_are_flat_on_cloudflare_paths(daemon: Daemon,
                                                      sandbox: dict[str, Any]) -> None:
    base = f"/v1/sandboxes/{sandbox['id']}/api"
    with daemon.client(key="wrong") as wrong:
        assert "wrong API key" in flat_error(wrong.get(f"{base}/ping"), 401, "UNKNOWN_ERROR")["message"]
    with daemon.client() as c:
        missing = flat_error(c.get(f"{base}/commands"), 404, "UNKNOWN_ERROR")
        assert "no route" in missing["message"]
        flat_error(c.put(f"{base}/execute", json={}), 405, "UNKNOWN_ERROR")
        flat_error(c.get("/v1/sandboxes/sb_0000000000000000/api/ping"), 404, "UNKNOWN_ERROR")
        # sandstream's own routes, and paths outside the API, keep sandstream's shape.
        assert c.get(f"/v1/sandboxes/{sandbox['id']}/nothing").json()["error"]["code"] == "not_found"
        assert c.get("/v1/sandboxes/sb_0000000000000000").json()["error"]["code"] == "not_found"


def test_handler_errors_name_what_they_are_about(client: httpx.Client,
                                                 sandbox: dict[str, Any]) -> None:
    base = f"/v1/sandboxes/{sandbox['id']}/api"
    body = flat_error(client.post(f"{base}/read", json={"path": "/workspace/none"}), 404,
                      "FILE_NOT_FOUND")
    assert body["context"] == {"path": "/workspace/none"} and body["sandstreamCode"] == "not_found"
    body = flat_error(client.get(f"{base}/process/nope"), 404, "PROCESS_NOT_FOUND")
    assert body["context"] == {"processId": "nope"}
    flat_error(client.post(f"{base}/execute", json={}), 400, "VALIDATION_FAILED")
    flat_error(client.post(f"{base}/execute", content=b"{", headers={"Content-Type": "application/json"}),
               400, "VALIDATION_FAILED")
    assert client.post(f"{base}/process/start", json={"command": "sleep 30", "processId": "dup"}).is_success
    flat_error(client.post(f"{base}/process/start", json={"command": "true", "processId": "dup"}),
               409, "PROCESS_ERROR")
    client.delete(f"{base}/process/dup")


def test_execute_and_the_exec_stream(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    base = f"/v1/sandboxes/{sandbox['id']}/api"
    r = client.post(f"{base}/execute", json={"command": "echo hi; exit 3", "sessionId": "cf"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is False and body["exitCode"] == 3 and body["stdout"] == "hi\n"
    assert body["sessionId"] == "cf" and RFC3339_MS.match(body["timestamp"])
    # The session was made on first use: a sandstream session like any other.
    assert client.get(f"/v1/sandboxes/{sandbox['id']}/sessions/cf").status_code == 200
    with client.stream("POST", f"{base}/execute/stream", json={"command": "echo a"}) as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        text = s.read().decode()
    assert '"type":"start"' in text and '"type":"complete"' in text and '"data":"a\\n"' in text


def test_scoped_tokens_keep_their_scopes(client: httpx.Client, daemon: Daemon) -> None:
    sb = create_sandbox(client)
    r = client.post(f"/v1/sandboxes/{sb['id']}/tokens", json={"scopes": ["read"]})
    assert r.status_code == 201, r.text
    base = f"/v1/sandboxes/{sb['id']}/api"
    with daemon.client(key=r.json()["token"]) as reader:
        assert reader.get(f"{base}/ping").json()["message"] == "pong"
        flat_error(reader.post(f"{base}/execute", json={"command": "true"}), 403, "UNKNOWN_ERROR")
        flat_error(reader.post(f"{base}/write", json={"path": "/tmp/x", "content": "x"}), 403,
                   "UNKNOWN_ERROR")
    client.delete(f"/v1/sandboxes/{sb['id']}")


def test_a_sessions_terminal_outlives_its_connections(daemon: Daemon,
                                                      sandbox: dict[str, Any]) -> None:
    """/ws/pty as the package's xterm addon speaks it: output in binary frames, `ready` once the
    screen is replayed, resize as JSON text; a reconnect with the same sessionId gets the same
    shell and its screen back; another session gets its own; `exit` names the code."""
    import asyncio
    import json

    from websockets.asyncio.client import connect

    from test_terminals import READ_SECONDS, read_to_close, read_until, ws_url

    path = f"/v1/sandboxes/{sandbox['id']}/ws/pty"

    async def go() -> None:
        async with connect(ws_url(daemon, path, sessionId="s1", cols=100, rows=30)) as ws:
            await ws.send(b"echo $$ > /tmp/s1.pid; stty size\n")
            _, controls = await read_until(ws, b"30 100")
            assert controls[0] == {"type": "ready"}, controls
            await ws.send(json.dumps({"type": "resize", "cols": 90, "rows": 20}))
            # Quotes split what the shell prints from the echo of what was typed.
            await ws.send(b"stty size; echo MA''RK1\n")
            await read_until(ws, b"20 90\r\nMARK1\r\n")
            await ws.send("not json")
            # The shell's prompt (binary) may still come before the answer (text).
            frame = await asyncio.wait_for(ws.recv(), READ_SECONDS)
            while not isinstance(frame, str):
                frame = await asyncio.wait_for(ws.recv(), READ_SECONDS)
            error = json.loads(frame)
            assert error["type"] == "error" and error["message"], error
        # The same session: the same shell, its screen replayed before `ready`.
        async with connect(ws_url(daemon, path, sessionId="s1")) as ws:
            replay, controls = await read_until(ws, b"MARK1\r\n")
            while not controls:
                frame = await asyncio.wait_for(ws.recv(), READ_SECONDS)
                assert isinstance(frame, str), frame
                controls.append(json.loads(frame))
            assert controls == [{"type": "ready"}], (replay, controls)
            await ws.send(b"[ $$ = $(cat /tmp/s1.pid) ] && echo SAME-''SHELL\n")
            await read_until(ws, b"SAME-SHELL\r\n")
        # Another session: another shell.
        async with connect(ws_url(daemon, path, sessionId="s2")) as ws:
            await ws.send(b"[ $$ = $(cat /tmp/s1.pid) ] || echo OTHER-''SHELL; exit 3\n")
            out, controls = await read_to_close(ws)
            assert b"OTHER-SHELL" in out, out
            assert controls[-1] == {"type": "exit", "code": 3}, controls

    asyncio.run(go())
    with daemon.client() as c:
        # No session: refused in the flat shape, before any upgrade.
        r = c.get(path, headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                 "Sec-WebSocket-Version": "13",
                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        assert flat_error(r, 400, "VALIDATION_FAILED")["message"].startswith("sessionId is required")
