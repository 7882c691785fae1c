"""A finished process's exit record and output tail survive a daemon restart."""

from __future__ import annotations

from typing import Any

from helpers import create_sandbox, run


def test_finished_process_survives_restart(daemon_factory: Any) -> None:
    """After SIGTERM and a start on the same data dir, GET and logs return the same record."""
    d = daemon_factory()
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        small = run(c, sb, cmd="echo persisted; echo warn >&2; exit 5")
        big = run(c, sb, cmd="head -c 300000 /dev/zero | tr '\\0' a; echo; echo tail-line")
        before = c.get(f"/v1/sandboxes/{sb}/processes/{small['process_id']}").json()
    assert d.stop() == 0, d.log_tail()

    d2 = daemon_factory(data_dir=d.data_dir)
    with d2.client() as c:
        r = c.get(f"/v1/sandboxes/{sb}/processes/{small['process_id']}")
        assert r.status_code == 200, r.text
        after = r.json()
        for k in ("id", "status", "exit_code", "signal", "reason", "duration_ms", "started_at",
                  "ended_at", "cmd"):
            assert after[k] == before[k], (k, before, after)
        assert after["status"] == "exited" and after["exit_code"] == 5

        logs = c.get(f"/v1/sandboxes/{sb}/processes/{small['process_id']}/logs").json()
        assert logs["stdout"] == "persisted\n" and logs["stderr"] == "warn\n", logs
        assert logs["exit"]["exit_code"] == 5 and logs["exit"]["reason"] == "exited"

        logs = c.get(f"/v1/sandboxes/{sb}/processes/{big['process_id']}/logs").json()
        full = "a" * 300000 + "\ntail-line\n"
        # The retained tail is the last retained_tail_bytes (64 KiB by default) of the output.
        assert logs["stdout"] == full[-65536:], (len(logs["stdout"]), logs["stdout"][-30:])
