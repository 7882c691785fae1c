"""Chaos: the daemon is SIGKILLed at random moments of create, exec, exec/stream, process start,
pause, resume and delete; after every restart the state is consistent: no half-created sandbox,
no orphan state directory or cgroup, every listed sandbox either running or paused as its
cgroup's freezer says (never half), every one usable, every process either running (its pid
alive) or exited with a record, and every finished stream resumable."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import Daemon, cgroup_parent_name, wait_until
from sse import iter_sse

KEEP = ["--teardown-on-exit", "false"]
ROUNDS = int(os.environ.get("SANDSTREAM_CHAOS_ROUNDS", "100"))


def cgroup_dirs(d: Daemon) -> list[Path]:
    """Where the daemon nests its sandboxes' cgroups, one per hierarchy."""
    name = cgroup_parent_name(d.data_dir)
    dirs = []
    for line in Path(f"/proc/{d.pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        path = path.removesuffix(f"/{name}.daemon")
        if controllers == "" and (Path("/sys/fs/cgroup") / path.lstrip("/") / name).exists():
            dirs.append(Path("/sys/fs/cgroup") / path.lstrip("/") / name)
        elif "pids" in controllers.split(","):
            dirs.append(Path("/sys/fs/cgroup/pids") / path.lstrip("/") / name)
    return dirs


def frozen(d: Daemon, sandbox_id: str) -> bool:
    """Whether the kernel holds the sandbox's cgroup frozen (v1's freezer, or v2's)."""
    name = cgroup_parent_name(d.data_dir)
    for line in Path(f"/proc/{d.pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        base = path.removesuffix(f"/{name}.daemon").lstrip("/")
        if "freezer" in controllers.split(","):
            state = Path("/sys/fs/cgroup/freezer") / base / name / sandbox_id / "freezer.state"
            return state.read_text().strip() != "THAWED"
        if controllers == "":
            freeze = Path("/sys/fs/cgroup") / base / name / sandbox_id / "cgroup.freeze"
            if freeze.exists():
                return freeze.read_text().strip() == "1"
    raise AssertionError(f"no freezer for {sandbox_id}")


def sandbox_pids(d: Daemon, sandbox_id: str) -> set[int]:
    """The pids, as the sandbox numbers them, of the processes in its cgroup."""
    pids = set()
    procs = cgroup_dirs(d)[0] / sandbox_id / "cgroup.procs"
    for host_pid in procs.read_text().split() if procs.exists() else []:
        try:
            status = Path(f"/proc/{host_pid}/status").read_text()
        except OSError:
            continue  # ended meanwhile
        for line in status.splitlines():
            if line.startswith("NSpid:"):
                pids.add(int(line.split()[-1]))
    return pids


def children(p: Path) -> set[str]:
    return {c.name for c in p.iterdir() if c.is_dir()} if p.exists() else set()


def worker(d: Daemon, stop: threading.Event, rng: random.Random) -> None:
    """Random operations until the daemon dies under it; every error is expected."""
    try:
        with d.client(timeout=5) as c:
            while not stop.is_set():
                listed = c.get("/v1/sandboxes").json()["sandboxes"]
                ids = [s["id"] for s in listed if s["status"] in ("running", "paused")]
                op = rng.choice(["create", "exec", "stream", "start", "delete", "pause",
                                 "resume"])
                if op == "create" or not ids:
                    if len(ids) < 4:
                        c.post("/v1/sandboxes", json={})
                    continue
                sb = rng.choice(ids)
                if op == "exec":
                    c.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "echo hi"})
                elif op == "stream":
                    with c.stream("POST", f"/v1/sandboxes/{sb}/exec/stream",
                                  json={"cmd": "for i in 1 2 3; do echo $i; sleep 0.01; done"}) as r:
                        for _ in iter_sse(r):
                            pass
                elif op == "start":
                    c.post(f"/v1/sandboxes/{sb}/processes",
                           json={"cmd": f"sleep {rng.choice([0, 0.2, 30])}; echo done"})
                elif op == "pause":
                    c.post(f"/v1/sandboxes/{sb}/pause", json={})
                elif op == "resume":
                    c.post(f"/v1/sandboxes/{sb}/resume")
                elif op == "delete" and len(ids) > 2:
                    c.delete(f"/v1/sandboxes/{sb}")
    except (httpx.HTTPError, KeyError, ValueError):
        pass


def check(d: Daemon, data_dir: Path, round_: int, seen: dict[str, int]) -> None:
    with d.client() as c:
        listed = c.get("/v1/sandboxes").json()["sandboxes"]
        ids = {s["id"] for s in listed}
        for s in listed:
            assert s["status"] in ("running", "paused"), (round_, s)
            # Paused is what the kernel holds: the freezer of a paused sandbox's cgroup is
            # frozen, a running one's is not.
            assert (s["status"] == "paused") == frozen(d, s["id"]), (round_, s)
            seen["paused"] += s["status"] == "paused"
        # Only the listed sandboxes have state and cgroups.
        assert children(data_dir / "sandboxes") == ids, round_
        for dir_ in cgroup_dirs(d):
            assert children(dir_) == ids, (round_, dir_, children(dir_), ids)
        for sb in ids:
            procs = c.get(f"/v1/sandboxes/{sb}/processes").json()["processes"]
            seen["sandboxes"] += 1
            seen["running"] += sum(p["status"] == "running" for p in procs)
            seen["exited"] += sum(p["status"] == "exited" for p in procs)
            for p in procs:
                if p["status"] == "running" and p["pid"] not in sandbox_pids(d, sb):
                    # It ended just now: its exit is recorded within moments.
                    url = f"/v1/sandboxes/{sb}/processes/{p['id']}"
                    assert wait_until(lambda: c.get(url).json()["status"] == "exited",
                                      within=5), (round_, p)
                elif p["status"] != "running":
                    assert p["exit_code"] is not None and p["reason"], (round_, p)
            # A finished process's stream replays to its exit.
            ended = [p for p in procs if p["status"] == "exited"]
            if ended:
                p = ended[-1]
                with c.stream("GET", f"/v1/sandboxes/{sb}/processes/{p['id']}/logs",
                              params={"follow": "1"}) as r:
                    assert r.status_code == 200, (round_, p)
                    events = [e.event for e in iter_sse(r)]
                    assert events and events[-1] == "exit", (round_, p, events)
        # Every sandbox is usable after the restart.
        for sb in sorted(ids)[:2]:
            r = c.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "echo alive"})
            assert r.status_code == 200 and r.json()["stdout"] == "alive\n", (round_, r.text)


@pytest.mark.timeout(900)
def test_kill_at_random_moments_leaves_a_consistent_state(daemon_factory: Any) -> None:
    rng = random.Random(int(os.environ.get("SANDSTREAM_CHAOS_SEED", "13")))
    d = daemon_factory(args=KEEP)
    data_dir = d.data_dir
    seen = {"sandboxes": 0, "running": 0, "exited": 0, "paused": 0}
    for round_ in range(ROUNDS):
        stop = threading.Event()
        t = threading.Thread(target=worker, args=(d, stop, rng), daemon=True)
        t.start()
        time.sleep(rng.uniform(0.02, 0.3))
        d.kill()
        stop.set()
        t.join(10)
        d = daemon_factory(data_dir=data_dir, args=KEEP)
        check(d, data_dir, round_, seen)
    # The rounds did reach every path: sandboxes, and processes taken back running or ended.
    assert seen["sandboxes"] > 0 and seen["running"] > 0 and seen["exited"] > 0, seen
    assert seen["paused"] > 0, seen
    with d.client() as c:
        for s in c.get("/v1/sandboxes").json()["sandboxes"]:
            c.delete(f"/v1/sandboxes/{s['id']}")
    parents = cgroup_dirs(d)
    assert d.stop() == 0, d.log_tail()
    assert children(data_dir / "sandboxes") == set()
    for dir_ in parents:
        assert children(dir_) == set(), dir_
    # No daemon's child is left behind: one cloned for a sandbox when its daemon was killed
    # (before it was told to go on) sees the daemon gone and ends.
    def left() -> list[str]:
        out = []
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if proc.name.isdigit() and str(data_dir).encode() in cmdline:
                out.append(f"{proc.name}: {cmdline.replace(bytes(1), b' ').decode(errors='replace')}")
        return out
    assert wait_until(lambda: not left(), 5, 0.1), left()


CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")
COUNTER = "i=0; while true; do echo $i; i=$((i+1)); sleep 0.05; done"


@pytest.mark.timeout(600)
@pytest.mark.skipif(not CRIU.exists(), reason="no CRIU (scripts/install-criu): nothing checkpoints")
def test_kill_during_checkpoint_or_restore_leaves_it_running_or_paused(
        daemon_factory: Any) -> None:
    """The daemon SIGKILLed at random moments of a checkpoint or of its restore comes back with
    the sandbox running (every process alive, nothing stopped) or paused to disk (none of its
    processes left), never half; resumed at last, its counter's log has every line once."""
    rng = random.Random(int(os.environ.get("SANDSTREAM_CHAOS_SEED", "13")))
    rounds = max(4, ROUNDS // 5)
    d = daemon_factory(args=KEEP)
    data_dir = d.data_dir
    with d.client() as c:
        sb = c.post("/v1/sandboxes", json={}).json()["id"]
        proc = c.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": COUNTER}).json()
    seen = {"running": 0, "paused": 0}
    for round_ in range(rounds):
        with d.client() as c:
            status = c.get(f"/v1/sandboxes/{sb}").json()["status"]
        step = "resume" if status == "paused" else "pause"

        def ask(step: str = step) -> None:
            try:
                with d.client(timeout=30) as c:
                    c.post(f"/v1/sandboxes/{sb}/{step}", json={"mode": "checkpoint"})
            except httpx.HTTPError:
                pass

        t = threading.Thread(target=ask, daemon=True)
        t.start()
        # A checkpoint or a restore takes a few hundred milliseconds: some rounds end inside
        # one, some after it.
        time.sleep(rng.uniform(0.0, 1.2))
        d.kill()
        t.join(30)
        d = daemon_factory(data_dir=data_dir, args=KEEP)
        # What a restore cut short had mounted for itself (its layer, a devpts) is gone.
        stage = f"/run/sandstream/restore/{sb}"
        assert stage not in Path("/proc/self/mountinfo").read_text(), round_
        with d.client() as c:
            s = c.get(f"/v1/sandboxes/{sb}").json()
            assert s["status"] in ("running", "paused"), (round_, s)
            seen[s["status"]] += 1
            alive = sandbox_pids(d, sb)
            if s["status"] == "paused":
                assert s["pause_mode"] == "checkpoint", (round_, s)
                assert not alive, (round_, alive)
            else:
                # Running: its PID 1 and the counter, going on (none left stopped).
                assert {1, proc["pid"]} <= alive, (round_, alive)
                assert not frozen(d, sb), round_
                r = c.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "echo alive"})
                assert r.status_code == 200 and r.json()["stdout"] == "alive\n", (round_, r.text)
    assert seen["running"] > 0 and seen["paused"] > 0, seen
    with d.client() as c:
        c.post(f"/v1/sandboxes/{sb}/resume")
        time.sleep(0.5)
        r = c.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs")
        numbers = [int(n) for n in r.json()["stdout"].split()]
        assert numbers == list(range(len(numbers))), (numbers[:5], len(numbers))
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204
