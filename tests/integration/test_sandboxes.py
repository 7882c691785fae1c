"""Sandboxes: create, list, get, delete, TTL, and the sandbox's own logs and events."""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

import httpx

from helpers import assert_error, create_sandbox, run, wait_no_process, wait_until
from sse import SseEvent, iter_sse, read_events

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_crud(client: httpx.Client) -> None:
    """Create returns the full object; list is oldest first; delete is 204 then 404."""
    a = create_sandbox(client, env={"K": "V"}, metadata={"owner": "ci"}, ttl_seconds=3600)
    b = create_sandbox(client)
    assert re.fullmatch(r"sb_[0-9a-f]{16}", a["id"]), a["id"]
    assert a["template"] == "base" and a["status"] == "running"
    assert RFC3339_MS.match(a["created_at"]) and RFC3339_MS.match(a["expires_at"]), a
    assert a["ttl_seconds"] == 3600 and a["env"] == {"K": "V"} and a["metadata"] == {"owner": "ci"}
    assert a["cwd"] == "/workspace" and a["network"] == "loopback" and a["processes_running"] == 0
    assert set(a["limits"]) == {"memory_mb", "pids", "cpu_percent", "disk_mb", "open_files"}

    listed = [s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]]
    assert listed.index(a["id"]) < listed.index(b["id"])
    got = client.get(f"/v1/sandboxes/{a['id']}")
    assert got.status_code == 200 and got.json()["id"] == a["id"]
    assert got.json()["metadata"] == {"owner": "ci"}

    for sb in (a, b):
        assert client.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
        assert_error(client.get(f"/v1/sandboxes/{sb['id']}"), 404, "not_found")
        assert_error(client.delete(f"/v1/sandboxes/{sb['id']}"), 404, "not_found")
    listed = [s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]]
    assert a["id"] not in listed and b["id"] not in listed


def test_create_validation(client: httpx.Client) -> None:
    """An unknown template or a limit above the maximum is 400 naming the field."""
    err = assert_error(client.post("/v1/sandboxes", json={"template": "no-such-template"}),
                       400, "invalid_request")
    assert "template" in err["message"]
    err = assert_error(client.post("/v1/sandboxes", json={"limits": {"memory_mb": 1 << 40}}),
                       400, "invalid_request")
    assert "memory_mb" in err["message"]


def test_processes_running_count(client: httpx.Client, sandbox: dict[str, Any],
                                 marker: str) -> None:
    """processes_running counts the sandbox's live processes."""
    sb = sandbox["id"]
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"argv": ["sleep", marker]})
    assert r.status_code == 201
    assert client.get(f"/v1/sandboxes/{sb}").json()["processes_running"] == 1
    client.delete(f"/v1/sandboxes/{sb}/processes/{r.json()['id']}")
    assert client.get(f"/v1/sandboxes/{sb}").json()["processes_running"] == 0


def test_ttl_expiry(client: httpx.Client, marker: str) -> None:
    """ttl_seconds 1: the sandbox and its processes are gone within about 3 s."""
    t0 = time.monotonic()
    sb = create_sandbox(client, ttl_seconds=1)
    assert sb["ttl_seconds"] == 1 and sb["expires_at"] is not None
    client.post(f"/v1/sandboxes/{sb['id']}/processes", json={"argv": ["sleep", marker]})
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sb['id']}").status_code == 404, 3.5)
    assert time.monotonic() - t0 >= 0.9, "deleted before its TTL"
    assert wait_no_process(f"sleep {marker}") == []


def test_delete_ends_streams_with_exit(client: httpx.Client, marker: str) -> None:
    """Deleting a sandbox ends its open exec and logs streams with an exit event (killed)."""
    sb = create_sandbox(client)["id"]
    bg = client.post(f"/v1/sandboxes/{sb}/processes", json={"argv": ["sleep", marker]}).json()
    with contextlib.ExitStack() as stack:
        exec_r = stack.enter_context(client.stream(
            "POST", f"/v1/sandboxes/{sb}/exec/stream", json={"cmd": f"sleep {marker}"}))
        logs_r = stack.enter_context(client.stream(
            "GET", f"/v1/sandboxes/{sb}/processes/{bg['id']}/logs", params={"follow": "1"}))
        exec_events = iter_sse(exec_r)
        first = next(exec_events)
        assert isinstance(first, SseEvent) and first.event == "start"
        assert client.delete(f"/v1/sandboxes/{sb}").status_code == 204
        rest = [e for e in exec_events if isinstance(e, SseEvent)]
        logs = read_events(logs_r, limit_seconds=10)
    assert rest and rest[-1].event == "exit", [e.event for e in rest]
    assert rest[-1].json()["reason"] == "killed", rest[-1].data
    assert logs[-1].event == "exit" and logs[-1].json()["reason"] == "killed", logs[-1].data
    assert wait_no_process(f"sleep {marker}") == []


def test_lifecycle_logs_and_events(client: httpx.Client) -> None:
    """/logs?follow=1 and /events?follow=1 show created, started, exited; events end on delete."""
    sb = create_sandbox(client)["id"]
    with contextlib.ExitStack() as stack:
        ev_r = stack.enter_context(client.stream(
            "GET", f"/v1/sandboxes/{sb}/events", params={"follow": "1"}, timeout=10))
        log_r = stack.enter_context(client.stream(
            "GET", f"/v1/sandboxes/{sb}/logs", params={"follow": "1"}, timeout=10))
        assert ev_r.status_code == 200 and log_r.status_code == 200
        pid = run(client, sb, cmd="exit 3")["process_id"]

        logs: list[SseEvent] = []
        wanted = ("created", "started", "exited")
        for e in iter_sse(log_r):
            assert isinstance(e, SseEvent)
            logs.append(e)
            text = " ".join(x.json()["message"].lower() for x in logs)
            if all(w in text for w in wanted):
                break
        assert client.delete(f"/v1/sandboxes/{sb}").status_code == 204
        ev_iter = iter_sse(ev_r)
        events = []
        for e in ev_iter:
            assert isinstance(e, SseEvent)
            events.append(e)
            if e.event == "sandbox.deleted":
                break
        # The stream must end by itself after sandbox.deleted.
        trailing = list(ev_iter)

    assert all(e.event == "log" for e in logs)
    for e in logs:
        d = e.json()
        assert int(e.id or 0) == d["seq"] and RFC3339_MS.match(d["time"]) and d["level"], d
    assert any(pid in e.json()["message"] for e in logs), [e.data for e in logs]

    types = [e.event for e in events]
    for t in ("sandbox.created", "process.started", "process.exited", "sandbox.deleting",
              "sandbox.deleted"):
        assert t in types, types
    assert types.index("process.started") < types.index("process.exited") < types.index(
        "sandbox.deleted")
    assert types[-1] == "sandbox.deleted" and trailing == [], trailing
    seqs = [e.json()["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and [int(e.id or 0) for e in events] == seqs
    for e in events:
        assert e.json()["type"] == e.event


def test_events_json_tail(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Without follow, logs and events are JSON; tail keeps the last N."""
    sb = sandbox["id"]
    run(client, sb, cmd="true")
    events = client.get(f"/v1/sandboxes/{sb}/events").json()["events"]
    assert [e["type"] for e in events][:1] == ["sandbox.created"], events
    assert {"process.started", "process.exited"} <= {e["type"] for e in events}
    tail = client.get(f"/v1/sandboxes/{sb}/events", params={"tail": 1}).json()["events"]
    assert tail == events[-1:]
    logs = client.get(f"/v1/sandboxes/{sb}/logs").json()["logs"]
    assert len(logs) >= 3 and all({"seq", "time", "level", "message"} <= set(x) for x in logs)
