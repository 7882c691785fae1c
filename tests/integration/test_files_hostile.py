"""The files API against a hostile sandbox: a write lease, a FIFO, a storm of directories under a
watch, too many watches, and file names built to split or smuggle response headers. None of it
may hold the daemon's I/O thread or reach another tenant."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
import time
import urllib.parse
from typing import Any

import httpx
import pytest

from helpers import (API_KEY, Daemon, assert_error, create_sandbox, run, sandbox_memory_bytes,
                     wait_until)

# How long another tenant's request may take while a sandbox misbehaves: well above a loaded
# sanitizer build's worst turn, well below the seconds a held I/O thread would take.
RESPONSIVE_SECONDS = 0.5
WATCHES_PER_SANDBOX = 8


def files(sb: dict[str, Any], suffix: str = "") -> str:
    """The files route of a sandbox."""
    return f"/v1/sandboxes/{sb['id']}/files{suffix}"


def start(c: httpx.Client, sb: dict[str, Any], cmd: str) -> str:
    """Starts a background process; returns its id."""
    r = c.post(f"/v1/sandboxes/{sb['id']}/processes", json={"cmd": cmd})
    assert r.status_code == 201, r.text
    pid: str = r.json()["id"]
    return pid


def wait_for_file(c: httpx.Client, sb: dict[str, Any], path: str, within: float = 20.0) -> None:
    """Polls stat until `path` exists inside the sandbox."""
    deadline = time.monotonic() + within
    while c.get(files(sb, "/stat"), params={"path": path}).status_code != 200:
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def timed(fn: Any) -> tuple[float, Any]:
    """Calls fn(); returns (seconds taken, its result)."""
    t0 = time.monotonic()
    result = fn()
    return time.monotonic() - t0, result


def assert_others_answer(c: httpx.Client, other: dict[str, Any]) -> None:
    """/healthz and an exec in another sandbox each answer within RESPONSIVE_SECONDS."""
    took, r = timed(lambda: c.get("/healthz"))
    assert r.status_code == 200 and took < RESPONSIVE_SECONDS, f"/healthz took {took:.3f}s"
    took, res = timed(lambda: run(c, other["id"], cmd="echo hi"))
    assert res["stdout"] == "hi\n" and took < RESPONSIVE_SECONDS, f"exec took {took:.3f}s"


LEASE_HOLDER = """
import fcntl, os, signal, time
signal.signal(signal.SIGIO, signal.SIG_IGN)  # a lease break asks politely; this one never yields
fd = os.open('/workspace/leased.txt', os.O_RDONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
open('/workspace/leased.ready', 'w').close()
time.sleep(600)
"""


def test_leased_file_does_not_stall_the_daemon(client: httpx.Client) -> None:
    """A write lease held inside a sandbox (and never given up) would block the daemon's open()
    for the kernel's lease-break time: the download answers at once, and others are served."""
    sb, other = create_sandbox(client), create_sandbox(client)
    try:
        assert client.put(files(sb, "/content"), params={"path": "/workspace/leased.txt"},
                          content=b"mine").status_code == 201
        run(client, sb["id"], cmd=f"cat > /workspace/hold.py <<'EOF'\n{LEASE_HOLDER}\nEOF")
        start(client, sb, "python3 /workspace/hold.py")
        wait_for_file(client, sb, "/workspace/leased.ready")

        result: dict[str, Any] = {}

        def download() -> None:
            with httpx.Client(base_url=str(client.base_url), headers=client.headers, timeout=60) as c:
                result["took"], result["response"] = timed(
                    lambda: c.get(files(sb, "/content"), params={"path": "/workspace/leased.txt"}))

        t = threading.Thread(target=download, daemon=True)
        t.start()
        time.sleep(0.1)  # the download is under way (or, fixed, already answered)
        assert_others_answer(client, other)
        t.join(5)
        assert not t.is_alive(), "the download of a leased file hangs"
        r = result["response"]
        err = assert_error(r, 409, "conflict")
        assert "lease" in err["message"] and "/workspace/leased.txt" in err["message"], err
        # Writing it is refused the same way, without waiting.
        took, w = timed(lambda: client.put(files(sb, "/content"), params={"path": "/workspace/leased.txt"},
                                           content=b"theirs"))
        assert_error(w, 409, "conflict")
        assert took < 2, took
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
        client.delete(f"/v1/sandboxes/{other['id']}")


def test_fifo_and_device_are_refused(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A FIFO (which would block an open or read forever) or a device is not a file to serve."""
    run(client, sandbox["id"], cmd="mkfifo /workspace/pipe")
    for path in ("/workspace/pipe", "/dev/zero", "/dev/null"):
        took, r = timed(lambda: client.get(files(sandbox, "/content"), params={"path": path}))
        err = assert_error(r, 400, "invalid_request")
        assert "not a regular file" in err["message"] and took < 2, (err, took)
    took, r = timed(lambda: client.put(files(sandbox, "/content"), params={"path": "/workspace/pipe"},
                                       content=b"x"))
    err = assert_error(r, 400, "invalid_request")
    assert "not a regular file" in err["message"] and took < 2, (err, took)


STORM = """
import os
os.makedirs('/workspace/away/big', exist_ok=True)
for i in range(60000):
    os.close(os.open(f'/workspace/away/big/f{i}', os.O_CREAT | os.O_WRONLY, 0o644))
for i in range(200):
    os.mkdir(f'/workspace/away/big/d{i}')
open('/workspace/storm.ready', 'w').close()
while True:
    os.rename('/workspace/away/big', '/workspace/w/big')
    os.rename('/workspace/w/big', '/workspace/away/big')
    with open('/workspace/w/churn', 'w'):
        pass
    os.unlink('/workspace/w/churn')
"""


@pytest.mark.timeout(120)
def test_watch_storm_does_not_hold_the_daemon(client: httpx.Client) -> None:
    """A sandbox that keeps moving a directory of 60,000 entries in and out of a recursive watch
    (each move-in a new subtree to watch) and churns files: other tenants are still served."""
    sb, other = create_sandbox(client), create_sandbox(client)
    try:
        run(client, sb["id"], cmd="mkdir -p /workspace/w")
        run(client, sb["id"], cmd=f"cat > /workspace/storm.py <<'EOF'\n{STORM}\nEOF")
        seen = {"events": 0}
        ready = threading.Event()
        stop = threading.Event()

        def follow() -> None:
            with httpx.Client(base_url=str(client.base_url), headers=client.headers, timeout=120) as c:
                with c.stream("GET", files(sb, "/watch"), params={"path": "/workspace/w"}) as r:
                    assert r.status_code == 200
                    for line in r.iter_lines():
                        if line == "event: ready":
                            ready.set()
                        elif line.startswith("event: "):
                            seen["events"] += 1
                        if stop.is_set():
                            return

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        assert ready.wait(10)
        proc = start(client, sb, "python3 /workspace/storm.py")
        wait_for_file(client, sb, "/workspace/storm.ready", within=60)
        worst = 0.0
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            took, r = timed(lambda: client.get("/healthz"))
            assert r.status_code == 200
            worst = max(worst, took)
            time.sleep(0.02)
        assert worst < RESPONSIVE_SECONDS, f"/healthz took up to {worst:.3f}s during the storm"
        assert_others_answer(client, other)
        assert seen["events"] > 0
        client.post(f"/v1/sandboxes/{sb['id']}/processes/{proc}/kill")
        stop.set()
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
        client.delete(f"/v1/sandboxes/{other['id']}")


def test_watches_per_sandbox_are_capped(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Each watch holds one of the host's inotify instances (a per-uid kernel pool): a sandbox
    gets a bounded number, the next is 429 naming the limit, and a closed one is given back."""
    run(client, sandbox["id"], cmd="mkdir -p /workspace/w")
    with contextlib.ExitStack() as stack:
        for _ in range(WATCHES_PER_SANDBOX):
            r = stack.enter_context(client.stream("GET", files(sandbox, "/watch"),
                                                  params={"path": "/workspace/w"}))
            assert r.status_code == 200
        with client.stream("GET", files(sandbox, "/watch"), params={"path": "/workspace/w"}) as r:
            assert r.status_code == 429, "a watch beyond the limit was opened"
            r.read()
        err = assert_error(r, 429, "quota_exceeded")
        assert str(WATCHES_PER_SANDBOX) in err["message"] and "watch" in err["message"], err
        other = create_sandbox(client)
        try:
            run(client, other["id"], cmd="mkdir -p /workspace/w")
            with client.stream("GET", files(other, "/watch"), params={"path": "/workspace/w"}) as r:
                assert r.status_code == 200  # another sandbox's budget is its own
        finally:
            client.delete(f"/v1/sandboxes/{other['id']}")
    # Closed streams give their watches back (the daemon notices the client leaving).
    deadline = time.monotonic() + 10
    while True:
        with client.stream("GET", files(sandbox, "/watch"), params={"path": "/workspace/w"}) as r:
            if r.status_code == 200:
                break
        assert time.monotonic() < deadline, "closed watches were never given back"
        time.sleep(0.05)


def raw_get(d: Daemon, target: str) -> tuple[bytes, bytes]:
    """GET over a plain socket: the header block exactly as sent, and the body."""
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def header_lines(head: bytes) -> dict[str, str]:
    """The header block's fields by lower-case name; asserts every line is well formed."""
    fields: dict[str, str] = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        assert sep and name and name.strip() == name, f"malformed header line {line!r}"
        assert all(32 <= b < 127 or b == 9 for b in value), f"non-ASCII or control bytes in {line!r}"
        fields[name.decode().lower()] = value.decode().strip()
    return fields


def test_download_headers_are_never_raw_names(daemon: Daemon, client: httpx.Client,
                                              sandbox: dict[str, Any]) -> None:
    """A name with CR/LF, quotes and non-ASCII downloads with a well-formed Content-Disposition
    (an ASCII fallback and RFC 5987 `filename*`) and no header of its own making."""
    name = 'evil\r\nX-Injected: yes\r\n"q" na\u00efve;\\%.txt'
    path = "/workspace/" + name
    r = client.put(files(sandbox, "/content"), params={"path": path}, content=b"payload")
    assert r.status_code == 201, r.text
    query = urllib.parse.urlencode({"path": path})
    head, body = raw_get(daemon, f"{files(sandbox, '/content')}?{query}")
    fields = header_lines(head)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert "x-injected" not in fields, head
    assert body == b"payload"
    disposition = fields["content-disposition"]
    assert disposition == (
        'inline; filename="evil__X-Injected: yes___q_ na_ve;__.txt"; '
        "filename*=UTF-8''evil__X-Injected%3A%20yes__%22q%22%20na%C3%AFve%3B%5C%25.txt"), disposition
    assert urllib.parse.unquote(fields["x-file-path"]) == path
    assert fields["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("name,content_type", [
    ("page.html", "text/html"), ("page.HTM", "text/html"), ("pic.svg", "image/svg+xml"),
    ("data.xml", "application/xml"), ("app.js", "text/javascript"), ("doc.pdf", "application/pdf"),
    ("blob", "application/octet-stream"),
])
def test_active_content_is_an_attachment(client: httpx.Client, sandbox: dict[str, Any],
                                         name: str, content_type: str) -> None:
    """Content a browser would run (HTML, SVG, XML, scripts, PDF) never renders on the API's
    origin: an attachment, not sniffed, under a CSP that allows nothing."""
    path = "/workspace/" + name
    doc = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(document.cookie)</script></svg>"
    assert client.put(files(sandbox, "/content"), params={"path": path}, content=doc).status_code == 201
    r = client.get(files(sandbox, "/content"), params={"path": path})
    assert r.status_code == 200 and r.content == doc
    assert r.headers["content-type"].startswith(content_type), r.headers
    assert r.headers["content-disposition"].startswith("attachment; "), r.headers
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["content-security-policy"] == "default-src 'none'; sandbox"


MIB = 1 << 20


def test_uploads_are_charged_to_the_sandbox(daemon: Daemon, client: httpx.Client) -> None:
    """The pages an upload fills in the sandbox's tmpfs count against the sandbox's memory, not
    the daemon's: they are written by a writer in the sandbox's cgroups. Deleting the file gives
    them back."""
    sb = create_sandbox(client, limits={"memory_mb": 512, "disk_mb": 256})
    before = sandbox_memory_bytes(daemon, sb["id"])
    data = bytes(range(256)) * (64 * MIB // 256)
    r = client.put(files(sb, "/content"), params={"path": "/tmp/big"}, content=data)
    assert r.status_code == 201, r.text
    assert r.json()["size"] == len(data)
    charged = sandbox_memory_bytes(daemon, sb["id"]) - before
    assert charged >= 60 * MIB, f"the sandbox was charged {charged / MIB:.1f} MiB for 64 MiB"
    assert run(client, sb["id"], cmd="md5sum < /tmp/big")["stdout"].split()[0] == \
        hashlib.md5(data).hexdigest()
    assert client.delete(files(sb), params={"path": "/tmp/big"}).status_code == 204
    assert sandbox_memory_bytes(daemon, sb["id"]) - before < 8 * MIB


def test_an_upload_past_the_disk_is_413_and_leaves_nothing(client: httpx.Client) -> None:
    """A writer that fills the sandbox's disk stops with ENOSPC: the client gets 413 saying so,
    and the half-written new file is gone."""
    sb = create_sandbox(client, limits={"memory_mb": 256, "disk_mb": 32})
    r = client.put(files(sb, "/content"), params={"path": "/tmp/too-big"}, content=b"x" * (48 * MIB))
    err = assert_error(r, 413, "payload_too_large")
    assert "disk is full" in err["message"], err
    assert client.get(files(sb, "/stat"), params={"path": "/tmp/too-big"}).status_code == 404
    # The sandbox is usable, and its disk is free again.
    assert client.put(files(sb, "/content"), params={"path": "/tmp/ok"},
                      content=b"y" * (8 * MIB)).status_code == 201


def test_uploads_work_at_the_pids_limit(client: httpx.Client) -> None:
    """A sandbox with no room for a writer process (every pid taken) still takes uploads: the
    daemon writes them, within the sandbox's disk limit."""
    sb = create_sandbox(client, limits={"pids": 8})
    hog = ("import os, time\n"
           "while True:\n"
           "    try:\n"
           "        if os.fork() == 0:\n"
           "            time.sleep(1000)\n"
           "    except OSError:\n"
           "        time.sleep(0.01)\n")
    r = client.post(f"/v1/sandboxes/{sb['id']}/processes", json={"argv": ["python3", "-c", hog]})
    assert r.status_code == 201, r.text
    exec_refused = lambda: client.post(f"/v1/sandboxes/{sb['id']}/exec",  # noqa: E731
                                       json={"cmd": "true"}).status_code == 429
    assert wait_until(exec_refused, 10), "the sandbox never reached its pids limit"
    r = client.put(files(sb, "/content"), params={"path": "/tmp/at-limit"}, content=b"z" * MIB)
    assert r.status_code == 201, r.text
    assert r.json()["size"] == MIB


def test_deleting_the_sandbox_ends_an_upload_in_flight(daemon: Daemon) -> None:
    """An upload whose sandbox is deleted under it ends with an error at once; nothing hangs."""
    with daemon.client() as c:
        sb = create_sandbox(c)
    gate = threading.Event()

    def body() -> Any:
        yield b"a" * MIB
        gate.set()
        for _ in range(1200):
            time.sleep(0.05)
            yield b"b" * (64 * 1024)

    result: dict[str, Any] = {}

    def upload() -> None:
        with daemon.client(timeout=30) as c:
            try:
                result["response"] = c.put(files(sb, "/content"), params={"path": "/tmp/slow"},
                                           content=body())
            except httpx.HTTPError as e:
                result["error"] = e

    t = threading.Thread(target=upload)
    t.start()
    assert gate.wait(10)
    time.sleep(0.2)
    with daemon.client() as c:
        assert c.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
    t.join(15)
    assert not t.is_alive(), "the upload never ended"
    if "response" in result:
        assert result["response"].status_code in (404, 409), result["response"].text

