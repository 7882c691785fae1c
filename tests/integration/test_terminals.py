"""Terminals over WebSocket (GET exec/pty) and multiplexed exec (GET exec/ws), end to end."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from helpers import API_KEY, Daemon, assert_error, pgrep, wait_no_process, wait_until

READ_SECONDS = 15.0
CLI = os.environ.get("SANDSTREAM_CLI", "/work/main/build/dev/bin/sandstream")


def ws_url(daemon: Daemon, path: str, **query: str | int) -> str:
    """The ws:// URL of a route, authenticated with ?access_token= as a browser would."""
    params = httpx.QueryParams({"access_token": API_KEY, **query})
    return daemon.url.replace("http://", "ws://") + path + "?" + str(params)


async def read_until(ws: ClientConnection, needle: bytes, within: float = READ_SECONDS
                     ) -> tuple[bytes, list[dict[str, Any]]]:
    """Reads frames until the terminal output contains `needle`; returns output and controls."""
    out = b""
    controls: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while needle not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} did not arrive; got {out[-500:]!r}")
        frame = await asyncio.wait_for(ws.recv(), left)
        if isinstance(frame, bytes):
            out += frame
        else:
            controls.append(json.loads(frame))
    return out, controls


async def read_to_close(ws: ClientConnection) -> tuple[bytes, list[dict[str, Any]]]:
    """Reads every frame until the server closes the connection."""
    out = b""
    controls: list[dict[str, Any]] = []
    try:
        while True:
            frame = await asyncio.wait_for(ws.recv(), READ_SECONDS)
            if isinstance(frame, bytes):
                out += frame
            else:
                controls.append(json.loads(frame))
    except ConnectionClosed:
        pass
    return out, controls


def test_echo_round_trip(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """Typing `echo hi` into the shell's terminal brings `hi` back, and the start frame names it."""
    async def go() -> None:
        async with connect(ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/pty")) as ws:
            start = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
            assert start["type"] == "start" and start["terminal_id"], start
            await ws.send(b"echo h''i; tty\n")
            # One read for both: `hi` and the tty's name may come in one frame.
            out, _ = await read_until(ws, b"/dev/pts/")
            assert b"hi\r\n" in out and b"not a tty" not in out, out
    asyncio.run(go())


def test_resize_changes_stty_size(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """The query's size is the terminal's; a resize message (text or 0x01 binary) changes it."""
    async def go() -> None:
        url = ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/pty", rows=30, cols=100,
                     cmd="sh")
        async with connect(url) as ws:
            await ws.send(b"stty size\n")
            await read_until(ws, b"30 100")
            await ws.send(json.dumps({"type": "resize", "rows": 40, "cols": 120}))
            await ws.send(b"stty size\n")
            await read_until(ws, b"40 120")
            await ws.send(b"\x01" + json.dumps({"type": "resize", "rows": 12, "cols": 34}).encode())
            await ws.send(b"stty size\n")
            await read_until(ws, b"12 34")
            await ws.send(json.dumps({"type": "resize", "rows": 0, "cols": 10}))
            frame = await asyncio.wait_for(ws.recv(), READ_SECONDS)
            while isinstance(frame, bytes):
                frame = await asyncio.wait_for(ws.recv(), READ_SECONDS)
            err = json.loads(frame)
            assert err["type"] == "error" and err["code"] == "invalid_request", err
    asyncio.run(go())


def test_exit_frame_then_close(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """When the shell exits, an exit message with its code comes before a normal close."""
    async def go() -> None:
        url = ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/pty", cmd="sh")
        async with connect(url) as ws:
            await ws.send(b"exit 7\n")
            _, controls = await read_to_close(ws)
            assert ws.close_code == 1000, ws.close_code
            exits = [c for c in controls if c["type"] == "exit"]
            assert len(exits) == 1 and controls[-1] is exits[0], controls
            assert exits[0]["exit_code"] == 7 and exits[0]["reason"] == "exited", exits
    asyncio.run(go())


def test_reconnect_replays_and_carries_on(daemon: Daemon, client: httpx.Client,
                                          sandbox: dict[str, Any]) -> None:
    """A terminal outlives its connection: reattaching replays the screen; two clients share it."""
    path = f"/v1/sandboxes/{sandbox['id']}/exec/pty"

    async def go() -> None:
        async with connect(ws_url(daemon, path, cmd="sh")) as ws:
            start = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
            terminal_id = start["terminal_id"]
            await ws.send(b"echo before-$((6*7))\n")
            await read_until(ws, b"before-42")
        # Gone from the connection, still a running process.
        got = client.get(f"/v1/sandboxes/{sandbox['id']}/processes/{terminal_id}").json()
        assert got["status"] == "running", got
        again = ws_url(daemon, path, terminal_id=terminal_id)
        async with connect(again) as a, connect(again) as b:
            replay, _ = await read_until(a, b"before-42")
            await read_until(b, b"before-42")
            await a.send(b"echo after-$((7*8))\n")
            await read_until(a, b"after-56")
            await read_until(b, b"after-56")
            await b.send(b"exit 3\n")
            _, controls = await read_to_close(a)
            assert any(c["type"] == "exit" and c["exit_code"] == 3 for c in controls), controls
        # An ended terminal still replays, then says how it ended.
        async with connect(again) as late:
            out, controls = await read_to_close(late)
            assert b"after-56" in out
            assert controls[-1]["type"] == "exit" and controls[-1]["exit_code"] == 3, controls
    asyncio.run(go())


def test_pty_errors_before_upgrade(daemon: Daemon, client: httpx.Client,
                                   sandbox: dict[str, Any]) -> None:
    """Bad requests get the usual JSON errors: no key, a plain GET, a bad size, an unknown id."""
    path = f"/v1/sandboxes/{sandbox['id']}/exec/pty"
    assert_error(client.get(path), 400, "invalid_request")

    async def status_of(url: str, headers: dict[str, str] | None = None) -> int:
        try:
            async with connect(url, additional_headers=headers):
                return 101
        except InvalidStatus as e:
            return e.response.status_code

    async def go() -> None:
        base = daemon.url.replace("http://", "ws://") + path
        assert await status_of(base) == 401
        assert await status_of(base, {"Authorization": f"Bearer {API_KEY}"}) == 101
        assert await status_of(ws_url(daemon, path, rows=0)) == 400
        assert await status_of(ws_url(daemon, path, terminal_id="term_nope")) == 404
        assert await status_of(ws_url(daemon, "/v1/sandboxes/sb_nope/exec/pty")) == 404
    asyncio.run(go())


def test_idle_terminal_ends(daemon_factory: Any) -> None:
    """A terminal nobody is attached to ends after terminal_idle_seconds (reason idle_timeout)."""
    d = daemon_factory(args=["--terminal-idle-seconds", "1"])
    with d.client() as c:
        sb = c.post("/v1/sandboxes", json={}).json()["id"]

        async def open_terminal() -> str:
            async with connect(ws_url(d, f"/v1/sandboxes/{sb}/exec/pty")) as ws:
                start = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
                await asyncio.sleep(1.5)  # attached: not idle however long it takes
                await ws.send(b"echo alive\n")
                await read_until(ws, b"alive")
                return str(start["terminal_id"])

        terminal_id = asyncio.run(open_terminal())

        def ended() -> dict[str, Any] | None:
            p: dict[str, Any] = c.get(f"/v1/sandboxes/{sb}/processes/{terminal_id}").json()
            return p if p["status"] == "exited" else None
        assert wait_until(ended, 10)
        assert ended()["reason"] == "idle_timeout"  # type: ignore[index]
        c.delete(f"/v1/sandboxes/{sb}")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_terminal_attached_again_past_its_idle_time_does_not_spin(
        daemon_factory: Any) -> None:
    """Detached, then attached again before terminal_idle_seconds ran out: once that time has
    passed, the terminal waits for its client without spinning the daemon's event loop."""
    d = daemon_factory(args=["--terminal-idle-seconds", "1"])
    with d.client() as c:
        sb = c.post("/v1/sandboxes", json={}).json()["id"]
        path = f"/v1/sandboxes/{sb}/exec/pty"

        async def go() -> float:
            async with connect(ws_url(d, path)) as ws:
                start = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
            await asyncio.sleep(0.3)  # detached: its idle time runs
            async with connect(ws_url(d, path, terminal_id=start["terminal_id"])) as ws:
                await asyncio.sleep(1.5)  # attached past the idle time's end
                before = cpu_seconds(d.pid)
                await asyncio.sleep(2)
                used = cpu_seconds(d.pid) - before
                await ws.send(b"echo alive\n")
                await read_until(ws, b"alive")
            return used

        used = asyncio.run(go())
        assert used < 0.5, f"the daemon used {used:.2f} s of CPU in 2 s with one idle terminal"
        c.delete(f"/v1/sandboxes/{sb}")


def test_multiplexed_exec(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """Several commands over one socket, each tagged by the client's id, output then exit."""
    async def go() -> None:
        async with connect(ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/ws")) as ws:
            await ws.send(json.dumps({"id": "a", "cmd": "echo one; echo two >&2; exit 3"}))
            await ws.send(json.dumps({"id": 2, "cmd": "sleep 0.2; echo late"}))
            await ws.send(json.dumps({"id": "bad", "timeout_seconds": -1, "cmd": "true"}))
            await ws.send("not json")
            got: dict[str, dict[str, Any]] = {}
            errors: list[dict[str, Any]] = []
            while not (len(got) == 2 and all("exit" in e for e in got.values())
                       and len(errors) == 2):
                msg = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
                if "error" in msg:
                    errors.append(msg)
                    continue
                entry = got.setdefault(json.dumps(msg["id"]), {"stdout": "", "stderr": ""})
                if "stream" in msg:
                    entry[msg["stream"]] += msg["data"]
                for key in ("start", "exit"):
                    if key in msg:
                        entry[key] = msg[key]
            a, b = got['"a"'], got["2"]
            assert a["stdout"] == "one\n" and a["stderr"] == "two\n", a
            assert a["exit"]["exit_code"] == 3 and a["start"]["process_id"].startswith("proc_"), a
            assert b["stdout"] == "late\n" and b["exit"]["exit_code"] == 0, b
            codes = sorted((json.dumps(e["id"]), e["error"]["code"]) for e in errors)
            assert codes == [('"bad"', "invalid_request"), ("null", "invalid_json")], errors
    asyncio.run(go())


def test_multiplexed_cancel_kills_the_group(daemon: Daemon, sandbox: dict[str, Any],
                                            marker: str) -> None:
    """{"id","cancel":true} kills the command's whole process group; its exit says killed."""
    async def go() -> None:
        async with connect(ws_url(daemon, f"/v1/sandboxes/{sandbox['id']}/exec/ws")) as ws:
            cmd = f"sleep {marker} & sleep {marker} & echo started; wait"
            await ws.send(json.dumps({"id": "c", "cmd": cmd}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
                if msg.get("stream") == "stdout" and "started" in msg["data"]:
                    break
            assert wait_until(lambda: len(pgrep(f"sleep {marker}")) >= 2, 3)
            await ws.send(json.dumps({"id": "c", "cancel": True}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
                if "exit" in msg:
                    break
            assert msg["id"] == "c" and msg["exit"]["reason"] == "killed", msg
            assert wait_no_process(f"sleep {marker}") == []
            # The connection carries on after a cancel.
            await ws.send(json.dumps({"id": "d", "cmd": "echo still"}))
            out = ""
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
                out += msg.get("data", "")
                if "exit" in msg:
                    break
            assert out == "still\n"
    asyncio.run(go())


@pytest.mark.timeout(90)
def test_multiplexed_socket_stays_open_with_pings(daemon_factory: Any) -> None:
    """An idle socket is pinged (every keepalive_seconds) and stays open past the idle limit."""
    d = daemon_factory(args=["--keepalive-seconds", "1"])
    with d.client() as c:
        sb = c.post("/v1/sandboxes", json={}).json()["id"]

        async def go() -> None:
            async with connect(ws_url(d, f"/v1/sandboxes/{sb}/exec/ws")) as ws:
                await asyncio.sleep(5)  # well past 2 * keepalive without a frame from us
                await ws.send(json.dumps({"id": 1, "cmd": "echo ok"}))
                while True:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
                    if "exit" in msg:
                        break
        asyncio.run(go())
        c.delete(f"/v1/sandboxes/{sb}")


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _read_pty_until(fd: int, needle: bytes, within: float = READ_SECONDS) -> bytes:
    out = b""
    deadline = time.monotonic() + within
    while needle not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} did not arrive; got {out[-500:]!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"EOF before {needle!r}; got {out[-500:]!r}")
            out += chunk
    return out


def test_cli_shell(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """`sandstream shell` on a local terminal: raw input, SIGWINCH resizes, the shell's code."""
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"sandstream binary not found at {CLI} (set SANDSTREAM_CLI)")
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update({"SANDSTREAM_URL": daemon.url, "SANDSTREAM_API_KEY": API_KEY})
        os.execv(CLI, [CLI, "shell", sandbox["id"], "--", "sh"])
    try:
        _set_winsize(fd, 33, 111)
        os.write(fd, b"stty size\r")
        _read_pty_until(fd, b"33 111")
        _set_winsize(fd, 21, 77)  # the CLI is the foreground group: it gets SIGWINCH
        os.write(fd, b"sleep 0.5; stty size\r")
        _read_pty_until(fd, b"21 77")
        os.write(fd, b"exit 6\r")
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 6, status
    finally:
        os.close(fd)
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_cli_shell_errors(daemon: Daemon) -> None:
    """An unknown sandbox is the server's error, exit status 2."""
    env = {**os.environ, "SANDSTREAM_URL": daemon.url, "SANDSTREAM_API_KEY": API_KEY}
    r = subprocess.run([CLI, "shell", "sb_nope"], capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL, env=env)
    assert r.returncode == 2, r
    assert b"sandstream: not_found:" in r.stderr, r.stderr
