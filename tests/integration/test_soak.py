"""Soak: thousands of mixed operations leave the daemon as they found it.

Buffered execs, exec/stream, background processes with a log follow, terminals over WebSocket,
stdin, file writes, sandboxes paused and resumed (by hand, by a request, or deleted while
paused), sandboxes created and deleted, from several clients at once; once on a quiet
machine and once beside CPU hogs (a short command that ends before the daemon looks at it is
what raced, and load makes that common). Once every sandbox is deleted, the daemon's descriptors
are back to the idle count exactly and its memory within a bound of where it was. And a finished
process keeps no descriptor while its sandbox lives on.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from helpers import API_KEY, Daemon, create_sandbox, run
from sse import read_events

WORKERS = 4
OPS_PER_RUN = 2500  # two runs: 5,000 operations
SETTLE_SECONDS = 30.0
# What the daemon may hold above its idle memory once everything is deleted, in MiB. The dev
# build's ASan allocator keeps freed chunks in its quarantine (8 MiB here, see `soak_daemon`)
# and in per-size free lists it seldom returns to the system; with that, a few MiB of drift
# remain after thousands of requests. A leak of the failure this guards against (whole process
# records: a memfd's pages, the record, its log and buffers) costs far more per thousand
# commands than this leaves room for.
MEMORY_SLACK_MIB = 16


def fd_kinds(pid: int) -> collections.Counter[str]:
    """The daemon's open descriptors by kind (pipe, socket, anon_inode:[pidfd], /memfd:..., file)."""
    kinds: collections.Counter[str] = collections.Counter()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue  # closed meanwhile
        if target.startswith(("pipe:", "socket:")):
            kinds[target.split(":", 1)[0]] += 1
        elif target.startswith("/memfd:"):
            kinds["memfd"] += 1
        elif target.startswith("anon_inode:"):
            kinds[target] += 1
        else:
            kinds["file"] += 1
    return kinds


def fd_count(pid: int) -> int:
    return sum(fd_kinds(pid).values())


def settled_fds(d: Daemon, hold: float = 1.0, within: float = 15.0) -> int:
    """The descriptor count once it has held still for `hold` seconds (or after `within`)."""
    last = fd_count(d.pid)
    since = time.monotonic()
    deadline = since + within
    while time.monotonic() - since < hold and time.monotonic() < deadline:
        time.sleep(0.1)
        now = fd_count(d.pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


def assert_back_to_idle(d: Daemon, idle_fds: collections.Counter[str], idle_kib: int) -> None:
    """Polls until the descriptors equal the idle ones and memory is within the slack."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        kinds = fd_kinds(d.pid)
        grown = (d.memory_kib() - idle_kib) / 1024
        if kinds == idle_fds and grown <= MEMORY_SLACK_MIB:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    more = kinds - idle_fds
    fewer = idle_fds - kinds
    assert kinds == idle_fds, (
        f"{sum(kinds.values())} descriptors {SETTLE_SECONDS:.0f} s after every sandbox was "
        f"deleted, {sum(idle_fds.values())} when idle: more {dict(more)}, fewer {dict(fewer)}")
    assert grown <= MEMORY_SLACK_MIB, (
        f"memory {grown:.1f} MiB above idle after every sandbox was deleted "
        f"(bound {MEMORY_SLACK_MIB} MiB)")


@contextlib.contextmanager
def cpu_hogs(n: int = 2) -> Iterator[None]:
    """`n` busy loops on the host for the duration, killed afterwards."""
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
            for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait(10)


class Worker:
    """One client doing a random mix of operations in a sandbox of its own (replaced now and
    then); every answer is checked."""

    def __init__(self, d: Daemon, ops: int, seed: int):
        self.d = d
        self.ops = ops
        self.rng = random.Random(seed)
        self.counts: collections.Counter[str] = collections.Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.d.client() as c:
                sb = create_sandbox(c)["id"]
                for i in range(self.ops):
                    sb = self.one(c, sb, i)
                assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204
        except BaseException as e:  # reported by the test's thread
            self.error = e

    def one(self, c: httpx.Client, sb: str, i: int) -> str:
        r = self.rng.random()
        if r < 0.45:
            self.counts["exec"] += 1
            out = run(c, sb, cmd="true" if i % 2 else f"echo {i}")
            assert out["exit_code"] == 0 and out["stdout"] == ("" if i % 2 else f"{i}\n"), out
        elif r < 0.55:
            self.counts["exec_stdin"] += 1
            out = run(c, sb, cmd="cat", stdin=f"in {i}")
            assert out["stdout"] == f"in {i}", out
        elif r < 0.68:
            self.counts["exec_stream"] += 1
            with c.stream("POST", f"/v1/sandboxes/{sb}/exec/stream",
                          json={"cmd": f"printf {i}; printf e >&2"}) as resp:
                assert resp.status_code == 200
                events = read_events(resp)
            assert events[-1].event == "exit", events[-3:]
        elif r < 0.76:
            self.counts["process_follow"] += 1
            p = c.post(f"/v1/sandboxes/{sb}/processes",
                       json={"cmd": f"echo bg {i}", "timeout_seconds": 60})
            assert p.status_code == 201, p.text
            url = f"/v1/sandboxes/{sb}/processes/{p.json()['id']}/logs"
            with c.stream("GET", url, params={"follow": "1"}) as resp:
                assert resp.status_code == 200
                events = read_events(resp)
            assert events[-1].event == "exit", events[-3:]
        elif r < 0.88:
            self.counts["file_write"] += 1
            path = f"/workspace/f{i % 7}.txt"
            w = c.put(f"/v1/sandboxes/{sb}/files/content", params={"path": path},
                      content=f"data {i}".encode())
            assert w.status_code in (200, 201, 204), w.text
            g = c.get(f"/v1/sandboxes/{sb}/files/content", params={"path": path})
            assert g.status_code == 200 and g.content == f"data {i}".encode(), g.text
        elif r < 0.94:
            self.counts["terminal"] += 1
            self.terminal(sb, i)
        elif r < 0.97:
            sb = self.pause(c, sb, i)
        elif r < 0.985:
            self.volume(c, i)
        else:
            self.counts["recreate"] += 1
            assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204
            sb = create_sandbox(c)["id"]
        return sb

    def volume(self, c: httpx.Client, i: int) -> None:
        """A volume made, written through its files, mounted by a sandbox that reads it, and
        all of it deleted: its mount, loop device and image go with it."""
        self.counts["volume"] += 1
        v = c.post("/v1/volumes", json={"name": f"soak-{self.rng.getrandbits(32):08x}",
                                        "size_mb": 16})
        assert v.status_code == 201, v.text
        vid = v.json()["id"]
        w = c.put(f"/v1/volumes/{vid}/files/content", params={"path": "/v"},
                  content=f"vol {i}".encode())
        assert w.status_code == 201, w.text
        sb = create_sandbox(c, volumes=[{"name": vid, "path": "/mnt/v"}])["id"]
        out = run(c, sb, cmd="cat /mnt/v/v")
        assert out["stdout"] == f"vol {i}", out
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204
        assert c.delete(f"/v1/volumes/{vid}").status_code == 204

    def pause(self, c: httpx.Client, sb: str, i: int) -> str:
        """Paused, then resumed by hand, woken by an exec, or deleted while paused."""
        p = c.post(f"/v1/sandboxes/{sb}/pause", json={"mode": "freeze"})
        assert p.status_code == 200 and p.json()["status"] == "paused", p.text
        how = i % 3
        if how == 0:
            self.counts["pause_resume"] += 1
            r = c.post(f"/v1/sandboxes/{sb}/resume")
            assert r.status_code == 200 and r.json()["status"] == "running", r.text
        elif how == 1:
            self.counts["pause_wake"] += 1
            out = run(c, sb, cmd=f"echo w{i}")
            assert out["stdout"] == f"w{i}\n", out
        else:
            self.counts["pause_delete"] += 1
            assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204
            sb = create_sandbox(c)["id"]
        return sb

    def terminal(self, sb: str, i: int) -> None:
        params = httpx.QueryParams({"access_token": API_KEY, "cmd": "sh"})
        url = self.d.url.replace("http://", "ws://") + f"/v1/sandboxes/{sb}/exec/pty?{params}"
        with connect(url, open_timeout=30) as ws:
            ws.send(f"echo t{i}x; exit 3\n".encode())
            out = b""
            exits = []
            with contextlib.suppress(Exception):  # the server's close ends the loop
                while True:
                    frame = ws.recv(timeout=30)
                    if isinstance(frame, bytes):
                        out += frame
                    else:
                        msg = json.loads(frame)
                        if msg.get("type") == "exit":
                            exits.append(msg)
        assert f"t{i}x".encode() in out, out[-300:]
        assert [e["exit_code"] for e in exits] == [3], exits


def soak(d: Daemon, ops: int) -> collections.Counter[str]:
    workers = [Worker(d, ops // WORKERS, seed=1000 * n + ops) for n in range(WORKERS)]
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts: collections.Counter[str] = collections.Counter()
    for w in workers:
        if w.error is not None:
            raise w.error
        counts += w.counts
    return counts


@pytest.fixture(scope="module")
def soak_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon of this module's own (no other test's descriptors), with a small ASan
    quarantine so that its memory shows what it holds, warmed up by a round of every kind of
    operation (what is made once, on first use, is not a leak)."""
    root = tmp_path_factory.mktemp("soak")
    base = os.environ.get("ASAN_OPTIONS", "")
    small = "quarantine_size_mb=8"
    d = Daemon(root / "data", [], {"ASAN_OPTIONS": f"{base}:{small}" if base else small},
               root / "sandstreamd.log")
    d.start()
    try:
        soak(d, 4 * WORKERS * 8)
        yield d
    finally:
        d.stop()


def idle(d: Daemon) -> tuple[collections.Counter[str], int]:
    settled_fds(d)
    return fd_kinds(d.pid), d.memory_kib()


@pytest.mark.timeout(240)
def test_soak_quiet(soak_daemon: Daemon) -> None:
    """Thousands of mixed operations, then every sandbox deleted: descriptors back to the
    idle count exactly, memory within the slack."""
    idle_fds, idle_kib = idle(soak_daemon)
    counts = soak(soak_daemon, OPS_PER_RUN)
    assert counts["exec"] > OPS_PER_RUN // 4, counts
    assert min(counts["pause_resume"], counts["pause_wake"], counts["pause_delete"]) > 0, counts
    assert_back_to_idle(soak_daemon, idle_fds, idle_kib)


@pytest.mark.timeout(300)
def test_soak_beside_cpu_hogs(soak_daemon: Daemon) -> None:
    """The same beside two busy loops: short commands end before the daemon gets to them."""
    idle_fds, idle_kib = idle(soak_daemon)
    with cpu_hogs():
        soak(soak_daemon, OPS_PER_RUN)
    assert_back_to_idle(soak_daemon, idle_fds, idle_kib)


@pytest.mark.timeout(120)
def test_a_finished_process_holds_no_descriptor(soak_daemon: Daemon) -> None:
    """Finished processes are retained (their exit and output tail), their descriptors are not:
    a hundred of them in a live sandbox leave the daemon's descriptor count where one did."""
    d = soak_daemon
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        try:
            run(c, sb, cmd="echo first")
            one = settled_fds(d)
            for i in range(100):
                out = run(c, sb, cmd=f"echo {i}; echo err >&2")
                assert out["stdout"] == f"{i}\n" and out["stderr"] == "err\n", out
            for _ in range(10):
                p = c.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": "echo bg"})
                assert p.status_code == 201, p.text
                w = c.get(f"/v1/sandboxes/{sb}/processes/{p.json()['id']}/wait")
                assert w.status_code == 200 and w.json()["status"] == "exited", w.text
            assert settled_fds(d) <= one + 2, fd_kinds(d.pid)
            # The retained ones still answer with their output.
            listed = c.get(f"/v1/sandboxes/{sb}/processes", params={"status": "exited"}).json()
            assert len(listed["processes"]) >= 100, len(listed["processes"])
            last = listed["processes"][-1]["id"]
            logs = c.get(f"/v1/sandboxes/{sb}/processes/{last}/logs").json()
            assert logs["stdout"] == "bg\n", logs
        finally:
            c.delete(f"/v1/sandboxes/{sb}")
