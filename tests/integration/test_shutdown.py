"""Graceful shutdown: open streams end with an `error` event, processes die, exit status 0."""

from __future__ import annotations

import signal
import socket
import time
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


def test_idle_keepalive_connections_do_not_delay_shutdown(daemon_factory: Any) -> None:
    """Connections idle between requests close at once on SIGTERM, well inside the grace."""
    d = daemon_factory(["--shutdown-grace-ms", "20000"])
    sockets = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200"), "healthz on a kept-alive connection"
        sockets.append(s)
    started = time.monotonic()
    assert d.stop(timeout=15) == 0, d.log_tail()
    elapsed = time.monotonic() - started
    assert elapsed < 5, f"shutdown took {elapsed:.1f}s with idle keep-alive connections"
    for s in sockets:
        s.settimeout(5)
        assert s.recv(4096) == b"", "the daemon closed the idle connection"
        s.close()
