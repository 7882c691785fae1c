"""A sandbox that ends under the daemon (its PID 1 killed) is seen: its status says so and why,
its processes end with true exit records and their streams with their `exit`, requests that need
it get a clear error, and DELETE still leaves nothing behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
import httpx

from helpers import assert_error, create_sandbox, pgrep, wait_until
from sse import SseEvent, read_events


def init_of(host_pid: int) -> int:
    """The host pid of PID 1 of the pid namespace that `host_pid` is in."""
    ns = os.readlink(f"/proc/{host_pid}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns/pid") != ns:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("NSpid:") and line.split()[-1] == "1":
                    return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no PID 1 found for the namespace of {host_pid}")


def test_a_sandbox_whose_pid1_dies_is_reported_lost(client: httpx.Client, marker: str) -> None:
    sb = create_sandbox(client)["id"]
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": f"echo up; sleep {marker}"})
    assert r.status_code == 201, r.text
    proc = r.json()
    assert wait_until(lambda: bool(pgrep(f"sleep {marker}")), within=5)

    with client.stream("GET", f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs",
                       params={"follow": "1"}) as stream:
        # The API's pid is the sandbox's own; the host's is the one pgrep sees.
        os.kill(init_of(int(pgrep(f"sleep {marker}")[0].split()[0])), signal.SIGKILL)
        events: list[SseEvent] = read_events(stream, limit_seconds=15)
    assert events[-1].event == "exit", events[-3:]
    assert events[-1].json()["reason"] == "killed", events[-1]

    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sb}").json()["status"] == "lost",
                      within=5)
    info = client.get(f"/v1/sandboxes/{sb}").json()
    assert "SIGKILL" in info["lost_reason"], info
    p = client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}").json()
    assert p["status"] == "exited" and p["reason"] == "killed", p

    r = client.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "echo hi"})
    err = assert_error(r, 409, "conflict")
    assert "lost" in err["message"], err
    logs = client.get(f"/v1/sandboxes/{sb}/events").json()["events"]
    assert any(e["type"] == "sandbox.lost" for e in logs), logs

    t0 = time.monotonic()
    assert client.delete(f"/v1/sandboxes/{sb}").status_code == 204
    assert time.monotonic() - t0 < 5
    assert client.get(f"/v1/sandboxes/{sb}").status_code == 404
    assert not pgrep(f"sleep {marker}")


def test_deleting_a_sandbox_is_not_a_loss(client: httpx.Client) -> None:
    sb = create_sandbox(client)["id"]
    assert client.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "true"}).status_code == 200
    with client.stream("GET", f"/v1/sandboxes/{sb}/events", params={"follow": "1"}) as stream:
        assert client.delete(f"/v1/sandboxes/{sb}").status_code == 204
        names = [e.event for e in read_events(stream, stop_after=frozenset({"sandbox.deleted"}))]
    assert "sandbox.lost" not in names, names
    assert names[-1] == "sandbox.deleted", names

