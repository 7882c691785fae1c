"""Pausing a sandbox with mode "checkpoint": CRIU writes its whole process tree (pids, memory,
pipes and what they hold, terminals) and its writable filesystem to disk, and its processes end;
a resume restores them with the same pids, and a log stream open across the pause goes on with
the next line. Any request for the sandbox resumes it first, auto_pause may checkpoint, a
checkpointed sandbox outlives a SIGKILLed daemon, and what cannot be checkpointed (volumes,
network "egress", an overlay root) is refused with 501 and runs on.

Everything runs against the real daemon and the real CRIU; effects are checked from outside
(the host's process table, the log stream, what the sandbox's processes answer)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import helpers
from helpers import (API_KEY, Daemon, assert_error, create_sandbox, pgrep, resume, run,
                     wait_no_process, wait_until)
from sse import SseEvent, iter_sse
from websockets.asyncio.client import ClientConnection, connect

CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")
if not os.access(CRIU, os.X_OK):
    pytest.skip(f"CRIU is not installed at {CRIU} (scripts/install-criu builds it); "
                "checkpoints cannot be tested", allow_module_level=True)

KEEP = ["--teardown-on-exit", "false"]
COUNTER = "i=0; while true; do echo $i; i=$((i+1)); sleep 0.1; done"


def pause(c: httpx.Client, sb: str, mode: str = "checkpoint") -> dict[str, Any]:
    return helpers.pause(c, sb, mode=mode)


def get(c: httpx.Client, sb: str) -> dict[str, Any]:
    r = c.get(f"/v1/sandboxes/{sb}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def start(c: httpx.Client, sb: str, **body: Any) -> dict[str, Any]:
    r = c.post(f"/v1/sandboxes/{sb}/processes", json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def process(c: httpx.Client, sb: str, pid: str) -> dict[str, Any]:
    r = c.get(f"/v1/sandboxes/{sb}/processes/{pid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def auto_resumes(d: Daemon) -> float:
    text = httpx.get(f"{d.url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    for line in text.splitlines():
        if line.startswith("sandstream_auto_resumes_total "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no sandstream_auto_resumes_total in the metrics")


def assert_paused_by_checkpoint(got: dict[str, Any]) -> None:
    assert got["status"] == "paused" and got["pause_mode"] == "checkpoint", got
    assert got["paused_at"] is not None, got


def assert_running(got: dict[str, Any]) -> None:
    assert got["status"] == "running" and got["pause_mode"] is None, got
    assert got["paused_at"] is None, got


def cmdline_inside(c: httpx.Client, sb: str, pid: int) -> str:
    """The command line of the sandbox's own process `pid`, read inside it ("" if none)."""
    out = run(c, sb, cmd=f"tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null || true")
    return str(out["stdout"])


class Stream:
    """A process's log stream (follow) read on a thread: the counter's numbers in order, and
    every event id, so a test can check it across a checkpoint."""

    def __init__(self, d: Daemon, sb: str, pid: str, last_event_id: int | None = None) -> None:
        self.events: queue.Queue[SseEvent] = queue.Queue()
        self.ids: list[int] = []
        self.numbers: list[int] = []
        self.status = 0
        self.ended = threading.Event()
        self._text = ""
        self._client = d.client(timeout=120)
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        self._thread = threading.Thread(target=self._read, args=(sb, pid, headers), daemon=True)
        self._thread.start()

    def _read(self, sb: str, pid: str, headers: dict[str, str]) -> None:
        try:
            with self._client.stream("GET", f"/v1/sandboxes/{sb}/processes/{pid}/logs",
                                     params={"follow": "1"}, headers=headers) as r:
                self.status = r.status_code
                for e in iter_sse(r):
                    assert isinstance(e, SseEvent)
                    self.events.put(e)
        except httpx.HTTPError:
            pass
        finally:
            self.ended.set()

    def read(self, within: float, until: int | None = None) -> list[int]:
        """Reads what comes within `within` seconds (or until `until` is printed); returns the
        numbers read now."""
        before = len(self.numbers)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if until is not None and self.numbers and self.numbers[-1] >= until:
                break
            try:
                e = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if e.id is not None:
                self.ids.append(int(e.id))
            assert e.event in ("start", "stdout", "stderr"), (e.event, e.data)
            if e.event != "stdout":
                continue
            self._text += e.json()["chunk"]
            *lines, self._text = self._text.split("\n")
            self.numbers += [int(n) for n in lines]
        return self.numbers[before:]

    def assert_continuous(self) -> None:
        """Every number from 0 once, in order; every event id once, in order."""
        n = self.numbers
        assert n and n == list(range(len(n))), f"numbers not consecutive from 0: {n}"
        assert self.ids == list(range(self.ids[0], self.ids[0] + len(self.ids))), self.ids

    def close(self) -> None:
        self._client.close()


@contextlib.contextmanager
def sandbox_of(c: httpx.Client, **body: Any) -> Iterator[dict[str, Any]]:
    """A sandbox made with `body`, deleted afterwards."""
    sb = create_sandbox(c, **body)
    try:
        yield sb
    finally:
        with contextlib.suppress(httpx.HTTPError):
            c.delete(f"/v1/sandboxes/{sb['id']}")


def test_a_checkpoint_ends_the_processes_and_a_resume_brings_them_back_mid_stream(
        daemon: Daemon, client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    sb = sandbox["id"]
    counter = start(client, sb, cmd=f"{COUNTER}; : {marker}")
    stream = Stream(daemon, sb, counter["id"])
    try:
        assert stream.read(5, until=10)[:3] == [0, 1, 2], stream.numbers
        host = pgrep(marker)
        assert host, "the counter runs on the host"
        paused = pause(client, sb)
        assert_paused_by_checkpoint(paused)
        assert_paused_by_checkpoint(get(client, sb))
        # Its processes are ended, not frozen: none of them is left on the host.
        assert wait_no_process(marker, 5) == [], "a checkpointed sandbox's process still runs"
        # Nothing comes while it is paused, and the stream stays open.
        stream.read(0.5)
        assert stream.read(1.5) == [], "output while checkpointed"
        assert not stream.ended.is_set(), "the log stream ended at the checkpoint"
        assert stream.status == 200
        got = get(client, sb)
        assert_paused_by_checkpoint(got)  # a GET does not wake it
        last = stream.numbers[-1]
        assert_running(resume(client, sb))
        after = stream.read(8, until=last + 15)
        assert after and after[0] == last + 1, (last, after)
        assert stream.numbers[-1] >= last + 15, stream.numbers
        stream.assert_continuous()
        # The same process: its record, its pid in the sandbox, and a process on the host.
        again = process(client, sb, counter["id"])
        assert again["status"] == "running" and again["pid"] == counter["pid"], again
        assert "while true" in cmdline_inside(client, sb, counter["pid"])
        assert pgrep(marker), "the restored counter is not on the host"
    finally:
        stream.close()


def test_a_restored_sandbox_checkpoints_again(daemon: Daemon, client: httpx.Client,
                                              sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    counter = start(client, sb, cmd=COUNTER)
    stream = Stream(daemon, sb, counter["id"])
    try:
        assert stream.read(5, until=5)
        for _ in range(2):
            assert_paused_by_checkpoint(pause(client, sb))
            stream.read(0.5)
            last = stream.numbers[-1]
            assert_running(resume(client, sb))
            assert stream.read(6, until=last + 10)[0] == last + 1, stream.numbers
        stream.assert_continuous()
        assert not stream.ended.is_set()
        again = process(client, sb, counter["id"])
        assert again["status"] == "running" and again["pid"] == counter["pid"], again
    finally:
        stream.close()


def test_pause_answers_the_state_it_finds(client: httpx.Client,
                                          sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    assert_paused_by_checkpoint(pause(client, sb))
    # Paused already: answered as it is, in whatever mode asked.
    assert_paused_by_checkpoint(pause(client, sb))
    assert_paused_by_checkpoint(pause(client, sb, mode="freeze"))
    assert_running(resume(client, sb))
    assert_running(resume(client, sb))  # running: answered as it is
    # Frozen, asked to checkpoint: it stays frozen.
    frozen = pause(client, sb, mode="freeze")
    assert frozen["status"] == "paused" and frozen["pause_mode"] == "freeze", frozen
    again = pause(client, sb)
    assert again["status"] == "paused" and again["pause_mode"] == "freeze", again
    assert get(client, sb)["pause_mode"] == "freeze"
    assert_running(resume(client, sb))
    assert run(client, sb, cmd="echo alive")["stdout"] == "alive\n"


def test_exec_wakes_a_checkpointed_sandbox(daemon: Daemon, client: httpx.Client,
                                           sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    sleeper = start(client, sb, cmd="sleep 600")
    assert_paused_by_checkpoint(pause(client, sb))
    woken = auto_resumes(daemon)
    out = run(client, sb, cmd="echo awake; echo err >&2")
    assert (out["stdout"], out["stderr"], out["exit_code"]) == ("awake\n", "err\n", 0), out
    assert_running(get(client, sb))
    assert auto_resumes(daemon) == woken + 1
    # What ran before it is back too.
    got = process(client, sb, sleeper["id"])
    assert got["status"] == "running" and got["pid"] == sleeper["pid"], got
    assert "sleep 600" in cmdline_inside(client, sb, sleeper["pid"])
    events = [e["type"] for e in client.get(f"/v1/sandboxes/{sb}/events").json()["events"]]
    assert "sandbox.paused" in events and "sandbox.resumed" in events, events


def test_files_written_before_a_checkpoint_are_there_after(client: httpx.Client,
                                                           sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    data = secrets.token_bytes(200_000)
    r = client.put(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/blob"},
                   content=data)
    assert r.status_code in (200, 201, 204), r.text
    made = run(client, sb, cmd="set -e; echo kept > /workspace/kept.txt; mkdir -p /home/user/d;"
                              " echo home > /home/user/d/h; echo tmp > /tmp/t;"
                              " ln -s kept.txt /workspace/link")
    assert made["exit_code"] == 0, made
    assert_paused_by_checkpoint(pause(client, sb))
    assert_running(resume(client, sb))
    out = run(client, sb, cmd="cat /workspace/kept.txt /home/user/d/h /tmp/t /workspace/link")
    assert out["stdout"] == "kept\nhome\ntmp\nkept\n", out
    r = client.get(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/blob"})
    assert r.status_code == 200 and r.content == data
    # A file read wakes it too, and so does a write, each seeing what was there.
    assert_paused_by_checkpoint(pause(client, sb))
    r = client.get(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/kept.txt"})
    assert r.status_code == 200 and r.content == b"kept\n", r.text
    assert_running(get(client, sb))
    assert_paused_by_checkpoint(pause(client, sb))
    r = client.put(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/later"},
                   content=b"later")
    assert r.status_code in (200, 201, 204), r.text
    assert_running(get(client, sb))
    out = run(client, sb, cmd="cat /workspace/later /workspace/kept.txt; sha256sum < "
                              "/workspace/blob")
    assert out["stdout"] == f"laterkept\n{hashlib.sha256(data).hexdigest()}  -\n", out


def test_auto_pause_checkpoints_an_idle_sandbox_and_exec_wakes_it(client: httpx.Client) -> None:
    with sandbox_of(client, auto_pause={"idle_seconds": 1, "mode": "checkpoint"}) as sb:
        assert sb["auto_pause"] == {"idle_seconds": 1, "mode": "checkpoint"}, sb
        sleeper = start(client, sb["id"], cmd="sleep 600")
        assert wait_until(lambda: get(client, sb["id"])["status"] == "paused", 15, 0.2), \
            get(client, sb["id"])
        assert_paused_by_checkpoint(get(client, sb["id"]))
        events = client.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]
        assert any(e["type"] == "sandbox.paused" and "auto_pause" in json.dumps(e)
                   and "checkpoint" in json.dumps(e) for e in events), events
        out = run(client, sb["id"], cmd="echo awake")
        assert out["stdout"] == "awake\n", out
        got = get(client, sb["id"])
        assert got["status"] == "running", got
        proc = process(client, sb["id"], sleeper["id"])
        assert proc["status"] == "running" and proc["pid"] == sleeper["pid"], proc


# A Python process holding a POSIX lock (as SQLite does) and a TCP connection to a server thread
# of its own on loopback, trading one number after another.
LOCK_AND_TCP = """
import fcntl, socket, threading, time
f = open('/workspace/locked', 'w')
fcntl.lockf(f, fcntl.LOCK_EX)
server = socket.socket()
server.bind(('127.0.0.1', 0))
server.listen(1)
def echo():
    conn, _ = server.accept()
    while True:
        data = conn.recv(64)
        if not data:
            return
        conn.sendall(data)
threading.Thread(target=echo, daemon=True).start()
client = socket.create_connection(server.getsockname())
i = 0
while True:
    client.sendall(b'%d\\n' % i)
    print(int(client.recv(64)), flush=True)
    i += 1
    time.sleep(0.05)
"""


def test_a_file_lock_and_a_loopback_connection_come_back(client: httpx.Client,
                                                          sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    proc = start(client, sb, argv=["python3", "-c", LOCK_AND_TCP])
    base = f"/v1/sandboxes/{sb}/processes/{proc['id']}"
    assert wait_until(lambda: len(client.get(f"{base}/logs").json()["stdout"].split()) > 3, 10)
    assert_paused_by_checkpoint(pause(client, sb))
    assert_running(resume(client, sb))
    before = len(client.get(f"{base}/logs").json()["stdout"].split())
    assert wait_until(
        lambda: len(client.get(f"{base}/logs").json()["stdout"].split()) > before + 5, 10)
    got = process(client, sb, proc["id"])
    assert got["status"] == "running", got
    numbers = [int(n) for n in client.get(f"{base}/logs").json()["stdout"].split()]
    assert numbers == list(range(len(numbers))), numbers
    # The lock is still held: another process cannot take it.
    probe = run(client, sb, cmd="python3 -c \"import fcntl; f = open('/workspace/locked', 'w'); "
                               "fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\"")
    assert probe["exit_code"] != 0 and "BlockingIOError" in probe["stderr"], probe


def test_a_terminal_open_across_a_checkpoint_goes_on(daemon: Daemon, client: httpx.Client,
                                                    sandbox: dict[str, Any]) -> None:
    """A shell on a terminal (WebSocket exec/pty) holds `x=41`; the sandbox is checkpointed and
    resumed while the WebSocket stays open; typed into it after, `$((x+1))` answers 42."""
    sb = sandbox["id"]
    params = httpx.QueryParams({"access_token": API_KEY, "cmd": "bash"})
    url = daemon.url.replace("http://", "ws://") + f"/v1/sandboxes/{sb}/exec/pty?{params}"

    async def read_until(ws: ClientConnection, needle: bytes) -> bytes:
        out = b""
        deadline = time.monotonic() + 15
        while needle not in out:
            frame = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
            if isinstance(frame, bytes):
                out += frame
        return out

    async def go() -> None:
        async with connect(url) as ws:
            await ws.send(b"x=41; echo set\n")
            await read_until(ws, b"set\r\n")
            # The HTTP calls block this loop for their while: nothing is read meanwhile.
            assert_paused_by_checkpoint(pause(client, sb))
            assert_running(resume(client, sb))
            await ws.send(b"echo answer=$((x+1))\n")
            await read_until(ws, b"answer=42")
    asyncio.run(go())


def test_stdin_goes_on_across_a_checkpoint(client: httpx.Client,
                                           sandbox: dict[str, Any]) -> None:
    """What a `cat` had not read yet stays in its pipe through the checkpoint; stdin written
    while checkpointed wakes the sandbox and reaches it; EOF after ends it with exit 0."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd="sleep 0.5; cat")
    base = f"/v1/sandboxes/{sb}/processes/{proc['id']}"
    r = client.post(f"{base}/stdin", json={"data": "before\n"})
    assert r.status_code == 200, r.text
    assert_paused_by_checkpoint(pause(client, sb))
    r = client.post(f"{base}/stdin", json={"data": "after\n", "eof": True})
    assert r.status_code == 200, r.text
    assert wait_until(lambda: process(client, sb, proc["id"])["status"] == "exited", 10)
    done = process(client, sb, proc["id"])
    assert done["exit_code"] == 0, done
    assert client.get(f"{base}/logs").json()["stdout"] == "before\nafter\n"


def test_patch_sets_auto_pause_to_checkpoint(client: httpx.Client,
                                             sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    r = client.patch(f"/v1/sandboxes/{sb}",
                     json={"auto_pause": {"idle_seconds": 600, "mode": "checkpoint"}})
    assert r.status_code == 200, r.text
    assert r.json()["auto_pause"] == {"idle_seconds": 600, "mode": "checkpoint"}
    assert get(client, sb)["auto_pause"] == {"idle_seconds": 600, "mode": "checkpoint"}


def refused(c: httpx.Client, sb: str, word: str) -> None:
    """A checkpoint of `sb` is 501 not_implemented naming `word`; it runs on as it was."""
    before = start(c, sb, cmd="sleep 600")
    err = assert_error(c.post(f"/v1/sandboxes/{sb}/pause", json={"mode": "checkpoint"}), 501,
                       "not_implemented")
    assert word in err["message"] and "checkpoint" in err["message"], err
    assert_running(get(c, sb))
    assert run(c, sb, cmd="echo alive")["stdout"] == "alive\n"
    got = process(c, sb, before["id"])
    assert got["status"] == "running" and got["pid"] == before["pid"], got
    # It can still be paused the other way.
    frozen = pause(c, sb, mode="freeze")
    assert frozen["status"] == "paused" and frozen["pause_mode"] == "freeze", frozen
    assert_running(resume(c, sb))


def test_a_sandbox_with_a_volume_is_not_checkpointed(client: httpx.Client) -> None:
    vol = f"ckpt-{secrets.token_hex(4)}"
    r = client.post("/v1/volumes", json={"name": vol, "size_mb": 16})
    assert r.status_code == 201, r.text
    try:
        with sandbox_of(client, volumes=[{"name": vol, "path": "/mnt/v"}]) as sb:
            refused(client, sb["id"], "volumes")
    finally:
        wait_until(lambda: client.delete(f"/v1/volumes/{vol}").status_code in (204, 404), 10,
                   0.2)


def test_a_sandbox_of_a_snapshot_is_not_checkpointed(client: httpx.Client) -> None:
    name = f"ckpt-snap-{secrets.token_hex(4)}"
    with sandbox_of(client) as base:
        r = client.post(f"/v1/sandboxes/{base['id']}/snapshot", json={"name": name})
        assert r.status_code == 201, r.text
    try:
        with sandbox_of(client, template=name) as sb:
            refused(client, sb["id"], "overlay")
    finally:
        client.delete(f"/v1/templates/{name}")


@pytest.mark.timeout(90)
def test_a_sandbox_with_egress_is_not_checkpointed(tmp_path: Path) -> None:
    try:
        from test_egress import EgressLab
    except ImportError as e:  # pragma: no cover - the lab is in this directory
        pytest.skip(f"no egress lab: {e}")
    lab = EgressLab(tmp_path)
    try:
        lab.up()
        d = lab.start_daemon(tmp_path / "data")
        with d.client() as c, sandbox_of(c, network="egress") as sb:
            assert sb["network"] == "egress", sb
            refused(c, sb["id"], "egress")
    finally:
        lab.down()


def test_a_code_context_keeps_its_variables_through_a_checkpoint(client: httpx.Client) -> None:
    with sandbox_of(client, template="code-interpreter") as sb:
        r = client.post(f"/v1/sandboxes/{sb['id']}/contexts", json={"language": "python"})
        assert r.status_code == 201, r.text
        cell = f"/v1/sandboxes/{sb['id']}/contexts/{r.json()['id']}/run"
        r = client.post(cell, json={"code": "x = 41"}, headers={"Accept": "application/json"})
        assert r.status_code == 200 and r.json()["error"] is None, r.text
        assert_paused_by_checkpoint(pause(client, sb["id"]))
        # The cell wakes it.
        r = client.post(cell, json={"code": "x + 1"}, headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        assert [x["data"] for x in r.json()["results"]] == [{"text/plain": "42"}], r.json()
        assert_running(get(client, sb["id"]))


@pytest.mark.timeout(120)
def test_a_checkpointed_interpreter_process_outlives_a_daemon_sigkill(
        daemon_factory: Any) -> None:
    """A python3 reading statements from its stdin holds `x = 41`; checkpointed, the daemon
    SIGKILLed and started again, resumed: its stdin pipe and its memory are back."""
    d = daemon_factory(args=KEEP)
    repl = "import sys\nfor line in sys.stdin:\n    exec(line)\n"
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        py = start(c, sb, argv=["python3", "-u", "-c", repl])
        base = f"/v1/sandboxes/{sb}/processes/{py['id']}"
        r = c.post(f"{base}/stdin", content=b"x = 41\nprint('set', x)\n",
                   headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        assert wait_until(lambda: c.get(f"{base}/logs").json()["stdout"] == "set 41\n", 5)
        assert_paused_by_checkpoint(pause(c, sb))
    d.kill()
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        assert_paused_by_checkpoint(get(c, sb))
        assert_running(resume(c, sb))
        got = process(c, sb, py["id"])
        assert got["status"] == "running" and got["pid"] == py["pid"], got
        r = c.post(f"{base}/stdin", content=b"print(x + 1)\n",
                   headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        assert wait_until(lambda: c.get(f"{base}/logs").json()["stdout"] == "set 41\n42\n", 5), \
            c.get(f"{base}/logs").json()
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204


@pytest.mark.timeout(120)
def test_a_checkpointed_interpreter_outlives_a_daemon_sigkill(daemon_factory: Any) -> None:
    """The issue's case: `x = 41` in a Python context, checkpointed, the daemon SIGKILLed and
    started again on its data directory; resumed, `x + 1` answers 42."""
    d = daemon_factory(args=KEEP)
    with d.client(timeout=60) as c:
        sb = create_sandbox(c, template="code-interpreter")["id"]
        r = c.post(f"/v1/sandboxes/{sb}/contexts", json={"language": "python"})
        assert r.status_code == 201, r.text
        cell = f"/v1/sandboxes/{sb}/contexts/{r.json()['id']}/run"
        r = c.post(cell, json={"code": "x = 41"}, headers={"Accept": "application/json"})
        assert r.status_code == 200 and r.json()["error"] is None, r.text
        assert_paused_by_checkpoint(pause(c, sb))
    d.kill()
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client(timeout=60) as c:
        assert_paused_by_checkpoint(get(c, sb))
        assert_running(resume(c, sb))
        r = c.post(cell, json={"code": "x + 1"}, headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        results = [x["data"] for x in r.json()["results"]]
        assert results == [{"text/plain": "42"}], r.json()
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204


@pytest.mark.timeout(120)
def test_a_checkpointed_process_and_its_log_outlive_a_daemon_sigkill(daemon_factory: Any,
                                                                     marker: str) -> None:
    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        assert run(c, sb, cmd="echo kept > /workspace/keep.txt")["exit_code"] == 0
        counter = start(c, sb, cmd=f"{COUNTER}; : {marker}")
        stream = Stream(d, sb, counter["id"])
        try:
            assert stream.read(5, until=10)
            assert_paused_by_checkpoint(pause(c, sb))
            stream.read(1)
        finally:
            stream.close()
        seen = list(stream.numbers)
    assert wait_no_process(marker, 5) == []
    d.kill()
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        assert_paused_by_checkpoint(get(c, sb))
        assert pgrep(marker) == [], "the counter runs while its sandbox is checkpointed"
        assert_running(resume(c, sb))
        got = process(c, sb, counter["id"])
        assert got["status"] == "running" and got["pid"] == counter["pid"], got
        running = c.get(f"/v1/sandboxes/{sb}/processes", params={"status": "running"}).json()
        assert counter["id"] in [p["id"] for p in running["processes"]], running
        assert "while true" in cmdline_inside(c, sb, counter["pid"])
        assert pgrep(marker), "the restored counter is not on the host"
        # The whole log, from its first line: nothing lost, nothing twice, and it goes on.
        again = Stream(d2, sb, counter["id"])
        try:
            again.read(10, until=seen[-1] + 15)
            again.assert_continuous()
            assert again.numbers[:len(seen)] == seen
            assert again.numbers[-1] >= seen[-1] + 15, again.numbers
        finally:
            again.close()
        assert run(c, sb, cmd="cat /workspace/keep.txt")["stdout"] == "kept\n"
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204
    assert wait_no_process(marker, 5) == []
