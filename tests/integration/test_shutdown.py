"""Graceful shutdown: open streams end with an `error` event, processes die, exit status 0."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from helpers import create_sandbox, wait_no_process
from sse import SseEvent, iter_sse


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shutdown_ends_streams_with_error(daemon_factory: Any, marker: str, sig: int) -> None:
    """SIGTERM/SIGINT while a stream is open: `error` shutting_down, no exit, daemon exits 0."""
    d = daemon_factory()
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        with c.stream("POST", f"/v1/sandboxes/{sb}/exec/stream",
                      json={"cmd": f"echo up; sleep {marker}"}) as r:
            assert r.status_code == 200
            it = iter_sse(r)
            seen: list[SseEvent] = []
            for e in it:
                assert isinstance(e, SseEvent)
                seen.append(e)
                if e.event == "stdout":
                    break
            d.send_signal(sig)
            seen += [e for e in it if isinstance(e, SseEvent)]
    names = [e.event for e in seen]
    assert names[-1] == "error" and "exit" not in names, names
    err = seen[-1].json()
    assert err["code"] == "shutting_down" and err["message"], err
    assert seen[-1].id is None
    assert d.stop(timeout=20) == 0, d.log_tail()
    assert wait_no_process(f"sleep {marker}") == []
