"""Total and idle timeouts kill the whole process group and say so in the exit."""

from __future__ import annotations

import time
from typing import Any

import httpx

from helpers import wait_no_process
from sse import chunks_of, read_events


def stream_exit(c: httpx.Client, sandbox_id: str, body: dict[str, Any]) -> tuple[list[Any], float]:
    """Runs exec/stream; returns the events and the seconds until the last one."""
    t0 = time.monotonic()
    with c.stream("POST", f"/v1/sandboxes/{sandbox_id}/exec/stream", json=body) as r:
        assert r.status_code == 200, r.read()
        events = read_events(r, limit_seconds=20)
    return events, events[-1].t - t0


def test_timeout_kills_group(client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    """timeout_seconds 1 on `sleep & sleep`: reason timeout, nothing of it left."""
    cmd = f"sleep {marker} & sleep {marker}"
    with client.stream("POST", f"/v1/sandboxes/{sandbox['id']}/exec/stream",
                       json={"cmd": cmd, "timeout_seconds": 1}) as r:
        t0 = time.monotonic()
        assert r.status_code == 200
        events = read_events(r, limit_seconds=20)
        elapsed = events[-1].t - t0
    assert events[-1].event == "exit", [e.event for e in events]
    ex = events[-1].json()
    assert ex["reason"] == "timeout", ex
    assert ex["exit_code"] != 0, ex
    assert ex["duration_ms"] >= 900, ex
    assert elapsed < 8, f"exit after {elapsed:.1f}s"
    assert wait_no_process(f"sleep {marker}") == []


def test_idle_timeout_kills_group(client: httpx.Client, sandbox: dict[str, Any],
                                  marker: str) -> None:
    """idle_timeout_seconds 1 on a silent command: reason idle_timeout, nothing left."""
    events, elapsed = stream_exit(client, sandbox["id"], {
        "cmd": f"sleep {marker} & sleep {marker}", "idle_timeout_seconds": 1})
    ex = events[-1].json()
    assert events[-1].event == "exit" and ex["reason"] == "idle_timeout", ex
    assert ex["exit_code"] != 0
    assert elapsed < 8
    assert wait_no_process(f"sleep {marker}") == []


def test_output_resets_idle_timer(client: httpx.Client, sandbox: dict[str, Any],
                                  marker: str) -> None:
    """Output every 0.3 s for ~2 s keeps an idle timeout of 1 s away; silence then trips it."""
    cmd = f"for i in 1 2 3 4 5 6 7; do echo $i; sleep 0.3; done; sleep {marker}"
    events, _ = stream_exit(client, sandbox["id"], {"cmd": cmd, "idle_timeout_seconds": 1})
    assert chunks_of(events) == "".join(f"{i}\n" for i in range(1, 8))
    ex = events[-1].json()
    assert ex["reason"] == "idle_timeout" and ex["duration_ms"] >= 2000, ex
    assert wait_no_process(f"sleep {marker}") == []


def test_buffered_exec_timeout(client: httpx.Client, sandbox: dict[str, Any],
                               marker: str) -> None:
    """The buffered exec reports the timeout the same way and keeps the output before it."""
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec",
                    json={"cmd": f"echo before; sleep {marker} & sleep {marker}",
                          "timeout_seconds": 0.5})
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["reason"] == "timeout" and res["stdout"] == "before\n", res
    assert wait_no_process(f"sleep {marker}") == []
