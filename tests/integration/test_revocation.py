"""What a revoked credential leaves running: nothing. A stream opened with a tenant's key ends
when the key is revoked, and a relay to a sandbox's port (a WebSocket) is a stream too, ended
with the token it was opened with."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from helpers import create_sandbox, tenant, wait_until
from test_access import client, token
from test_ports import PORT, SERVER


def test_a_follow_stream_ends_when_its_key_is_revoked(daemon_factory: Any) -> None:
    d = daemon_factory()
    with d.client() as admin:
        key = tenant(admin, "follower")
        key_id = "key_" + key.split("_")[1]
        with client(d, key) as t:
            sb = create_sandbox(t)
            r = t.post(f"/v1/sandboxes/{sb['id']}/processes",
                       json={"id": "tick", "cmd": "while :; do echo t; sleep 0.2; done"})
            assert r.status_code == 201, r.text
            lines: list[str] = []
            ended = threading.Event()

            def follow() -> None:
                with httpx.stream("GET", f"{d.url}/v1/sandboxes/{sb['id']}/processes/tick/logs",
                                  params={"follow": 1}, timeout=30,
                                  headers={"Authorization": f"Bearer {key}"}) as s:
                    for line in s.iter_lines():
                        lines.append(line)
                ended.set()

            threading.Thread(target=follow, daemon=True).start()
            assert wait_until(lambda: len(lines) > 3, 5)
            assert admin.delete(f"/v1/admin/tenants/follower/keys/{key_id}").status_code == 204
            assert ended.wait(3), "the stream outlived its key"
            assert any("unauthorized" in line and key_id in line for line in lines), lines[-5:]
        admin.delete(f"/v1/sandboxes/{sb['id']}")


@pytest.mark.parametrize("how", ["revoke", "expire"])
def test_a_relayed_websocket_ends_with_its_token(daemon_factory: Any, how: str) -> None:
    d = daemon_factory()
    with d.client() as admin:
        sb = create_sandbox(admin)
        assert admin.put(f"/v1/sandboxes/{sb['id']}/files/content",
                         params={"path": "/workspace/server.py"},
                         content=SERVER.encode()).status_code == 201
        r = admin.post(f"/v1/sandboxes/{sb['id']}/processes",
                       json={"argv": ["python3", "/workspace/server.py", str(PORT)]})
        assert r.status_code == 201, r.text
        r = admin.get(f"/v1/sandboxes/{sb['id']}/ports/{PORT}/wait", params={"timeout_seconds": 20})
        assert r.status_code == 200, r.text
        assert admin.post(f"/v1/sandboxes/{sb['id']}/ports", json={"port": PORT}).status_code == 201
        tok = token(admin, sb["id"], f"port:{PORT}", ttl=2 if how == "expire" else 600)
        listen_port = int(d.url.rsplit(":", 1)[1])
        url = f"ws://127.0.0.1:{listen_port}/v1/sandboxes/{sb['id']}/ports/{PORT}/ws"
        sock = socket.create_connection(("127.0.0.1", listen_port), timeout=10)
        with connect(url, sock=sock, open_timeout=10,
                     additional_headers={"Authorization": f"Bearer {tok['token']}"}) as ws:
            ws.send("hello")
            assert ws.recv(timeout=10) == "hello"
            if how == "revoke":
                r = admin.delete(f"/v1/sandboxes/{sb['id']}/tokens/{tok['id']}")
                assert r.status_code == 204, r.text
            deadline = time.monotonic() + 6
            closed = False
            while time.monotonic() < deadline and not closed:
                try:
                    ws.send("still")
                    assert ws.recv(timeout=1) == "still"
                    time.sleep(0.2)
                except TimeoutError:
                    continue
                except (ConnectionClosed, OSError):
                    closed = True
            assert closed, "the relay outlived its token"
        admin.delete(f"/v1/sandboxes/{sb['id']}")
