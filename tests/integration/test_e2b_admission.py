"""Who envd's routes admit, and when: a caller is refused from the request's head, before any
of its body is read, unless it shows a live access token of the sandbox it names; a token
handed to a tenant's key ends with the key; a signed URL acts as the user it was signed for;
one tenant's file watches leave the others theirs."""

from __future__ import annotations

import base64
import hashlib
import select
import socket
import threading
import time
from typing import Any

import httpx
from helpers import API_KEY, Daemon, tenant, wait_until

from test_e2b_wire import create, envd, envelope, envelopes

MIB = 1 << 20


def refused_with_body(port: int, head: str, body_bytes: int) -> int:
    """Sends `head` (announcing `body_bytes`), then that body, and returns the answer's status
    (0: none came)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    got = b""
    try:
        sock.sendall(head.encode())
        # An answer from the head alone comes at once; the body is sent all the same.
        if select.select([sock], [], [], 1.0)[0]:
            got = sock.recv(65536)
        chunk = b"x" * MIB
        sent = 0
        try:
            while sent < body_bytes:
                n = min(len(chunk), body_bytes - sent)
                sock.sendall(chunk[:n])
                sent += n
        except OSError:
            pass  # the daemon stopped reading and closed
        if not got:
            try:
                got = sock.recv(65536)
            except OSError:
                pass
    finally:
        sock.close()
    line = got.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 else 0


def test_unauthenticated_envd_bodies_are_refused_before_they_are_read(
        daemon_factory: Any) -> None:
    """40 connections, no credential, each with a 16 MiB body: every one is refused from its
    head (401) and the daemon buffers none of them."""
    d = daemon_factory()
    with d.client(key=None) as c:
        sb = create(c, API_KEY)
        # Warm: the routes have run once, so what follows measures bodies, not first use.
        assert c.post("/process.Process/List", json={}, headers=envd(sb)).status_code == 200
    idle = d.rss_kib()
    size = 16 * MIB
    heads = [
        # No credential and no sandbox, as in the report.
        "POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
        # A sandbox that exists, and no token or a wrong one.
        f"POST /process.Process/Start HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: {sb['sandboxID']}"
        "\r\nContent-Type: application/json\r\n",
        f"POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: "
        f"{sb['sandboxID']}\r\nX-Access-Token: sbt_admin_{'0' * 64}\r\n"
        "Content-Type: application/json\r\n",
        # An upload without a token.
        f"POST /files?path=a HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: {sb['sandboxID']}\r\n"
        "Content-Type: application/octet-stream\r\n",
    ]
    statuses: list[int] = []
    peak = [idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], d.rss_kib())
            time.sleep(0.02)

    def one(i: int) -> None:
        head = heads[i % len(heads)] + f"Content-Length: {size}\r\n\r\n"
        statuses.append(refused_with_body(d.port, head, size))

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    sampler.join()
    grown_mib = (peak[0] - idle) / 1024
    assert grown_mib < 32, f"RSS grew {grown_mib:.0f} MiB over idle ({idle // 1024} MiB)"
    assert statuses == [401] * 40, statuses
    # A signed URL's upload is judged before its body is read, and a GET takes none.
    with d.client(key=None) as c:
        r = c.post("/files", params={"path": "a", "signature": "v1_x"}, content=b"x" * MIB)
        assert r.status_code == 401, r.text
        r = c.request("GET", "/healthz", content=b"x" * 1024)
        assert r.status_code == 413, r.text


def test_a_bad_token_is_a_401_whether_or_not_the_sandbox_exists(daemon: Daemon) -> None:
    """Before a credential, nothing says whether a sandbox exists; after it, a gone sandbox is
    the edge's 502."""
    with daemon.client(key=None) as c:
        sb = create(c, API_KEY)
        gone = create(c, API_KEY)
        assert c.delete(f"/sandboxes/{gone['sandboxID']}",
                        headers={"X-API-KEY": API_KEY}).status_code == 204
        unknown = {"sandboxID": "sb_0000000000000000", "envdAccessToken": "x"}
        for who in (sb, gone, unknown):
            for token in ("", "x", f"sbt_admin_{'0' * 64}"):
                for method, path in (("POST", "/process.Process/List"),
                                     ("POST", "/filesystem.Filesystem/Stat"),
                                     ("GET", "/health"), ("GET", "/files?path=a")):
                    r = c.request(method, path, json={} if method == "POST" else None,
                                  headers=envd(who, token))
                    assert r.status_code == 401, (who["sandboxID"], token, path, r.text)
        # A sandbox's own token, once it is gone: the edge's 502.
        for method, path in (("POST", "/process.Process/List"), ("GET", "/health")):
            r = c.request(method, path, json={} if method == "POST" else None,
                          headers=envd(gone))
            assert r.status_code == 502 and "was not found" in r.json()["message"], r.text
        c.delete(f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": API_KEY})


def signature(path: str, operation: str, user: str, token: str) -> str:
    """The SDK's v1 signature (e2b.sandbox.signature.get_signature), without expiration."""
    digest = hashlib.sha256(f"{path}:{operation}:{user}:{token}".encode()).digest()
    return "v1_" + base64.b64encode(digest).decode().rstrip("=")


def test_a_signed_url_acts_as_the_user_it_was_signed_for(daemon: Daemon) -> None:
    with daemon.client(key=None) as c:
        sb = create(c, API_KEY)
        token = sb["envdAccessToken"]
        root = {**envd(sb), "Authorization": "Basic " + base64.b64encode(b"root:").decode()}
        r = c.post("/files", params={"path": "notes.txt"}, content=b"ROOT-ONLY",
                   headers={**root, "Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        r = c.post("/filesystem.Filesystem/Stat", json={"path": "/root/notes.txt"}, headers=root)
        assert r.status_code == 200 and r.json()["entry"]["path"] == "/root/notes.txt", r.text
        basic_root = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
        for operation, method in (("read", "GET"), ("write", "POST")):
            # Signed without a user (the SDK's default): the default user, whatever is added.
            params = {"path": "notes.txt", "signature": signature("notes.txt", operation, "",
                                                                  token)}
            r = c.request(method, "/files", params=params, headers=basic_root,
                          content=b"MINE" if method == "POST" else None)
            if method == "GET":
                assert r.status_code == 404 and "/home/user/notes.txt" in r.text, r.text
            else:
                assert r.status_code == 200, r.text
                assert r.json()[0]["path"] == "/home/user/notes.txt", r.text
        # The root file is as it was; a URL signed for root still opens it.
        params = {"path": "notes.txt", "username": "root",
                  "signature": signature("notes.txt", "read", "root", token)}
        r = c.get("/files", params=params)
        assert r.status_code == 200 and r.content == b"ROOT-ONLY", r.text
        c.delete(f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": API_KEY})


def test_a_revoked_keys_access_tokens_open_nothing(daemon_factory: Any, tmp_path: Any) -> None:
    d = daemon_factory(args=["--teardown-on-exit", "false"], data_dir=tmp_path / "data")
    with d.client() as admin, d.client(key=None) as c:
        key = tenant(admin, "leaky")
        spare = tenant(admin, "leaky-2")
        key_id = "key_" + key.split("_")[1]
        sb = create(c, key)
        by_key = sb["envdAccessToken"]
        by_admin = c.get(f"/sandboxes/{sb['sandboxID']}",
                         headers={"X-API-KEY": API_KEY}).json()["envdAccessToken"]
        assert by_key != by_admin
        for token in (by_key, by_admin):
            r = c.post("/process.Process/List", json={}, headers=envd(sb, token))
            assert r.status_code == 200, r.text
        # Another tenant's key is no holder of this sandbox's tokens.
        other = create(c, spare)
        assert c.post("/process.Process/List", json={},
                      headers=envd(sb, other["envdAccessToken"])).status_code == 401
        url = {"path": "a.txt", "signature": signature("a.txt", "write", "", by_key)}
        assert c.post("/files", params=url, content=b"a").status_code == 200
        # Both survive a restart.
        d.stop()
        d = daemon_factory(data_dir=tmp_path / "data")
    with d.client() as admin, d.client(key=None) as c:
        for token in (by_key, by_admin):
            r = c.post("/process.Process/List", json={}, headers=envd(sb, token))
            assert r.status_code == 200, r.text
        assert admin.delete(f"/v1/admin/tenants/leaky/keys/{key_id}").status_code == 204
        r = c.post("/process.Process/List", json={}, headers=envd(sb, by_key))
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated", r.text
        ran = c.post("/process.Process/Start",
                     content=envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "id"]}}),
                     headers={"Content-Type": "application/connect+json",
                              **envd(sb, by_key)})
        assert envelopes(ran.content)[-1][1]["error"]["code"] == "unauthenticated", ran.text
        assert c.post("/files", params=url, content=b"a").status_code == 401
        # The admin's token, and a new key's, still open it.
        assert c.post("/process.Process/List", json={},
                      headers=envd(sb, by_admin)).status_code == 200
        fresh = admin.post("/v1/admin/tenants/leaky/keys").json()["key"]
        again = c.post(f"/v2/sandboxes/{sb['sandboxID']}/connect", json={"timeout": 60},
                       headers={"X-API-KEY": fresh})
        assert again.status_code in (200, 201), again.text
        assert c.post("/process.Process/List", json={},
                      headers=envd(sb, again.json()["envdAccessToken"])).status_code == 200
        for s in (sb, other):
            c.delete(f"/sandboxes/{s['sandboxID']}", headers={"X-API-KEY": API_KEY})


def test_a_stream_opened_with_a_revoked_keys_token_ends(daemon_factory: Any) -> None:
    d = daemon_factory()
    with d.client() as admin, d.client(key=None) as c:
        key = tenant(admin, "streamer")
        sb = create(c, key)
        messages: list[Any] = []
        ended = threading.Event()

        def follow() -> None:
            with httpx.stream("POST", f"{d.url}/process.Process/Start", timeout=30,
                              content=envelope({"process": {
                                  "cmd": "/bin/bash",
                                  "args": ["-c", "while :; do echo t; sleep 0.2; done"]}}),
                              headers={"Content-Type": "application/connect+json",
                                       **envd(sb)}) as s:
                for chunk in s.iter_bytes():
                    messages.append(chunk)
            ended.set()

        threading.Thread(target=follow, daemon=True).start()
        deadline = time.monotonic() + 10
        while len(messages) < 3:
            assert time.monotonic() < deadline, "the stream never started"
            time.sleep(0.05)
        key_id = "key_" + key.split("_")[1]
        assert admin.delete(f"/v1/admin/tenants/streamer/keys/{key_id}").status_code == 204
        assert ended.wait(4), "the stream outlived its key"
        assert b"unauthenticated" in b"".join(messages)[-400:], messages[-2:]
        c.delete(f"/sandboxes/{sb['sandboxID']}", headers={"X-API-KEY": API_KEY})


def watcher(c: httpx.Client, sb: dict[str, Any]) -> httpx.Response:
    return c.post("/filesystem.Filesystem/CreateWatcher", json={"path": "/tmp"},
                  headers=envd(sb))


def test_one_tenants_watches_leave_the_others_theirs(daemon_factory: Any) -> None:
    """A tenant takes its share of the daemon's watches (16, or its quota), never all 64."""
    d = daemon_factory()
    with d.client() as admin, d.client(key=None) as c:
        mallory = tenant(admin, "mallory")
        alice = tenant(admin, "alice")
        taken = 0
        refusal = None
        for _ in range(8):
            sb = create(c, mallory)
            for _ in range(8):
                r = watcher(c, sb)
                if r.status_code == 200:
                    taken += 1
                else:
                    assert r.status_code == 429, r.text
                    refusal = r.json()
        assert taken == 16, taken
        assert refusal and "tenant 'mallory'" in refusal["message"], refusal
        # alice's own routes and E2B's both still get theirs.
        mine = create(c, alice)
        assert watcher(c, mine).status_code == 200
        with httpx.stream("GET", f"{d.url}/v1/sandboxes/{mine['sandboxID']}/files/watch",
                          params={"path": "/tmp"}, timeout=30,
                          headers={"Authorization": f"Bearer {alice}"}) as s:
            assert s.status_code == 200, s.read()
        # A tenant's quota sets its share.
        admin.patch("/v1/admin/tenants/alice", json={"quotas": {"watches": 2}}).raise_for_status()
        # The stream's watch is given back once the daemon sees its connection close.
        assert wait_until(lambda: watcher(c, mine).status_code == 200, 10)
        r = watcher(c, mine)
        assert r.status_code == 429 and "tenant 'alice' has 2" in r.json()["message"], r.text
