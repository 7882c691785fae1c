"""A daemon restart loses nothing: after SIGKILL or a graceful stop, a daemon started on the same
data directory takes back every sandbox with its files and its running processes, whose output
continues where it was, without a gap."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import Daemon, create_sandbox, pgrep, run, wait_no_process, wait_until
from sse import iter_sse

KEEP = ["--teardown-on-exit", "false"]


def start(c: httpx.Client, sb: str, **body: Any) -> dict[str, Any]:
    r = c.post(f"/v1/sandboxes/{sb}/processes", json=body)
    assert r.status_code == 201, r.text
    proc: dict[str, Any] = r.json()
    return proc


def follow(c: httpx.Client, sb: str, pid: str, last_event_id: int | None, until: str,
           within: float = 20) -> list[tuple[int, str, str]]:
    """(id, event, data) of the process's log stream from `last_event_id` until an event whose
    data contains `until` (or the exit)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    seen: list[tuple[int, str, str]] = []
    deadline = time.monotonic() + within
    with c.stream("GET", f"/v1/sandboxes/{sb}/processes/{pid}/logs",
                  params={"follow": "1", "flow": "wait"}, headers=headers, timeout=within) as r:
        assert r.status_code == 200, r.read()
        for e in iter_sse(r):
            if e.id is None:
                continue
            seen.append((int(e.id), e.event, e.data))
            if (until in text_of(seen)) or e.event == "exit" or time.monotonic() > deadline:
                break
    return seen


def text_of(events: list[tuple[int, str, str]]) -> str:
    return "".join(json.loads(d)["chunk"] for _, ev, d in events if ev == "stdout")


def lines_of(events: list[tuple[int, str, str]]) -> list[int]:
    """The numbers the counter printed, in order."""
    out: list[int] = []
    for line in text_of(events).splitlines():
        if line.strip().isdigit():
            out.append(int(line))
    return out


def sweep(daemon_factory: Any, data_dir: Path) -> None:
    """Ends what a kept sandbox left running: a start that takes it back, then a stop that
    tears down."""
    d = daemon_factory(data_dir=data_dir)
    assert d.stop() == 0, d.log_tail()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_restart_keeps_files_and_running_processes(daemon_factory: Any, marker: str,
                                                   sig: int) -> None:
    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        assert run(c, sb, cmd="echo kept > /workspace/keep.txt")["exit_code"] == 0
        counter = start(c, sb, cmd=f"i=0; while [ $i -lt 400 ]; do echo $i; i=$((i+1)); "
                                   f"sleep 0.02; done; : {marker}")
        first = follow(c, sb, counter["id"], None, "\n20\n")
        assert lines_of(first)[:3] == [0, 1, 2], first[:3]
        last_id = first[-1][0]
    host_pids = pgrep(marker)
    assert host_pids, "the counter runs"
    if sig == signal.SIGKILL:
        d.kill()
    else:
        assert d.stop(sig) == 0, d.log_tail()
    # The counter runs on while no daemon does.
    time.sleep(0.5)
    assert pgrep(marker) == host_pids, "the process lived through the daemon's end"

    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        got = c.get(f"/v1/sandboxes/{sb}").json()
        assert got["status"] == "running", got
        out = run(c, sb, cmd="cat /workspace/keep.txt")
        assert out["stdout"] == "kept\n", out
        proc = c.get(f"/v1/sandboxes/{sb}/processes/{counter['id']}").json()
        assert proc["status"] == "running" and proc["pid"] == counter["pid"], proc
        # From the last event it saw, a client gets every line after it, none twice, none lost.
        rest = follow(c, sb, counter["id"], last_id, "\n399\n", within=30)
        assert rest[0][0] == last_id + 1, (last_id, rest[:2])
        numbers = lines_of(first) + lines_of(rest)
        assert numbers == list(range(400)), numbers[-5:]
        done = c.get(f"/v1/sandboxes/{sb}/processes/{counter['id']}/wait",
                     params={"timeout_seconds": 10}).json()
        assert done["status"] == "exited" and done["exit_code"] == 0, done
        events = [e["type"] for e in c.get(f"/v1/sandboxes/{sb}/events").json()["events"]]
        assert "sandbox.restored" in events, events
        # Deleting it afterwards leaves nothing behind.
        assert c.delete(f"/v1/sandboxes/{sb}").status_code in (200, 204)
    assert wait_no_process(marker) == []
    assert d2.stop() == 0, d2.log_tail()
    assert not list((d.data_dir / "sandboxes").iterdir())


def test_process_that_ends_while_no_daemon_runs_keeps_its_exit(daemon_factory: Any,
                                                               marker: str) -> None:
    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        proc = start(c, sb, cmd=f"echo before; sleep 1; echo after >&2; exit 7; : {marker}")
        assert wait_until(lambda: c.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs")
                          .json()["stdout"] == "before\n", within=10)
    d.kill()
    time.sleep(1.5)
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        done = c.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/wait",
                     params={"timeout_seconds": 10}).json()
        assert done["status"] == "exited" and done["exit_code"] == 7, done
        assert done["reason"] == "exited", done
        logs = c.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs").json()
        assert logs["stdout"] == "before\n" and logs["stderr"] == "after\n", logs
    d2.stop()
    sweep(daemon_factory, d.data_dir)


def test_teardown_on_exit_ends_everything_and_says_so(daemon_factory: Any, marker: str) -> None:
    d = daemon_factory(args=["--teardown-on-exit", "true"])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        run(c, sb, cmd="echo x > /workspace/keep.txt")
        proc = start(c, sb, cmd=f"sleep 600; : {marker}")
    assert d.stop() == 0, d.log_tail()
    assert wait_no_process(marker) == []
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        got = c.get(f"/v1/sandboxes/{sb}").json()
        # Its files are gone: it says so instead of pretending all is well.
        assert got["status"] == "lost" and "files" in got["lost_reason"], got
        r = c.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "true"})
        assert r.status_code == 409, r.text
        p = c.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}").json()
        assert p["status"] == "exited" and p["reason"] == "killed", p
        assert c.delete(f"/v1/sandboxes/{sb}").status_code in (200, 204)
    assert d2.stop() == 0


def test_repeated_kills_lose_nothing(daemon_factory: Any, marker: str) -> None:
    """Three SIGKILLs in a row while a process prints: its output stays whole and in order."""
    d: Daemon = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        proc = start(c, sb, cmd=f"i=0; while [ $i -lt 300 ]; do echo $i; i=$((i+1)); "
                                f"sleep 0.01; done; : {marker}")
    data_dir = d.data_dir
    for _ in range(3):
        time.sleep(0.3)
        d.kill()
        d = daemon_factory(data_dir=data_dir, args=KEEP)
    with d.client() as c:
        done = c.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/wait",
                     params={"timeout_seconds": 20}).json()
        assert done["exit_code"] == 0, done
        everything = follow(c, sb, proc["id"], 0, "\n299\n")
        assert lines_of(everything) == list(range(300))
        assert c.delete(f"/v1/sandboxes/{sb}").status_code in (200, 204)
    d.stop()


def bytes_of_lines(n: int, newline: str) -> int:
    """How many bytes `echo` writes for the lines 1 to n."""
    total, digits, low = 0, 1, 1
    while low <= n:
        high = min(n, low * 10 - 1)
        total += (high - low + 1) * (digits + len(newline))
        low, digits = low * 10, digits + 1
    return total


def open_terminal(d: Daemon, sb: str, cmd: str) -> str:
    """Starts `cmd` on a terminal and leaves it running with no client; returns its id."""
    import asyncio

    from test_terminals import READ_SECONDS, ws_url
    from websockets.asyncio.client import connect

    async def opened() -> str:
        async with connect(ws_url(d, f"/v1/sandboxes/{sb}/exec/pty", cmd=cmd)) as ws:
            start = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
            return str(start["terminal_id"])
    return asyncio.run(opened())


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_kills_while_output_pours_in_lose_no_byte(daemon_factory: Any, terminal: bool) -> None:
    """Twenty SIGKILLs while a process prints numbered lines as fast as it can, so that the daemon
    is often killed between taking output from the pipe (or the terminal) and recording it: every
    byte the process wrote is in its log once."""
    rng = random.Random(5)
    count = "i=1; while :; do echo $i; i=$((i+1)); done"
    d: Daemon = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        pid = open_terminal(d, sb, count) if terminal else start(c, sb, cmd=count)["id"]
    for _ in range(20):
        time.sleep(rng.uniform(0.005, 0.05))
        d.kill()
        d = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d.client() as c:
        url = f"/v1/sandboxes/{sb}/processes/{pid}"
        assert c.post(f"{url}/signal", json={"signal": "KILL"}).status_code == 200
        done = c.get(f"{url}/wait", params={"timeout_seconds": 20}).json()
        assert done["status"] == "exited", done
        # The last lines say how much it wrote: lines 1 to n, and what it began of the next.
        newline = "\r\n" if terminal else "\n"
        text = c.get(f"{url}/logs", params={"tail": "20"}).json()["stdout"]
        whole, _, begun = text.rpartition(newline)
        last = int(whole.rsplit(newline, 1)[-1])
        written = bytes_of_lines(last, newline) + len(begun)
        got = c.get(url).json()["stdout_bytes"]
        assert got == written, f"{written - got} of {written} bytes lost (doubled if negative)"
        assert c.delete(f"/v1/sandboxes/{sb}").status_code in (200, 204)
    d.stop()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_terminal_reattaches_with_its_replay(daemon_factory: Any, sig: int) -> None:
    """A terminal outlives the daemon: a client reattaches by terminal_id to the same shell,
    gets its screen back, and types on."""
    import asyncio

    from test_terminals import READ_SECONDS, read_to_close, read_until, ws_url
    from websockets.asyncio.client import connect

    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c)["id"]
    path = f"/v1/sandboxes/{sb}/exec/pty"
    state: dict[str, str] = {}

    async def before() -> None:
        async with connect(ws_url(d, path, cmd="sh")) as ws:
            start = json.loads(await asyncio.wait_for(ws.recv(), READ_SECONDS))
            state["id"] = start["terminal_id"]
            await ws.send(b"X=kept-$((6*7)); echo before-$X\n")
            await read_until(ws, b"before-kept-42")
    asyncio.run(before())
    if sig == signal.SIGKILL:
        d.kill()
    else:
        assert d.stop(sig) == 0, d.log_tail()

    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)

    async def after() -> None:
        async with connect(ws_url(d2, path, terminal_id=state["id"])) as ws:
            await read_until(ws, b"before-kept-42")  # the replay
            await ws.send(b"echo again-$X\n")
            await read_until(ws, b"again-kept-42")  # the same shell, its variable
            await ws.send(b"exit 4\n")
            _, controls = await read_to_close(ws)
            assert any(m["type"] == "exit" and m["exit_code"] == 4 for m in controls), controls
    asyncio.run(after())
    with d2.client() as c:
        assert c.delete(f"/v1/sandboxes/{sb}").status_code in (200, 204)
    d2.stop()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_code_context_and_session_keep_their_state(daemon_factory: Any, sig: int) -> None:
    """A Python context's variables and a session's cwd and exports live through a restart."""
    from test_contexts import results, run_cell

    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c, template="code-interpreter")
        r = c.post(f"/v1/sandboxes/{sb['id']}/contexts", json={"language": "python"})
        assert r.status_code == 201, r.text
        ctx = r.json()
        assert results(run_cell(c, sb, ctx, "x = 6 * 7\nx")) == [{"text/plain": "42"}]
        r = c.post(f"/v1/sandboxes/{sb['id']}/sessions", json={})
        assert r.status_code == 201, r.text
        sess = r.json()["id"]
        out = run(c, sb["id"], session=sess,
                  cmd="mkdir -p /tmp/deep && cd /tmp/deep && export KEPT=yes")
        assert out["exit_code"] == 0, out
    if sig == signal.SIGKILL:
        d.kill()
    else:
        assert d.stop(sig) == 0, d.log_tail()

    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        got = c.get(f"/v1/sandboxes/{sb['id']}/contexts/{ctx['id']}").json()
        assert got["status"] == "idle", got
        assert results(run_cell(c, sb, ctx, "x + 1")) == [{"text/plain": "43"}]
        out = run(c, sb["id"], session=sess, cmd="echo $(pwd) $KEPT")
        assert out["stdout"] == "/tmp/deep yes\n", out
        assert c.delete(f"/v1/sandboxes/{sb['id']}").status_code in (200, 204)
    d2.stop()


def _container_cgroups(name: str) -> list[Path]:
    """A cgroup `name` in every hierarchy the daemon uses: what a container runtime gives a
    container (cgroup v2: one; v1: memory, pids and cpu)."""
    root = Path("/sys/fs/cgroup")
    unified = root / "cgroup.controllers"
    if unified.exists() and "pids" in unified.read_text().split():
        return [root / name]
    return [root / ctrl / name for ctrl in ("memory", "pids", "cpu")]


def _kill_cgroup_tree(top: Path) -> None:
    """What a runtime does when a container ends: every process in its cgroups is killed."""
    for _ in range(50):
        pids = [int(p) for procs in top.rglob("cgroup.procs") for p in procs.read_text().split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    raise AssertionError(f"processes left in {top}")


@pytest.mark.parametrize("absolute", [False, True], ids=["below-own-cgroup", "cgroup-parent"])
def test_sandboxes_outlive_their_daemons_container_with_an_absolute_cgroup_parent(
        tmp_path: Path, marker: str, absolute: bool) -> None:
    """A daemon in a container's cgroups (as a Kubernetes pod runs it): when the container
    ends, its runtime kills every process in them. Sandboxes nested below the daemon's own
    cgroup end with it; with cgroup_parent outside it, they run on and the next daemon takes
    them back."""
    tag = secrets.token_hex(3)
    container = _container_cgroups(f"sandstream-ctr-{tag}")
    parent = f"/sandstream-test-{tag}"
    for d in container:
        d.mkdir()
    enter = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in container)
    args = [*KEEP, *(["--cgroup-parent", parent] if absolute else [])]

    def daemon() -> Daemon:
        d = Daemon(tmp_path / "data", args, {}, tmp_path / "sandstreamd.log",
                   wrapper=["sh", "-c", f'{enter}; exec "$@"', "sh"])
        d.start()
        return d

    d = daemon()
    try:
        with d.client() as c:
            sb = create_sandbox(c)["id"]
            start(c, sb, cmd=f"sleep {marker}")
            assert wait_until(lambda: pgrep(marker), 5)
            # Its cgroups: below the container's, or in cgroup_parent of every hierarchy.
            inside = [c for c in container if list(c.glob(f"**/{sb}"))]
            if absolute:
                assert not inside, inside
                assert all(Path(f"{c.parent}{parent}/{sb}").is_dir() for c in container)
            else:
                assert inside == container
        for top in container:
            _kill_cgroup_tree(top)
        d.proc.wait(10)
        assert bool(pgrep(marker)) == absolute, pgrep(marker)
        d = daemon()
        with d.client() as c:
            got = c.get(f"/v1/sandboxes/{sb}").json()
            if absolute:
                assert got["status"] == "running", got
                assert run(c, sb, cmd="echo back")["stdout"] == "back\n"
            else:
                assert got["status"] != "running", got
            c.delete(f"/v1/sandboxes/{sb}")
        assert d.stop() == 0, d.log_tail()
        assert wait_no_process(marker) == []
    finally:
        d.kill()
        made = [*container, *(Path(f"{c.parent}{parent}") for c in container)]
        for path in made:
            if path.exists():
                _kill_cgroup_tree(path)
        for path in made:
            for sub in sorted(path.glob("**/"), key=lambda p: len(str(p)), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
