"""A hostile or starved client cannot hurt another tenant or the host: connections are bounded,
bodies nobody may send are never buffered, stuck writes end, and the daemon stays healthy.

Costs are measured on the daemon itself: VmRSS and CPU time (utime + stime) from /proc.
"""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import API_KEY, Daemon, assert_error, create_sandbox, wait_until
from sse import RawSseConnection

UNKNOWN_STDIN = "/v1/sandboxes/sb_0000000000000000/processes/proc_0000000000000000/stdin"


def cpu_seconds(d: Daemon) -> float:
    """The daemon's user plus system CPU time so far."""
    stat = Path(f"/proc/{d.pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def asan_env() -> dict[str, str]:
    """A small ASan quarantine, so VmRSS shows what the daemon itself holds."""
    base = os.environ.get("ASAN_OPTIONS", "")
    return {"ASAN_OPTIONS": f"{base}:quarantine_size_mb=8" if base else "quarantine_size_mb=8"}


def read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Reads one HTTP/1.1 response with a Content-Length body from `s`."""
    f = s.makefile("rb")
    status = int(f.readline().split()[1])
    headers: dict[str, str] = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", "0")))
    return status, headers, body


def error_code(body: bytes) -> str:
    """The `error.code` of an error body."""
    code: str = json.loads(body)["error"]["code"]
    return code


def metric(d: Daemon, name: str) -> float:
    """One unlabelled value of /metrics."""
    with d.client() as c:
        text = c.get("/metrics").text
    m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


# ---- bodies ----

def test_unauthenticated_bodies_are_never_buffered(daemon_factory: Any) -> None:
    """200 unauthenticated 16 MiB stdin uploads, 50 at a time: each gets its 401 and the daemon
    neither buffers them (VmRSS) nor spends much on them (CPU)."""
    d = daemon_factory(env=asan_env())
    body = b"x" * (16 << 20)
    head = (f"POST {UNKNOWN_STDIN} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n").encode()

    def upload(_: int) -> int:
        with socket.create_connection(("127.0.0.1", d.port), timeout=30) as s:
            try:
                s.sendall(head + body)
            except OSError:
                pass  # the daemon may stop reading once it has answered; the answer is what counts
            status, _, answer = read_response(s)
            assert error_code(answer) == "unauthorized", answer
            return status

    assert httpx.get(f"{d.url}/healthz").status_code == 200
    rss0, cpu0 = d.rss_kib(), cpu_seconds(d)
    peak = rss0
    with ThreadPoolExecutor(50) as pool:
        futures = [pool.submit(upload, i) for i in range(200)]
        while not all(f.done() for f in futures):
            peak = max(peak, d.rss_kib())
            time.sleep(0.05)
        statuses = [f.result() for f in futures]
    cpu = cpu_seconds(d) - cpu0
    growth_mib = (peak - rss0) / 1024
    print(f"200 x 16 MiB unauthenticated: VmRSS +{growth_mib:.1f} MiB, CPU {cpu:.2f} s")
    assert statuses == [401] * 200
    # Buffered, 50 bodies at once would be 800 MiB.
    assert growth_mib < 64, f"daemon VmRSS grew {growth_mib:.1f} MiB"
    assert cpu < 10, f"daemon used {cpu:.2f} s of CPU"
    assert d.alive()


def test_oversized_chunked_upload_gets_413_and_curl_finishes(daemon_factory: Any,
                                                             tmp_path: Path) -> None:
    """curl streaming a chunked upload past max_file_bytes reads the 413: the daemon drains the
    rest for a while instead of resetting the connection under curl (EPIPE)."""
    d = daemon_factory(args=["--max-file-bytes", str(1 << 20)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    out = tmp_path / "answer"
    curl = subprocess.Popen(
        ["curl", "-sS", "-T", "-", "-H", "Transfer-Encoding: chunked",
         "-H", f"Authorization: Bearer {API_KEY}", "-o", str(out), "-w", "%{http_code}",
         f"{d.url}/v1/sandboxes/{sb}/files/content?path=/tmp/big"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert curl.stdin is not None

    def feed() -> None:
        try:
            for _ in range(64):
                curl.stdin.write(b"y" * (128 << 10))  # type: ignore[union-attr]
            curl.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass  # curl stopped reading its input once it had the answer

    feed()
    curl.wait(timeout=30)
    assert curl.stdout is not None and curl.stderr is not None
    stdout, stderr = curl.stdout.read(), curl.stderr.read()
    assert curl.returncode == 0, (curl.returncode, stderr)
    assert stdout == b"413", stdout
    assert error_code(out.read_bytes()) == "payload_too_large"
    with d.client() as c:
        r = c.get(f"/v1/sandboxes/{sb}/files/stat", params={"path": "/tmp/big"})
        assert_error(r, 404, "not_found")


def test_oversized_chunked_upload_can_be_sent_whole(daemon_factory: Any) -> None:
    """A client that writes its whole chunked upload before reading (as most HTTP libraries
    do) can finish writing it, then reads the 413: no EPIPE halfway."""
    d = daemon_factory(args=["--max-file-bytes", str(1 << 20)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    chunk = b"%x\r\n" % (64 << 10) + b"z" * (64 << 10) + b"\r\n"
    with socket.create_connection(("127.0.0.1", d.port), timeout=30) as s:
        s.sendall(f"PUT /v1/sandboxes/{sb}/files/content?path=/tmp/big HTTP/1.1\r\n"
                  f"Host: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
                  f"Transfer-Encoding: chunked\r\n\r\n".encode())
        s.sendall(chunk * 128 + b"0\r\n\r\n")  # 8 MiB; EPIPE here fails the test
        status, headers, body = read_response(s)
    assert status == 413 and error_code(body) == "payload_too_large", body
    assert headers.get("connection") == "close"


# ---- connections ----

def test_connections_past_the_limit_get_503(daemon_factory: Any) -> None:
    """1,100 connections against max_connections 1000: 1,000 event streams stay open, the 100
    others are answered 503 too_many_connections at once, memory and CPU stay bounded, and a
    freed slot serves again."""
    d = daemon_factory(args=["--max-connections", "1000"], env=asan_env())
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    time.sleep(0.5)  # the daemon sees that connection close
    rss0, cpu0 = d.rss_kib(), cpu_seconds(d)
    path = f"/v1/sandboxes/{sb}/events?follow=1&access_token={API_KEY}"
    streams: list[socket.socket] = []
    refused: list[socket.socket] = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            streams.append(s)
        for s in streams:
            assert s.recv(4096).startswith(b"HTTP/1.1 200"), "a stream within the limit failed"
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            refused.append(s)
        for s in refused:
            status, headers, body = read_response(s)
            assert status == 503 and error_code(body) == "too_many_connections", body
            assert headers.get("connection") == "close"
        growth_mib = (d.rss_kib() - rss0) / 1024
        cpu = cpu_seconds(d) - cpu0
        print(f"1,100 connections: VmRSS +{growth_mib:.1f} MiB, CPU {cpu:.2f} s")
        assert growth_mib < 128, f"daemon VmRSS grew {growth_mib:.1f} MiB for 1,000 streams"
        assert cpu < 10, f"daemon used {cpu:.2f} s of CPU"
        for s in streams[:10]:
            s.close()
        del streams[:10]

        def healthy() -> bool:
            try:
                return httpx.get(f"{d.url}/healthz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        assert wait_until(healthy, within=10), "no slot came free after closing streams"
    finally:
        for s in streams + refused:
            s.close()
    assert d.alive()


def test_open_files_limit_is_raised_at_start(daemon_factory: Any) -> None:
    """sandstreamd raises its soft RLIMIT_NOFILE to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 1024:
        pytest.skip(f"the hard open-files limit is {hard}: nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        d = daemon_factory()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    limits = Path(f"/proc/{d.pid}/limits").read_text()
    m = re.search(r"^Max open files\s+(\d+)\s+(\d+)", limits, re.MULTILINE)
    assert m and int(m.group(1)) == int(m.group(2)) == hard, m and m.group(0)


def test_accept_backs_off_when_out_of_descriptors(daemon_factory: Any) -> None:
    """With no descriptor left, accept fails (EMFILE): the daemon waits instead of spinning,
    logs it once, and serves the waiting connection once a descriptor is free again."""
    d = daemon_factory()
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
        # Read to the end: the daemon has closed its side, and freed the descriptor, by then.
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        while s.recv(65536):
            pass
    # The next descriptor is the lowest free number: a limit there makes it EMFILE.
    used = {int(fd) for fd in os.listdir(f"/proc/{d.pid}/fd")}
    lowest_free = min(set(range(len(used) + 1)) - used)
    _, hard = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        time.sleep(0.3)
        cpu0 = cpu_seconds(d)
        time.sleep(2)
        cpu = cpu_seconds(d) - cpu0
    finally:
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (hard, hard))
    with s:
        status, _, _ = read_response(s)
    assert status == 200
    assert cpu < 0.5, f"the daemon spun on accept: {cpu:.2f} s of CPU in 2 s"
    failures = [line for line in d.log_tail(200).splitlines() if "accept failed" in line]
    assert len(failures) == 1, failures


# ---- writes that make no progress ----

def exec_stream(d: Daemon, sb: str, body: dict[str, Any]) -> RawSseConnection:
    """POST exec/stream over a raw socket that reads only when asked."""
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    return RawSseConnection(d.port, "POST", f"/v1/sandboxes/{sb}/exec/stream", headers,
                            json.dumps(body).encode(), rcvbuf=4096)


def test_sse_client_that_never_reads_is_cut_after_the_write_timeout(daemon_factory: Any) -> None:
    """A client that requests a stream and never reads: once a write has made no progress for
    write_timeout_seconds the stream ends as gone, and after the resume grace its process runs
    free (rather than being held for reader_stall_seconds, then written to forever)."""
    d = daemon_factory(args=["--write-timeout-seconds", "1", "--resume-grace-seconds", "0.5",
                             "--log-window-bytes", str(1 << 20)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        conn = exec_stream(d, sb, {"cmd": "head -c 200000000 /dev/zero | tr '\\0' x"})
        try:
            assert conn.status == 200
            assert wait_until(lambda: metric(d, "sandstream_streams_open") == 0, within=20), \
                "the stream to a client that reads nothing is still open"

            def finished() -> bool:
                procs = c.get(f"/v1/sandboxes/{sb}/processes").json()["processes"]
                return bool(procs) and all(p["status"] == "exited" for p in procs)

            assert wait_until(finished, within=30), "the process is still held back"
        finally:
            conn.close()
    assert d.alive()


def test_slow_reader_is_not_cut(daemon_factory: Any) -> None:
    """A client reading 1 MB/s is slow, not gone: with a write timeout of 1 s it still gets
    every byte and the exit."""
    d = daemon_factory(args=["--write-timeout-seconds", "1"])
    size = 4_000_000
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    conn = exec_stream(d, sb, {"cmd": f"head -c {size} /dev/zero | tr '\\0' x"})
    received = 0
    last = ""
    try:
        t0 = time.monotonic()
        for e in conn.events(limit_seconds=60):
            if e.event == "stdout":
                received += len(e.json()["chunk"])
                # Pace the reads at about 1 MB/s.
                ahead = received / 1e6 - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            last = e.event
            if e.event in ("exit", "error"):
                break
    finally:
        conn.close()
    assert last == "exit" and received == size, (last, received)


# ---- WebSocket ----

def ws_connect(d: Daemon, path: str, rcvbuf: int | None = None) -> socket.socket:
    """A WebSocket handshake over a raw socket; returns the socket after the 101."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect(("127.0.0.1", d.port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"Authorization: Bearer {API_KEY}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        more = s.recv(1)
        assert more, head
        head += more
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def ws_frame(payload: bytes, opcode: int = 1) -> bytes:
    """A masked client frame."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_frames(s: socket.socket, limit_seconds: float) -> Iterator[tuple[int, bytes]]:
    """(opcode, payload) of the server's frames until the connection closes or time runs out."""
    deadline = time.monotonic() + limit_seconds
    buf = b""
    while time.monotonic() < deadline:
        while len(buf) >= 2:
            opcode, n = buf[0] & 0x0F, buf[1] & 0x7F
            at = 2
            if n == 126:
                if len(buf) < 4:
                    break
                n, at = struct.unpack("!H", buf[2:4])[0], 4
            elif n == 127:
                if len(buf) < 10:
                    break
                n, at = struct.unpack("!Q", buf[2:10])[0], 10
            if len(buf) < at + n:
                break
            yield opcode, buf[at:at + n]
            buf = buf[at + n:]
        try:
            data = s.recv(1 << 20)
        except (TimeoutError, ConnectionError):
            return
        if not data:
            return
        buf += data


def test_websocket_replies_a_client_does_not_read_are_bounded(daemon_factory: Any) -> None:
    """A terminal client that sends bad control messages and reads none of the errors they
    provoke: past a bound the daemon drops them and closes with 1008 (policy violation)."""
    d = daemon_factory(env=asan_env())
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    s = ws_connect(d, f"/v1/sandboxes/{sb}/exec/pty?cmd=sleep%20600", rcvbuf=4096)
    rss0 = d.rss_kib()
    with s:
        bad = ws_frame(b'{"type":"nope"}') * 1000
        for _ in range(200):
            s.sendall(bad)
        growth_mib = (d.rss_kib() - rss0) / 1024
        closes = [p for op, p in ws_frames(s, limit_seconds=30) if op == 8]
    assert closes, "no close frame: every reply stayed queued"
    assert struct.unpack("!H", closes[0][:2])[0] == 1008, closes[0]
    assert growth_mib < 64, f"daemon VmRSS grew {growth_mib:.1f} MiB"
    assert d.alive()


def test_websocket_client_that_never_reads_is_cut_after_the_write_timeout(
        daemon_factory: Any) -> None:
    """An exec/ws client that starts a loud command and never reads: its connection ends once
    a write has made no progress for write_timeout_seconds, even while the client keeps
    the connection otherwise alive."""
    d = daemon_factory(args=["--write-timeout-seconds", "1", "--keepalive-seconds", "600",
                             "--resume-grace-seconds", "0.5", "--log-window-bytes",
                             str(1 << 20)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    s = ws_connect(d, f"/v1/sandboxes/{sb}/exec/ws", rcvbuf=4096)
    with s:
        command = {"id": 1, "cmd": "head -c 200000000 /dev/zero | tr '\\0' x"}
        s.sendall(ws_frame(json.dumps(command).encode()))
        assert wait_until(lambda: metric(d, "sandstream_streams_open") == 0, within=20), \
            "the WebSocket to a client that reads nothing is still open"
    assert d.alive()
