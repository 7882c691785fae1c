"""Flow control: a reader that waits holds its process back, so nothing is lost at any speed.

The client that starts a command and reads it waits by default (exec/stream, exec/ws, terminals);
a follower skips unless it asks to wait (`?flow=wait`). A waiting reader that loses its connection
keeps its place for the resume grace; one that stops reading is dropped after the stall limit.
Every test checks exact bytes: what was received, in order, plus what a `gap` names, is the output.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from helpers import API_KEY, Daemon, assert_error, create_sandbox, run, wait_until
from sse import ChunkedDecoder, RawSseConnection, SseEvent, SseParser, assert_contiguous

LINE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n"
# 1 GiB by default, as users stream it; SANDSTREAM_FLOW_BYTES makes the big tests smaller.
BIG = int(os.environ.get("SANDSTREAM_FLOW_BYTES", str(1 << 30)))


def text_cmd(n: int) -> str:
    """A command that prints `n` bytes of LINE repeated, as fast as it can."""
    return f"yes {LINE[:-1]} | head -c {n}"


def asan_env() -> dict[str, str]:
    """A small ASan quarantine, so VmRSS shows what the daemon itself holds."""
    base = os.environ.get("ASAN_OPTIONS", "")
    return {"ASAN_OPTIONS": f"{base}:quarantine_size_mb=8" if base else "quarantine_size_mb=8"}


class TextCheck:
    """Checks that stream text is LINE repeated, in order, with holes only where told."""

    def __init__(self) -> None:
        self.pos = 0
        self.received = 0
        self.skipped = 0

    def feed(self, chunk: str) -> None:
        start = self.pos % len(LINE)
        want = (LINE * (len(chunk) // len(LINE) + 2))[start:start + len(chunk)]
        assert chunk == want, f"output changed or out of order at offset {self.pos}"
        self.pos += len(chunk)
        self.received += len(chunk)

    def gap(self, n: int) -> None:
        self.pos += n
        self.skipped += n

    def events(self, events: list[SseEvent]) -> None:
        for e in events:
            if e.event == "stdout":
                self.feed(e.json()["chunk"])
            elif e.event == "gap":
                self.gap(e.json()["bytes"])


class MemorySampler:
    """Samples a daemon's memory (Daemon.memory_kib) in the background; `peak` is the highest
    seen."""

    def __init__(self, d: Daemon) -> None:
        self.d = d
        self.start = d.memory_kib()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.d.memory_kib())

    def growth_mib(self) -> float:
        self._stop.set()
        self._thread.join()
        return (self.peak - self.start) / 1024


def stream_headers(key: str | None = None, last_id: str | None = None) -> dict[str, str]:
    h = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
         "Accept": "text/event-stream"}
    if key:
        h["Idempotency-Key"] = key
    if last_id:
        h["Last-Event-ID"] = last_id
    return h


def exec_stream(d: Daemon, sb: str, body: dict[str, Any], key: str | None = None,
                last_id: str | None = None) -> RawSseConnection:
    conn = RawSseConnection(d.port, "POST", f"/v1/sandboxes/{sb}/exec/stream",
                            stream_headers(key, last_id), json.dumps(body).encode())
    assert conn.status == 200, conn.headers
    return conn


def follow(d: Daemon, sb: str, pid: str, query: str = "", last_id: str | None = None
           ) -> RawSseConnection:
    conn = RawSseConnection(d.port, "GET",
                            f"/v1/sandboxes/{sb}/processes/{pid}/logs?follow=1{query}",
                            stream_headers(last_id=last_id))
    assert conn.status == 200, conn.headers
    return conn


def drain(conn: RawSseConnection, check: TextCheck | None = None,
          limit_seconds: float = 120) -> list[SseEvent]:
    """Reads to the end of the stream; stdout text goes to `check` instead of being kept."""
    kept: list[SseEvent] = []
    for e in conn.events(limit_seconds=limit_seconds):
        if check is not None and e.event in ("stdout", "gap"):
            check.events([e])
            if e.event == "stdout":
                e = SseEvent(e.event, '{"chunk":""}', e.id, e.t)
        kept.append(e)
        if e.event in ("exit", "complete", "error"):
            break
    conn.close()
    return kept


def process(c: httpx.Client, sb: str, pid: str) -> dict[str, Any]:
    r = c.get(f"/v1/sandboxes/{sb}/processes/{pid}")
    assert r.status_code == 200, r.text
    return r.json()


def test_exec_stream_waits_by_default_every_byte_reaches_curl(daemon_factory: Any) -> None:
    """A fast producer read by `curl -N` at default settings: every byte, once, in order, no gap,
    and the daemon's memory bounded by its window, not by the output."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    d = daemon_factory(env=asan_env())
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        run(c, sb, cmd="echo warm")
        memory = MemorySampler(d)
        proc = subprocess.Popen(
            [curl, "-sN", "-H", f"Authorization: Bearer {API_KEY}", "-d",
             json.dumps({"cmd": text_cmd(BIG)}), f"{d.url}/v1/sandboxes/{sb}/exec/stream"],
            stdout=subprocess.PIPE)
        assert proc.stdout is not None
        parser = SseParser()
        check = TextCheck()
        names: dict[str, int] = {}
        exit_event: SseEvent | None = None
        while data := proc.stdout.read1(1 << 20):
            for item in parser.feed(data):
                if not isinstance(item, SseEvent):
                    continue
                names[item.event] = names.get(item.event, 0) + 1
                if item.event == "stdout":
                    check.feed(item.json()["chunk"])
                elif item.event == "exit":
                    exit_event = item
        assert proc.wait(30) == 0
        growth = memory.growth_mib()
    assert "gap" not in names and "error" not in names, names
    assert exit_event is not None and exit_event.json()["exit_code"] == 0, exit_event
    assert check.received == BIG and check.skipped == 0
    print(f"{BIG >> 20} MiB through curl; daemon memory +{growth:.1f} MiB; events {names}")
    assert growth < 48, f"daemon memory grew {growth:.1f} MiB streaming {BIG >> 20} MiB"


def test_slow_reader_gets_every_byte(daemon_factory: Any) -> None:
    """A reader taking about 1 MB/s from a producer that could go 100x faster holds the producer
    back (it is still running, far from done, after 3 s) and gets every byte."""
    d = daemon_factory(args=["--log-window-bytes", str(1 << 20)], env=asan_env())
    size = 48 << 20
    slow = 3_000_000
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        conn = exec_stream(d, sb, {"cmd": text_cmd(size)})
        check = TextCheck()
        memory = MemorySampler(d)
        t0 = time.monotonic()
        exit_event: SseEvent | None = None
        held: dict[str, Any] = {}
        pid = ""
        for e in conn.events(limit_seconds=60):
            if e.event == "start":
                pid = e.json()["process_id"]
            elif e.event == "stdout":
                check.feed(e.json()["chunk"])
                if check.received < slow:
                    ahead = check.received / 1_000_000 - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
                elif not held:
                    held = process(c, sb, pid)
            elif e.event in ("gap", "error"):
                raise AssertionError(f"unexpected {e.event}: {e.data}")
            elif e.event == "exit":
                exit_event = e
                break
        conn.close()
        growth = memory.growth_mib()
    assert exit_event is not None and exit_event.json()["exit_code"] == 0
    assert check.received == size
    # After 3 MB in 3 s: the window, the pipe and the sockets hold a few MiB more, not 48.
    assert held["status"] == "running" and held["stdout_bytes"] < 16 << 20, held
    assert growth < 24, f"daemon memory grew {growth:.1f} MiB"


def test_stalled_reader_holds_the_process_then_gets_every_byte(daemon_factory: Any) -> None:
    """A reader that reads nothing for 10 s: the process blocks in write(2) meanwhile (little
    is buffered anywhere), then the reader gets every byte and the exit."""
    window = 1 << 20
    size = 64 << 20
    d = daemon_factory(args=["--log-window-bytes", str(window)], env=asan_env())
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        run(c, sb, cmd="echo warm")
        memory = MemorySampler(d)
        conn = exec_stream(d, sb, {"cmd": text_cmd(size)})
        events = conn.events(limit_seconds=120)
        start = next(events)
        assert start.event == "start"
        pid = start.json()["process_id"]
        time.sleep(10)
        p = process(c, sb, pid)
        assert p["status"] == "running", p
        # The window, the pipe (1 MiB) and what the sockets hold: nowhere near the output.
        assert p["stdout_bytes"] < 8 << 20, p
        check = TextCheck()
        rest = [start]
        for e in events:
            if e.event == "stdout":
                check.feed(e.json()["chunk"])
            rest.append(e)
            if e.event in ("exit", "error"):
                break
        conn.close()
        growth = memory.growth_mib()
    names = {e.event for e in rest}
    assert "gap" not in names and rest[-1].event == "exit", rest[-3:]
    assert rest[-1].json()["exit_code"] == 0 and rest[-1].json()["reason"] == "exited"
    assert check.received == size
    assert_contiguous(rest)
    assert growth < 24, f"daemon memory grew {growth:.1f} MiB"


def test_follow_skips_unless_asked_to_wait(daemon_factory: Any) -> None:
    """A follower does not hold a background process back (it gets an exact gap); one with
    ?flow=wait does (it gets every byte)."""
    window = 1 << 20
    size = 32 << 20
    d = daemon_factory(args=["--log-window-bytes", str(window)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        for flow in ("", "&flow=wait"):
            # The pause lets the follower attach before the first byte.
            r = c.post(f"/v1/sandboxes/{sb}/processes",
                       json={"cmd": f"sleep 0.5; {text_cmd(size)}"})
            assert r.status_code == 201, r.text
            pid = r.json()["id"]
            conn = follow(d, sb, pid, flow)
            events = conn.events(limit_seconds=60)
            first = next(events)
            assert first.event == "start"
            time.sleep(3)
            p = process(c, sb, pid)
            check = TextCheck()
            got = [first]
            for e in events:
                got.append(e)
                if e.event in ("stdout", "gap"):
                    check.events([e])
                if e.event == "exit":
                    break
            conn.close()
            assert_contiguous(got)
            assert check.received + check.skipped == size
            if flow:
                assert p["status"] == "running", p
                assert check.skipped == 0 and check.received == size
            else:
                assert p["status"] == "exited", p
                assert check.skipped > 0 and check.received < size


def test_slowest_waiting_reader_sets_the_pace(daemon_factory: Any) -> None:
    """Two waiting followers: while one reads nothing the process is held; once it goes (and its
    grace passes) the other gets the rest, every byte."""
    d = daemon_factory(args=["--log-window-bytes", str(1 << 20), "--resume-grace-seconds", "1"])
    size = 16 << 20
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        r = c.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": f"sleep 0.5; {text_cmd(size)}"})
        pid = r.json()["id"]
        stalled = follow(d, sb, pid, "&flow=wait")
        reader = follow(d, sb, pid, "&flow=wait")
        check = TextCheck()
        events = reader.events(limit_seconds=60)
        got: list[SseEvent] = []
        while check.received < 1 << 20:
            e = next(events)
            got.append(e)
            check.events([e])
            if e.event == "exit":
                break
        time.sleep(1)
        # Held by the stalled follower (which only took what its socket buffers hold).
        p = process(c, sb, pid)
        assert p["status"] == "running" and p["stdout_bytes"] < 8 << 20, p
        stalled.close()
        for e in events:
            got.append(e)
            check.events([e])
            if e.event == "exit":
                break
        reader.close()
    assert got[-1].event == "exit" and check.received == size and check.skipped == 0
    assert_contiguous(got)


def cut_and_resume(d: Daemon, sb: str, body: dict[str, Any], key: str, stop_at: int,
                   check: TextCheck, last_id: str | None) -> tuple[str | None, bool]:
    """Reads until about `stop_at` bytes were received in all, then drops the connection
    abruptly. Returns the last event id seen and whether the exit was seen."""
    conn = exec_stream(d, sb, body, key, last_id)
    ended = False
    try:
        for e in conn.events(limit_seconds=60):
            if e.event in ("stdout", "gap"):
                check.events([e])
            if e.id is not None:
                last_id = e.id
            if e.event == "exit":
                assert e.json()["exit_code"] == 0, e
                ended = True
                break
            if check.pos >= stop_at:
                break
    finally:
        # Unread data in the socket makes close() a reset: as abrupt as a cut gets.
        conn.close()
    return last_id, ended


def test_resume_within_the_grace_gets_every_byte(daemon_factory: Any) -> None:
    """A waiting client cut off mid-stream resumes within the grace: nothing lost, nothing twice,
    however fast the producer."""
    d = daemon_factory()
    size = 64 << 20
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        body = {"cmd": text_cmd(size)}
        key = secrets.token_hex(8)
        check = TextCheck()
        last_id, ended = cut_and_resume(d, sb, body, key, 20 << 20, check, None)
        assert not ended
        time.sleep(2)
        last_id, ended = cut_and_resume(d, sb, body, key, size + 1, check, last_id)
        assert ended
    assert check.skipped == 0 and check.received == size


def test_resume_after_the_grace_gets_an_exact_gap(daemon_factory: Any) -> None:
    """Past the grace the process runs free; a late resume is told exactly what it missed."""
    d = daemon_factory(args=["--resume-grace-seconds", "1"])
    size = 64 << 20
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        body = {"cmd": text_cmd(size)}
        key = secrets.token_hex(8)
        check = TextCheck()
        last_id, _ = cut_and_resume(d, sb, body, key, 4 << 20, check, None)
        time.sleep(4)
        conn = exec_stream(d, sb, body, key, last_id)
        rest = drain(conn, check)
    assert rest[0].event == "gap", rest[:2]
    assert int(rest[0].json()["from_seq"]) == int(last_id or 0) + 1
    assert rest[-1].event == "exit"
    assert check.skipped > 0 and check.received + check.skipped == size


def test_chaos_random_cuts_inside_the_grace_then_one_outside(daemon_factory: Any) -> None:
    """Random cuts, each resumed within the grace: exact bytes. Then one resumed after it: an
    exact gap, and still every byte accounted for."""
    d = daemon_factory(args=["--resume-grace-seconds", "3"])
    size = 192 << 20
    rng = random.Random(int(os.environ.get("SANDSTREAM_CHAOS_SEED", "11")))
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        body = {"cmd": text_cmd(size)}
        key = secrets.token_hex(8)
        check = TextCheck()
        last_id: str | None = None
        cuts = sorted(rng.randrange(1 << 20, size * 2 // 3) for _ in range(6))
        for stop_at in cuts:
            last_id, ended = cut_and_resume(d, sb, body, key, stop_at, check, last_id)
            assert not ended
            time.sleep(rng.uniform(0, 1.5))
        assert check.skipped == 0, "a resume inside the grace lost bytes"
        time.sleep(5)
        conn = exec_stream(d, sb, body, key, last_id)
        drain(conn, check)
    assert check.skipped > 0, "the resume after the grace should have missed output"
    assert check.received + check.skipped == size


def test_stalled_waiting_reader_is_dropped_after_the_stall_limit(daemon_factory: Any) -> None:
    """A connected client that stops reading cannot hold a process forever: after the stall
    limit it becomes a skipping reader, the process finishes, and the reader sees a gap."""
    d = daemon_factory(args=["--log-window-bytes", str(1 << 20), "--reader-stall-seconds", "2"])
    size = 32 << 20
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        conn = exec_stream(d, sb, {"cmd": text_cmd(size)})
        events = conn.events(limit_seconds=60)
        start = next(events)
        pid = start.json()["process_id"]
        assert wait_until(lambda: process(c, sb, pid)["status"] == "exited", within=20), \
            "the stalled reader still holds the process"
        check = TextCheck()
        got = [start]
        for e in events:
            got.append(e)
            check.events([e])
            if e.event == "exit":
                break
        conn.close()
    assert "gap" in {e.event for e in got}
    assert got[-1].event == "exit" and got[-1].json()["reason"] == "exited"
    assert check.received + check.skipped == size


def test_time_held_back_is_not_idle(daemon_factory: Any) -> None:
    """idle_timeout_seconds counts time without output while the daemon reads; a process held
    back by a waiting reader is not idle."""
    d = daemon_factory(args=["--log-window-bytes", str(1 << 20)])
    size = 16 << 20
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        conn = exec_stream(d, sb, {"cmd": text_cmd(size), "idle_timeout_seconds": 1})
        events = conn.events(limit_seconds=60)
        next(events)
        time.sleep(3)
        check = TextCheck()
        got = drain_iter(events, check)
        conn.close()
    assert got[-1].event == "exit", got[-2:]
    assert got[-1].json()["reason"] == "exited", got[-1]
    assert check.received == size


def drain_iter(events: Iterator[SseEvent], check: TextCheck) -> list[SseEvent]:
    got: list[SseEvent] = []
    for e in events:
        got.append(e)
        check.events([e])
        if e.event in ("exit", "error"):
            break
    return got


def test_total_timeout_still_kills_a_held_process(daemon_factory: Any) -> None:
    """The total timeout keeps running while a waiting reader holds the process: it is killed
    on time, and the reader still gets what it wrote, then the exit with reason timeout."""
    d = daemon_factory(args=["--log-window-bytes", str(1 << 20)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        conn = exec_stream(d, sb, {"cmd": f"yes {LINE[:-1]}", "timeout_seconds": 2})
        events = conn.events(limit_seconds=60)
        pid = next(events).json()["process_id"]
        t0 = time.monotonic()
        assert wait_until(lambda: process(c, sb, pid)["status"] == "exited", within=15)
        assert time.monotonic() - t0 < 8
        p = process(c, sb, pid)
        check = TextCheck()
        got = drain_iter(events, check)
        conn.close()
    assert p["reason"] == "timeout", p
    assert got[-1].event == "exit" and got[-1].json()["reason"] == "timeout"
    assert "gap" not in {e.event for e in got}
    assert check.received == p["stdout_bytes"]


def ws_url(d: Daemon, path: str, **query: str) -> str:
    params = httpx.QueryParams({"access_token": API_KEY, **query})
    return d.url.replace("http://", "ws://") + path + "?" + str(params)


async def read_terminal(ws: Any) -> tuple[int, list[dict[str, Any]]]:
    """Reads a terminal of `a`s to its close: how many bytes, and the control messages."""
    n = 0
    controls: list[dict[str, Any]] = []
    try:
        while True:
            frame = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(frame, bytes):
                assert frame.count(b"a") == len(frame), frame[:80]
                n += len(frame)
            else:
                controls.append(json.loads(frame))
    except ConnectionClosed:
        pass
    return n, controls


def test_terminal_slow_client_loses_nothing(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """A terminal's output waits for its attached client (as ssh does): a client that sleeps
    3 s before reading still gets all 8,000,000 bytes, then the exit."""
    size = 8_000_000

    async def go() -> tuple[int, list[dict[str, Any]]]:
        url = ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/pty",
                     cmd=f"head -c {size} /dev/zero | tr '\\0' a")
        async with connect(url, max_size=None) as ws:
            await asyncio.sleep(3)
            return await read_terminal(ws)

    n, controls = asyncio.run(go())
    assert n == size
    assert [m["type"] for m in controls] == ["start", "exit"], controls
    assert controls[-1]["exit_code"] == 0


def test_terminal_skipping_client_is_told_what_it_missed(daemon: Daemon,
                                                         sandbox: dict[str, Any]) -> None:
    """A client that asked not to hold the terminal (?flow=skip) and fell behind gets `gap`
    messages naming the bytes it missed; received plus missed is the output."""
    size = 8_000_000

    async def go() -> tuple[int, list[dict[str, Any]]]:
        url = ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/pty", flow="skip",
                     cmd=f"head -c {size} /dev/zero | tr '\\0' a")
        async with connect(url, max_size=None, max_queue=1) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert first["type"] == "start"
            frame = await asyncio.wait_for(ws.recv(), 30)
            n = len(frame) if isinstance(frame, bytes) else 0
            await asyncio.sleep(3)
            rest, controls = await read_terminal(ws)
            return n + rest, [first, *controls]

    n, controls = asyncio.run(go())
    gaps = [m for m in controls if m["type"] == "gap"]
    assert gaps, controls
    missed = sum(g["bytes"] for g in gaps)
    assert n + missed == size, (n, missed)
    assert controls[-1]["type"] == "exit"


def test_exec_ws_slow_client_loses_nothing(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """A command over exec/ws waits for its client by default: every byte after a 3 s stall."""
    size = 16 << 20

    async def go() -> tuple[str, dict[str, Any]]:
        async with connect(ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/ws"),
                           max_size=None) as ws:
            await ws.send(json.dumps({"id": 1, "cmd": text_cmd(size)}))
            await asyncio.sleep(3)
            check = TextCheck()
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert "gap" not in msg and "error" not in msg, msg
                if msg.get("stream") == "stdout":
                    check.feed(msg["data"])
                if "exit" in msg:
                    return str(check.received), msg["exit"]

    received, exit_ = asyncio.run(go())
    assert int(received) == size and exit_["exit_code"] == 0


def test_follow_resumed_at_or_past_the_exit_is_204(client: httpx.Client,
                                                  sandbox: dict[str, Any]) -> None:
    """EventSource stops reconnecting on 204: a follower that has seen the exit gets one."""
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec", json={"cmd": "echo one; echo two"})
    pid = r.json()["process_id"]
    url = f"/v1/sandboxes/{sandbox['id']}/processes/{pid}/logs"
    with client.stream("GET", url, params={"follow": "1"}) as resp:
        events = [e for e in read_all(resp)]
    exit_id = events[-1].id
    assert events[-1].event == "exit" and exit_id is not None
    for headers, params in (({"Last-Event-ID": exit_id}, {"follow": "1"}),
                            ({}, {"follow": "1", "since": exit_id}),
                            ({}, {"follow": "1", "since": str(int(exit_id) + 5)})):
        r = client.get(url, params=params, headers=headers)
        assert r.status_code == 204, (params, r.status_code, r.text)
        assert r.content == b""
    with client.stream("GET", url, params={"follow": "1"},
                       headers={"Last-Event-ID": str(int(exit_id) - 1)}) as resp:
        assert resp.status_code == 200
        assert [e.event for e in read_all(resp)] == ["exit"]


def read_all(resp: httpx.Response) -> list[SseEvent]:
    parser = SseParser()
    out: list[SseEvent] = []
    for data in resp.iter_raw():
        out += [e for e in parser.feed(data) if isinstance(e, SseEvent)]
    return out


def raw_request(port: int, request: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(request)
    return s


def read_head(s: socket.socket) -> tuple[str, dict[str, str], bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        assert data, f"closed before the head: {buf!r}"
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
    return status, headers, rest


def test_sse_is_chunked_for_http11_and_close_delimited_for_http10(
        daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """HTTP/1.1: Transfer-Encoding: chunked, and the connection carries the next request once
    the stream has ended. HTTP/1.0: the body ends when the connection closes."""
    body = json.dumps({"cmd": "printf 'a\\nb\\n'; echo c >&2"}).encode()
    path = f"/v1/sandboxes/{sandbox['id']}/exec/stream"
    auth = f"Authorization: Bearer {API_KEY}\r\n".encode()

    s = raw_request(daemon.port, b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    status, headers, rest = read_head(s)
    assert status.startswith("HTTP/1.1 200"), status
    assert headers.get("transfer-encoding") == "chunked", headers
    assert "content-length" not in headers and headers.get("connection") != "close", headers
    decoder = ChunkedDecoder()
    parser = SseParser()
    events = [e for e in parser.feed(decoder.feed(rest)) if isinstance(e, SseEvent)]
    while not decoder.done:
        data = s.recv(65536)
        assert data, "closed inside the chunked body"
        events += [e for e in parser.feed(decoder.feed(data)) if isinstance(e, SseEvent)]
    assert [e.event for e in events][0] == "start" and events[-1].event == "exit"
    assert "".join(e.json()["chunk"] for e in events if e.event == "stdout") == "a\nb\n"
    # The same connection, another request.
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, _ = read_head(s)
    assert status.startswith("HTTP/1.1 200"), status
    s.close()

    s = raw_request(daemon.port, b"POST " + path.encode() + b" HTTP/1.0\r\n" + auth +
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    status, headers, rest = read_head(s)
    assert status.startswith("HTTP/1.1 200"), status
    assert "transfer-encoding" not in headers and headers.get("connection") == "close", headers
    data = rest
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    events = [e for e in SseParser().feed(data) if isinstance(e, SseEvent)]
    assert events[0].event == "start" and events[-1].event == "exit"


def test_a_bad_flow_is_a_clear_400(client: httpx.Client, daemon: Daemon,
                                   sandbox: dict[str, Any]) -> None:
    """`flow` takes "wait" or "skip"; anything else is refused before anything runs."""
    sb = sandbox["id"]
    r = client.post(f"/v1/sandboxes/{sb}/exec/stream", json={"cmd": "true", "flow": "fast"})
    assert_error(r, 400, "invalid_request")
    assert "flow" in r.json()["error"]["message"]
    r = client.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "true"})
    pid = r.json()["process_id"]
    r = client.get(f"/v1/sandboxes/{sb}/processes/{pid}/logs", params={"follow": "1", "flow": "x"})
    assert_error(r, 400, "invalid_request")
    r = client.get(f"/v1/sandboxes/{sb}/exec/pty", params={"flow": "x"},
                   headers={"Connection": "Upgrade", "Upgrade": "websocket",
                            "Sec-WebSocket-Version": "13",
                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert_error(r, 400, "invalid_request")


def test_memory_comes_back_after_a_large_window(daemon_factory: Any) -> None:
    """A process with a large window holds its output while it lives; once its sandbox is
    deleted the daemon's memory returns near where it started."""
    d = daemon_factory(args=["--log-window-max-bytes", str(1 << 30)], env=asan_env())
    size = 384 << 20
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        run(c, sb, cmd="echo warm")
        before = d.memory_kib()
        r = c.post(f"/v1/sandboxes/{sb}/processes",
                   json={"cmd": text_cmd(size), "log_window_bytes": 512 << 20})
        pid = r.json()["id"]
        assert wait_until(lambda: process(c, sb, pid)["status"] == "exited", within=60)
        held = d.memory_kib()
        assert (held - before) / 1024 > size / (1 << 20) / 2, (before, held)
        assert c.delete(f"/v1/sandboxes/{sb}").status_code in (200, 204)
        assert wait_until(lambda: (d.memory_kib() - before) / 1024 < 48, within=10), \
            f"{before} KiB before, {held} KiB holding, {d.memory_kib()} KiB after delete"
