"""Pausing and resuming a sandbox (mode "freeze"): every process stops where it is with its
memory, open streams stay open and go on with the next event, the clocks that count a sandbox's
time (process timeouts, idle timeouts, its TTL) stop, any request for it resumes it first
(unless it was made with auto_resume false), and a daemon restart keeps it paused. A sandbox
pauses itself when idle (auto_pause) or at its TTL (on_timeout "pause")."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from typing import Any

import httpx
import pytest

from helpers import API_KEY, Daemon, assert_error, create_sandbox, pause, resume, run, wait_until
from sse import iter_sse

KEEP = ["--teardown-on-exit", "false"]


def status(c: httpx.Client, sb: str) -> str:
    return str(c.get(f"/v1/sandboxes/{sb}").json()["status"])


def start(c: httpx.Client, sb: str, **body: Any) -> dict[str, Any]:
    r = c.post(f"/v1/sandboxes/{sb}/processes", json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def metric(d: Daemon, name: str) -> float:
    text = httpx.get(f"{d.url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in the metrics")


class Follower:
    """Reads a process's log stream on a thread: (id, event, data) as they come, and every
    keepalive comment, so a test can watch a stream across a pause."""

    def __init__(self, d: Daemon, sb: str, pid: str) -> None:
        self.events: queue.Queue[tuple[int, str, str]] = queue.Queue()
        self.comments = 0
        self.ended = threading.Event()
        self._client = d.client(timeout=120)
        self._thread = threading.Thread(target=self._read, args=(sb, pid), daemon=True)
        self._thread.start()

    def _read(self, sb: str, pid: str) -> None:
        try:
            with self._client.stream("GET", f"/v1/sandboxes/{sb}/processes/{pid}/logs",
                                     params={"follow": "1"}) as r:
                for line in r.iter_lines():
                    if line.startswith(":"):
                        self.comments += 1
                        continue
                    self._line(line)
        except httpx.HTTPError:
            pass
        finally:
            self.ended.set()

    _pending: dict[str, str] = {}

    def _line(self, line: str) -> None:
        if line == "":
            if "id" in self._pending:
                self.events.put((int(self._pending["id"]), self._pending.get("event", ""),
                                 self._pending.get("data", "")))
            self._pending = {}
            return
        field, _, value = line.partition(":")
        self._pending[field] = value.lstrip(" ")

    def numbers(self, within: float, until: int | None = None) -> list[int]:
        """The counter's numbers read within `within` seconds (or until `until` is seen)."""
        out: list[int] = []
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                _, event, data = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if event != "stdout":
                continue
            out += [int(n) for n in json.loads(data)["chunk"].split()]
            if until is not None and out and out[-1] >= until:
                break
        return out

    def close(self) -> None:
        self._client.close()


def test_a_paused_sandbox_stops_where_it_is_and_goes_on_with_its_open_stream(
        daemon: Daemon, client: httpx.Client, sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    counter = start(client, sb, cmd="i=0; while true; do echo $i; i=$((i+1)); sleep 0.05; done")
    follower = Follower(daemon, sb, counter["id"])
    try:
        before = follower.numbers(2, until=10)
        assert before[:3] == [0, 1, 2], before
        paused = pause(client, sb)
        assert paused["status"] == "paused" and paused["pause_mode"] == "freeze", paused
        assert paused["paused_at"] is not None
        # What it wrote before the freeze took hold arrives; then nothing while it is paused.
        during = follower.numbers(0.5)
        assert follower.numbers(2.5) == [], "a paused process went on writing"
        # Reading the sandbox does not wake it; the stream is still open.
        assert status(client, sb) == "paused"
        assert not follower.ended.is_set()
        resumed = resume(client, sb)
        assert resumed["status"] == "running" and resumed["paused_at"] is None, resumed
        after = follower.numbers(3, until=(before + during)[-1] + 10)
        seen = before + during + after
        # Each number once, in order, none missing: it went on where it stopped.
        assert seen == list(range(seen[0], seen[-1] + 1)), seen
        assert len(after) >= 5, after
    finally:
        follower.close()


def test_pause_and_resume_answer_the_state_they_find(client: httpx.Client,
                                                     sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    assert resume(client, sb)["status"] == "running"  # running: answered as it is
    assert pause(client, sb)["status"] == "paused"
    again = pause(client, sb, mode="freeze")  # paused: answered as it is, not an error
    assert again["status"] == "paused"
    assert_error(client.post(f"/v1/sandboxes/{sb}/pause", json={"mode": "nap"}), 400,
                 "invalid_request")
    assert_error(client.post(f"/v1/sandboxes/{sb}/pause", json={"mode": 3}), 400,
                 "invalid_request")
    assert_error(client.post(f"/v1/sandboxes/{sb}/pause", content=b"{nope",
                             headers={"Content-Type": "application/json"}), 400, "invalid_json")
    assert_error(client.post("/v1/sandboxes/sb_nope/pause", json={}), 404, "not_found")
    assert resume(client, sb)["status"] == "running"
    # Checkpoints (mode "checkpoint") are tested in test_checkpoint.py.
    assert run(client, sb, cmd="echo alive")["stdout"] == "alive\n"


def test_a_request_for_a_paused_sandbox_resumes_it(daemon: Daemon, client: httpx.Client,
                                                   sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    assert run(client, sb, cmd="echo hi > /workspace/f")["exit_code"] == 0
    resumes = metric(daemon, "sandstream_auto_resumes_total")
    pause(client, sb)
    assert run(client, sb, cmd="cat /workspace/f")["stdout"] == "hi\n"
    assert status(client, sb) == "running"
    # A file read wakes it too, and so does a write.
    pause(client, sb)
    r = client.get(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/f"})
    assert r.status_code == 200 and r.content == b"hi\n"
    assert status(client, sb) == "running"
    pause(client, sb)
    r = client.put(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/g"},
                   content=b"written")
    assert r.status_code in (200, 201, 204), r.text
    assert status(client, sb) == "running"
    assert metric(daemon, "sandstream_auto_resumes_total") == resumes + 3


def test_auto_resume_false_refuses_with_409_paused(client: httpx.Client) -> None:
    sb = create_sandbox(client, auto_resume=False)
    try:
        assert sb["auto_resume"] is False
        pause(client, sb["id"])
        err = assert_error(client.post(f"/v1/sandboxes/{sb['id']}/exec", json={"cmd": "true"}),
                           409, "paused")
        assert "resume" in err["message"]
        assert status(client, sb["id"]) == "paused"
        resume(client, sb["id"])
        assert run(client, sb["id"], cmd="echo ok")["stdout"] == "ok\n"
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
    bad = client.post("/v1/sandboxes", json={"auto_resume": "yes"})
    assert_error(bad, 400, "invalid_request")


def test_paused_time_is_not_a_process_timeout(client: httpx.Client,
                                              sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    p = start(client, sb, cmd="sleep 30", timeout_seconds=2)
    time.sleep(0.5)
    pause(client, sb)
    time.sleep(3)  # past the timeout, paused
    resume(client, sb)
    assert client.get(f"/v1/sandboxes/{sb}/processes/{p['id']}").json()["status"] == "running"
    started = time.monotonic()
    waited = client.get(f"/v1/sandboxes/{sb}/processes/{p['id']}/wait",
                        params={"timeout_seconds": 10}).json()
    assert waited["reason"] == "timeout", waited
    # What was left of its 2 s (about 1.5 s) ran after the resume.
    assert 0.8 < time.monotonic() - started < 5


def test_paused_time_is_not_the_sandboxes_ttl(client: httpx.Client) -> None:
    sb = create_sandbox(client, ttl_seconds=3)
    try:
        pause(client, sb["id"])
        time.sleep(4)
        got = client.get(f"/v1/sandboxes/{sb['id']}")
        assert got.status_code == 200 and got.json()["status"] == "paused"
        # Paused, it ends at its paused_ttl (30 days by default), not at its own TTL.
        assert got.json()["expires_at"] > sb["expires_at"]
        resumed = resume(client, sb["id"])
        assert resumed["ttl_seconds"] >= 7 and resumed["expires_at"] > sb["expires_at"]
        assert run(client, sb["id"], cmd="true")["exit_code"] == 0
        # Then its TTL runs again and it ends.
        assert wait_until(lambda: client.get(f"/v1/sandboxes/{sb['id']}").status_code == 404,
                          10, 0.2)
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_a_paused_sandbox_is_deleted_at_once(client: httpx.Client, marker: str) -> None:
    sb = create_sandbox(client)
    start(client, sb["id"], cmd=f"trap '' TERM; sleep {marker}")
    pause(client, sb["id"])
    started = time.monotonic()
    assert client.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
    assert time.monotonic() - started < 8  # the kill grace, not a hang on frozen processes
    assert client.get(f"/v1/sandboxes/{sb['id']}").status_code == 404


def test_pause_shows_in_metrics_and_the_journal(daemon: Daemon, client: httpx.Client,
                                                sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    pauses = metric(daemon, "sandstream_pauses_total")
    pause(client, sb)
    text = httpx.get(f"{daemon.url}/metrics",
                     headers={"Authorization": f"Bearer {API_KEY}"}).text
    paused = re.search(r'^sandstream_sandboxes_by_state\{state="paused"\} (\d+)', text, re.M)
    assert paused and int(paused.group(1)) >= 1, text
    assert "sandstream_pause_duration_seconds_count" in text
    assert metric(daemon, "sandstream_pauses_total") == pauses + 1
    resume(client, sb)
    events = client.get(f"/v1/sandboxes/{sb}/events").json()["events"]
    types = [e["type"] for e in events]
    assert "sandbox.paused" in types and "sandbox.resumed" in types, types


@pytest.mark.timeout(180)
def test_a_paused_sandbox_survives_a_daemon_sigkill_with_its_memory(daemon_factory: Any) -> None:
    """The interpreter's variable, paused, the daemon SIGKILLed and started again: the sandbox
    comes back paused and, resumed, answers from the same memory."""
    d = daemon_factory(args=KEEP)
    with d.client(timeout=60) as c:
        sb = create_sandbox(c, template="code-interpreter")["id"]
        ctx = c.post(f"/v1/sandboxes/{sb}/contexts", json={"language": "python"}).json()
        cell = f"/v1/sandboxes/{sb}/contexts/{ctx['id']}/run"
        r = c.post(cell, json={"code": "x = 41"}, headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        pause(c, sb)
    d.kill()
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client(timeout=60) as c:
        got = c.get(f"/v1/sandboxes/{sb}").json()
        assert got["status"] == "paused", got
        resume(c, sb)
        r = c.post(cell, json={"code": "x + 1"}, headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["data"]["text/plain"] == "42", r.json()
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204


def test_an_idle_sandbox_pauses_itself_and_the_next_exec_wakes_it(
        daemon: Daemon, client: httpx.Client) -> None:
    sb = create_sandbox(client, auto_pause={"idle_seconds": 2})
    try:
        assert sb["auto_pause"] == {"idle_seconds": 2, "mode": "freeze"}
        assert sb["on_timeout"] == "kill"
        # Idle counts from its creation: not paused at once.
        assert sb["status"] == "running" and status(client, sb["id"]) == "running"
        # Requests keep it awake: one a second for three seconds.
        for _ in range(3):
            assert run(client, sb["id"], cmd="true")["exit_code"] == 0
            time.sleep(1)
        assert status(client, sb["id"]) == "running"
        # Then idle: paused by itself (a GET does not count as activity).
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 6, 0.2)
        events = client.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]
        assert any(e["type"] == "sandbox.paused" and "auto_pause" in json.dumps(e)
                   for e in events), events
        assert run(client, sb["id"], cmd="echo awake")["stdout"] == "awake\n"
        assert status(client, sb["id"]) == "running"
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_a_sandbox_resumed_by_hand_counts_its_idle_time_from_the_resume(
        client: httpx.Client) -> None:
    sb = create_sandbox(client, auto_pause={"idle_seconds": 2})
    try:
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 6, 0.1)
        # Paused longer than its idle period, then resumed without a request for it (a resume
        # is not activity): it is idle from the resume, not from before its pause.
        time.sleep(3)
        resumed_at = time.monotonic()
        assert resume(client, sb["id"])["status"] == "running"
        time.sleep(1.2)
        assert status(client, sb["id"]) == "running", "paused again before its idle period"
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 6, 0.1)
        assert time.monotonic() - resumed_at >= 1.9
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_an_open_stream_keeps_a_sandbox_awake(daemon: Daemon, client: httpx.Client) -> None:
    sb = create_sandbox(client, auto_pause={"idle_seconds": 1})
    try:
        quiet = start(client, sb["id"], cmd="sleep 30")
        follower = Follower(daemon, sb["id"], quiet["id"])
        try:
            time.sleep(3)
            assert status(client, sb["id"]) == "running", "paused under an open stream"
        finally:
            follower.close()
        # The daemon sees the follower gone at its next write (a keepalive, 15 s at most);
        # idle from then, it pauses.
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 25, 0.2)
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_a_keep_awake_process_keeps_its_sandbox_awake_while_it_runs(
        client: httpx.Client) -> None:
    sb = create_sandbox(client, auto_pause={"idle_seconds": 1})
    try:
        # An ordinary background process does not keep it awake; one with keep_awake does.
        plain = start(client, sb["id"], cmd="sleep 30")
        assert plain["keep_awake"] is False
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 5, 0.1)
        resume(client, sb["id"])
        job = start(client, sb["id"], cmd="sleep 3", keep_awake=True)
        assert job["keep_awake"] is True
        started = time.monotonic()
        while time.monotonic() - started < 2.5:
            assert status(client, sb["id"]) == "running", "paused under a keep_awake process"
            time.sleep(0.2)
        # Idle from its end: paused a second or so after it.
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 6, 0.1)
        got = client.get(f"/v1/sandboxes/{sb['id']}/processes/{job['id']}").json()
        assert got["status"] == "exited" and got["keep_awake"] is True, got
        r = client.post(f"/v1/sandboxes/{sb['id']}/processes",
                        json={"cmd": "true", "keep_awake": "yes"})
        assert "keep_awake" in assert_error(r, 400, "invalid_request")["message"]
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_on_timeout_pause_pauses_at_the_ttl_instead_of_deleting(client: httpx.Client) -> None:
    sb = create_sandbox(client, ttl_seconds=2, on_timeout="pause")
    try:
        assert sb["on_timeout"] == "pause"
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 6, 0.2)
        resumed = resume(client, sb["id"])
        # Resumed, it runs for another period of its TTL.
        assert resumed["status"] == "running"
        assert run(client, sb["id"], cmd="true")["exit_code"] == 0
        assert wait_until(lambda: status(client, sb["id"]) == "paused", 6, 0.2)
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_patch_changes_the_lifecycle_settings(client: httpx.Client,
                                              sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    r = client.patch(f"/v1/sandboxes/{sb}", json={"auto_pause": {"idle_seconds": 600},
                                                   "on_timeout": "pause", "auto_resume": False})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["auto_pause"] == {"idle_seconds": 600, "mode": "freeze"}
    assert got["on_timeout"] == "pause" and got["auto_resume"] is False
    assert client.get(f"/v1/sandboxes/{sb}").json()["auto_pause"]["idle_seconds"] == 600
    r = client.patch(f"/v1/sandboxes/{sb}", json={"auto_pause": None})
    assert r.status_code == 200 and r.json()["auto_pause"] is None
    assert r.json()["on_timeout"] == "pause"  # what the body does not name stays
    for body, word in [({"auto_pause": {"idle_seconds": 0}}, "idle_seconds"),
                       ({"auto_pause": {"idle_seconds": 5, "mode": "nap"}}, "mode"),
                       ({"auto_pause": {"idle": 5}}, "idle"),
                       ({"auto_pause": 5}, "auto_pause"),
                       ({"on_timeout": "sleep"}, "on_timeout"),
                       ({"auto_resume": "no"}, "auto_resume"),
                       ({"template": "base"}, "template")]:
        err = assert_error(client.patch(f"/v1/sandboxes/{sb}", json=body), 400, "invalid_request")
        assert word in err["message"], (body, err)
    assert_error(client.patch("/v1/sandboxes/sb_nope", json={}), 404, "not_found")
    bad = client.post("/v1/sandboxes", json={"on_timeout": "sleep"})
    assert_error(bad, 400, "invalid_request")


@pytest.mark.timeout(120)
def test_lifecycle_settings_survive_a_restart(daemon_factory: Any) -> None:
    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c, auto_pause={"idle_seconds": 2}, on_timeout="pause",
                            auto_resume=False)["id"]
    d.kill()
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client() as c:
        got = c.get(f"/v1/sandboxes/{sb}").json()
        assert got["auto_pause"] == {"idle_seconds": 2, "mode": "freeze"}, got
        assert got["on_timeout"] == "pause" and got["auto_resume"] is False
        # Its idle watch runs again: it pauses by itself.
        assert wait_until(lambda: c.get(f"/v1/sandboxes/{sb}").json()["status"] == "paused",
                          8, 0.2)
        assert c.delete(f"/v1/sandboxes/{sb}").status_code == 204


def test_a_paused_sandbox_counts_its_disk_not_its_memory_or_cpu(daemon_factory: Any) -> None:
    """A tenant's memory_mb and cpu_percent quotas count running sandboxes only: pausing one
    makes room for another, and resuming it must fit again (429, still paused, until it does).
    A restart keeps the count."""
    d = daemon_factory(args=KEEP)
    with d.client() as admin:
        r = admin.post("/v1/admin/tenants",
                       json={"name": "pq", "quotas": {"memory_mb": 1024, "cpu_percent": 400}})
        assert r.status_code == 201, r.text
        key = admin.post("/v1/admin/tenants/pq/keys", json={}).json()["key"]
    limits = {"memory_mb": 512, "cpu_percent": 100, "disk_mb": 64}
    with d.client(key) as t:
        a = create_sandbox(t, limits=limits)["id"]
        b = create_sandbox(t, limits=limits)["id"]
        assert_error(t.post("/v1/sandboxes", json={"limits": limits}), 429, "quota_exceeded")
        pause(t, a)
        usage = t.get("/v1/usage").json()["usage"]
        assert (usage["sandboxes"], usage["memory_mb"], usage["cpu_percent"], usage["disk_mb"]) \
            == (2, 512, 100, 128), usage
        c = create_sandbox(t, limits=limits)["id"]
        r = t.post(f"/v1/sandboxes/{a}/resume")
        assert_error(r, 429, "quota_exceeded")
        assert "memory_mb" in r.json()["error"]["message"], r.text
        assert status(t, a) == "paused"
        # A request that would resume it is refused the same way, and it stays paused.
        assert_error(t.post(f"/v1/sandboxes/{a}/exec", json={"cmd": "true"}), 429,
                     "quota_exceeded")
        assert status(t, a) == "paused"
    d.kill()
    d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
    with d2.client(key) as t:
        usage = t.get("/v1/usage").json()["usage"]
        assert (usage["sandboxes"], usage["memory_mb"]) == (3, 1024), usage
        assert t.delete(f"/v1/sandboxes/{c}").status_code == 204
        assert resume(t, a)["status"] == "running"
        assert run(t, a, cmd="echo back")["stdout"] == "back\n"
        usage = t.get("/v1/usage").json()["usage"]
        assert (usage["sandboxes"], usage["memory_mb"], usage["cpu_percent"]) == (2, 1024, 200)
        # Deleting a paused sandbox gives back what it counted, and no more.
        pause(t, b)
        assert t.delete(f"/v1/sandboxes/{b}").status_code == 204
        usage = t.get("/v1/usage").json()["usage"]
        assert (usage["sandboxes"], usage["memory_mb"], usage["disk_mb"]) == (1, 512, 64), usage
        assert t.delete(f"/v1/sandboxes/{a}").status_code == 204
