"""Dropped connections and stalled readers: resume with Last-Event-ID, gaps, bounded memory."""

from __future__ import annotations

import json
import os
import secrets
import time
from typing import Any

import httpx
import pytest

from helpers import API_KEY, create_sandbox, run
from sse import RawSseConnection, SseEvent, assert_contiguous, chunks_of, iter_sse, read_events


def test_drop_and_resume_every_byte_once(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Dropping mid-stream and resuming with Last-Event-ID loses and repeats nothing."""
    n = 60
    cmd = (f"echo run >> runs.log; i=0; while [ $i -lt {n} ]; do echo line $i; "
           f"i=$((i+1)); sleep 0.02; done")
    url = f"/v1/sandboxes/{sandbox['id']}/exec/stream"
    key = {"Idempotency-Key": "resume-" + secrets.token_hex(8)}
    first: list[SseEvent] = []
    with client.stream("POST", url, json={"cmd": cmd}, headers=key) as r:
        assert r.status_code == 200
        for e in iter_sse(r):
            assert isinstance(e, SseEvent)
            first.append(e)
            if sum(ev.event == "stdout" for ev in first) >= 5:
                break
    assert first[0].event == "start"
    assert first[-1].event == "stdout", "the process must still be running when dropped"
    last_id = first[-1].id
    assert last_id is not None

    with client.stream("POST", url, json={"cmd": cmd},
                       headers={**key, "Last-Event-ID": last_id}) as r:
        assert r.status_code == 200
        second = read_events(r)
    assert int(second[0].id or 0) == int(last_id) + 1, second[0]
    events = first + second
    assert_contiguous(events)
    assert events[-1].event == "exit" and events[-1].json()["exit_code"] == 0
    assert chunks_of(events) == "".join(f"line {i}\n" for i in range(n))

    # A retry without Last-Event-ID replays the same process from its start.
    with client.stream("POST", url, json={"cmd": cmd}, headers=key) as r:
        replay = read_events(r)
    assert replay[0].event == "start"
    assert replay[0].json()["process_id"] == first[0].json()["process_id"]
    assert chunks_of(replay) == chunks_of(events)

    assert run(client, sandbox["id"], cmd="cat runs.log")["stdout"] == "run\n"


def asan_options(extra: str) -> str:
    """ASAN_OPTIONS with `extra` appended to whatever the environment sets."""
    base = os.environ.get("ASAN_OPTIONS", "")
    return f"{base}:{extra}" if base else extra


@pytest.mark.timeout(120)
def test_stalled_skipping_reader_does_not_block_and_gets_gap(daemon_factory: Any) -> None:
    """A skipping reader (flow "skip") that stops reading: the process runs on, memory stays
    bounded, a gap follows."""
    window = 1 << 20
    size = 64 << 20
    # ASan keeps freed blocks in a 256 MB quarantine by default; a small one lets VmRSS show
    # what the daemon itself holds.
    d = daemon_factory(args=["--log-window-bytes", str(window)],
                       env={"ASAN_OPTIONS": asan_options("quarantine_size_mb=8")})
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        run(c, sb, cmd="echo warm")
        memory_before = d.memory_kib()

        body = json.dumps({"cmd": f"head -c {size} /dev/zero | tr '\\0' a",
                           "flow": "skip"}).encode()
        headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
                   "Accept": "text/event-stream", "Idempotency-Key": secrets.token_hex(8)}
        conn = RawSseConnection(d.port, "POST", f"/v1/sandboxes/{sb}/exec/stream", headers, body)
        try:
            assert conn.status == 200, conn.headers
            events_iter = conn.events(limit_seconds=60)
            start = next(events_iter)
            assert start.event == "start"
            pid = start.json()["process_id"]

            # Not reading from here on.
            t0 = time.monotonic()
            memory_peak = memory_before
            proc: dict[str, Any] = {}
            while time.monotonic() - t0 < 15:
                memory_peak = max(memory_peak, d.memory_kib())
                proc = c.get(f"/v1/sandboxes/{sb}/processes/{pid}").json()
                if proc.get("status") == "exited":
                    break
                time.sleep(0.1)
            assert proc.get("status") == "exited", f"still running after 15s: {proc}"
            assert proc["exit_code"] == 0 and proc["reason"] == "exited", proc
            assert proc["stdout_bytes"] == size, proc
            growth_mib = (memory_peak - memory_before) / 1024
            print(f"daemon memory {memory_before} KiB before, peak {memory_peak} KiB")
            assert growth_mib < 32, f"daemon memory grew {growth_mib:.1f} MiB for {size >> 20} MiB"

            events = [start, *events_iter]
        finally:
            conn.close()
        names = [e.event for e in events]
        assert names[-1] == "exit", names[-5:]
        assert "gap" in names
        assert_contiguous(events)
        received = sum(len(e.json()["chunk"]) for e in events if e.event == "stdout")
        skipped = sum(e.json()["bytes"] for e in events if e.event == "gap")
        assert received + skipped == size, (received, skipped)


def test_reconnect_behind_window_gets_gap_first(daemon_factory: Any) -> None:
    """Resuming from seq 1 after the window moved on: a `gap` first, then the retained rest."""
    window = 1 << 20
    size = 8 << 20
    d = daemon_factory(args=["--log-window-bytes", str(window)])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        body = {"cmd": f"head -c {size} /dev/zero | tr '\\0' a"}
        key = {"Idempotency-Key": secrets.token_hex(8)}
        r = c.post(f"/v1/sandboxes/{sb}/exec", json=body, headers=key)
        assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text
        pid = r.json()["process_id"]

        with c.stream("POST", f"/v1/sandboxes/{sb}/exec/stream", json=body,
                      headers={**key, "Last-Event-ID": "1"}) as resp:
            assert resp.status_code == 200
            again = read_events(resp)
        with c.stream("GET", f"/v1/sandboxes/{sb}/processes/{pid}/logs",
                      params={"follow": "1", "since": "1"}) as resp:
            assert resp.status_code == 200
            logs = read_events(resp)

    for events in (again, logs):
        assert events[0].event == "gap" and events[0].json()["from_seq"] == 2, events[0]
        assert events[-1].event == "exit", events[-1]
        assert_contiguous(events, first_seq=2)
        received = sum(len(e.json()["chunk"]) for e in events if e.event == "stdout")
        skipped = sum(e.json()["bytes"] for e in events if e.event == "gap")
        assert received + skipped == size, (received, skipped)
        assert received <= 2 * window, "only about one window is retained"
