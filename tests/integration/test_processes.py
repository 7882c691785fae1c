"""Background processes: start, list, get, logs, stdin, signal, kill, wait, idempotency."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx

from helpers import assert_error, pgrep, run, wait_no_process, wait_until
from sse import chunks_of, read_events


def start(c: httpx.Client, sandbox_id: str, headers: dict[str, str] | None = None,
          **body: Any) -> dict[str, Any]:
    """POST .../processes; asserts 201."""
    r = c.post(f"/v1/sandboxes/{sandbox_id}/processes", json=body, headers=headers)
    assert r.status_code == 201, r.text
    proc: dict[str, Any] = r.json()
    return proc


def wait(c: httpx.Client, sandbox_id: str, pid: str, timeout: float = 10) -> dict[str, Any]:
    """GET .../wait; asserts 200."""
    r = c.get(f"/v1/sandboxes/{sandbox_id}/processes/{pid}/wait",
              params={"timeout_seconds": timeout}, timeout=timeout + 10)
    assert r.status_code == 200, r.text
    proc: dict[str, Any] = r.json()
    return proc


def test_caller_id_and_duplicate(client: httpx.Client, sandbox: dict[str, Any],
                                 marker: str) -> None:
    """A caller-chosen id is used as is; the same id again is 409 conflict."""
    sb = sandbox["id"]
    pid = "web-" + secrets.token_hex(4)
    proc = start(client, sb, cmd=f"sleep {marker}", id=pid)
    assert proc["id"] == pid and proc["sandbox_id"] == sb
    assert proc["status"] == "running" and proc["cmd"] == f"sleep {marker}"
    assert isinstance(proc["pid"], int) and proc["exit_code"] is None and proc["ended_at"] is None
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": "true", "id": pid})
    assert_error(r, 409, "conflict")
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": "true", "id": "-bad id"})
    assert_error(r, 400, "invalid_request")
    assert proc["argv"] == ["/bin/sh", "-c", f"sleep {marker}"], "spec: argv of a cmd is /bin/sh -c CMD"


def test_list_filter_and_get(client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    """List filters by status; GET returns the process before and after it exits."""
    sb = sandbox["id"]
    long = start(client, sb, cmd=f"sleep {marker}")
    short = start(client, sb, cmd="exit 6")
    assert long["id"].startswith("proc_") and long["id"] != short["id"]
    wait(client, sb, short["id"])

    def ids(status: str | None) -> set[str]:
        params = {"status": status} if status else None
        r = client.get(f"/v1/sandboxes/{sb}/processes", params=params)
        assert r.status_code == 200, r.text
        return {p["id"] for p in r.json()["processes"]}

    assert {long["id"], short["id"]} <= ids(None)
    assert long["id"] in ids("running") and short["id"] not in ids("running")
    assert short["id"] in ids("exited") and long["id"] not in ids("exited")
    got = client.get(f"/v1/sandboxes/{sb}/processes/{short['id']}").json()
    assert got["status"] == "exited" and got["exit_code"] == 6 and got["reason"] == "exited"
    assert got["ended_at"] and isinstance(got["duration_ms"], int)
    assert_error(client.get(f"/v1/sandboxes/{sb}/processes/proc_0000000000000000"),
                 404, "not_found")


def test_pid_is_the_sandboxs_own(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A process's pid is the one it has in its sandbox: what `$$` says, its parent PID 1, and
    `kill` inside reaches it by that number."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd="echo $$ $PPID; sleep 30")
    assert wait_until(lambda: client.get(
        f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs").json()["stdout"], 5)
    logs = client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs").json()
    assert logs["stdout"] == f"{proc['pid']} 1\n", (logs, proc)
    killed = run(client, sb, cmd=f"kill -TERM {proc['pid']}")
    assert killed["exit_code"] == 0, killed
    done = wait(client, sb, proc["id"])
    assert (done["signal"], done["reason"]) == ("SIGTERM", "signaled"), done


def test_logs_json_since_tail(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """JSON logs: chunks with seq and stream, joined text, since and tail, the exit record."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd="printf a; sleep 0.2; printf b >&2; sleep 0.2; printf c")
    wait(client, sb, proc["id"])
    url = f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs"
    logs = client.get(url).json()
    assert logs["process_id"] == proc["id"]
    assert logs["stdout"] == "ac" and logs["stderr"] == "b", logs
    assert [(ch["stream"], ch["data"]) for ch in logs["chunks"]] == [
        ("stdout", "a"), ("stderr", "b"), ("stdout", "c")], logs
    seqs = [ch["seq"] for ch in logs["chunks"]]
    assert seqs == sorted(seqs) and seqs[0] >= 2 and logs["next_seq"] > seqs[-1]
    assert logs["gap"] is None and logs["exit"]["exit_code"] == 0
    assert logs["exit"]["reason"] == "exited"

    after = client.get(url, params={"since": seqs[0]}).json()
    assert [ch["data"] for ch in after["chunks"]] == ["b", "c"], after
    tail = client.get(url, params={"tail": 1}).json()
    assert [ch["data"] for ch in tail["chunks"]] == ["c"], tail


def test_logs_sse_follow_and_since(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """SSE logs follow a running process live to its exit; since/Last-Event-ID resume."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd="for i in 1 2 3 4 5; do echo $i; sleep 0.1; done")
    url = f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs"
    with client.stream("GET", url, params={"follow": "1"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = read_events(r)
    assert events[0].event == "start" and events[-1].event == "exit"
    assert chunks_of(events) == "1\n2\n3\n4\n5\n"
    third = events[3]
    with client.stream("GET", url, params={"follow": "true", "since": third.id}) as r:
        rest = read_events(r)
    with client.stream("GET", url, headers={"Last-Event-ID": str(third.id),
                                            "Accept": "text/event-stream"}) as r:
        rest_header = read_events(r)
    assert [e.id for e in rest] == [e.id for e in events[4:]]
    assert [e.data for e in rest_header] == [e.data for e in events[4:]]

    with client.stream("GET", url, params={"follow": "1", "format": "cloudflare"}) as r:
        cf = read_events(r)
    # A log stream ends in `exit` (an exec stream in `complete`), every event names the process
    # and carries a string `data`: what Cloudflare's LogEvent readers rely on.
    assert cf[-1].event == "exit" and chunks_of(cf, "stdout", "data") == "1\n2\n3\n4\n5\n"
    assert cf[-1].json()["exitCode"] == 0 and cf[-1].json()["data"] == "Process completed with exit code 0"
    assert all(e.json()["processId"] == proc["id"] and isinstance(e.json()["data"], str) for e in cf)


def test_logs_sse_without_follow_ends(client: httpx.Client, sandbox: dict[str, Any],
                                      marker: str) -> None:
    """Accept: text/event-stream without follow returns what is retained now, then ends."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd=f"echo ready; sleep {marker}")
    url = f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs"
    assert wait_until(lambda: client.get(url).json()["stdout"] == "ready\n", 5)
    t0 = time.monotonic()
    with client.stream("GET", url, headers={"Accept": "text/event-stream"}, timeout=10) as r:
        events = read_events(r)
    assert time.monotonic() - t0 < 5
    assert [e.event for e in events] == ["start", "stdout"], events
    client.delete(f"/v1/sandboxes/{sb}/processes/{proc['id']}")


def test_stdin_and_eof(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Raw and JSON stdin reach `cat`; eof ends it; stdin after the end is 409."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd="cat")
    base = f"/v1/sandboxes/{sb}/processes/{proc['id']}"
    r = client.post(f"{base}/stdin", content=b"hello\n",
                    headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and r.json() == {"written": 6}, r.text
    assert wait_until(lambda: client.get(f"{base}/logs").json()["stdout"] == "hello\n", 5)
    r = client.post(f"{base}/stdin", json={"data": "Ynll", "encoding": "base64", "eof": True})
    assert r.status_code == 200 and r.json() == {"written": 3}, r.text
    done = wait(client, sb, proc["id"])
    assert done["exit_code"] == 0 and done["reason"] == "exited"
    assert client.get(f"{base}/logs").json()["stdout"] == "hello\nbye"
    assert_error(client.post(f"{base}/stdin", json={"data": "x"}), 409, "conflict")

    proc = start(client, sb, cmd="wc -c")
    r = client.post(f"/v1/sandboxes/{sb}/processes/{proc['id']}/stdin", params={"eof": "1"},
                    content=b"12345", headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    wait(client, sb, proc["id"])
    logs = client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs").json()
    assert logs["stdout"].strip() == "5"


def test_signal(client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    """Signals by name, SIG-name and number; an unknown name is 400."""
    sb = sandbox["id"]
    for sig, name, num in (("TERM", "SIGTERM", 15), ("SIGINT", "SIGINT", 2), (9, "SIGKILL", 9)):
        proc = start(client, sb, argv=["sleep", marker])
        url = f"/v1/sandboxes/{sb}/processes/{proc['id']}/signal"
        r = client.post(url, json={"signal": sig})
        assert r.status_code == 200 and r.json()["id"] == proc["id"], r.text
        done = wait(client, sb, proc["id"])
        assert (done["signal"], done["exit_code"], done["reason"]) == (
            name, 128 + num, "signaled"), done
    proc = start(client, sb, argv=["sleep", marker])
    r = client.post(f"/v1/sandboxes/{sb}/processes/{proc['id']}/signal", json={"signal": "NOPE"})
    assert_error(r, 400, "invalid_request")
    client.delete(f"/v1/sandboxes/{sb}/processes/{proc['id']}")


def test_delete_kills_group(client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    """DELETE kills the whole group, waits for it, and reports reason killed."""
    sb = sandbox["id"]
    proc = start(client, sb, cmd=f"sleep {marker} & sleep {marker}")
    assert wait_until(lambda: len(pgrep(f"sleep {marker}")) >= 2, 3)
    r = client.delete(f"/v1/sandboxes/{sb}/processes/{proc['id']}")
    assert r.status_code == 200, r.text
    assert r.json()["reason"] == "killed" and r.json()["status"] == "exited", r.json()
    assert wait_no_process(f"sleep {marker}") == []


def test_wait_timeout(client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    """wait with a timeout that passes first is 408 timeout; the process keeps running."""
    sb = sandbox["id"]
    proc = start(client, sb, argv=["sleep", marker])
    t0 = time.monotonic()
    r = client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/wait",
                   params={"timeout_seconds": 0.5})
    assert_error(r, 408, "timeout")
    assert 0.4 <= time.monotonic() - t0 < 3
    got = client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}").json()
    assert got["status"] == "running"
    client.delete(f"/v1/sandboxes/{sb}/processes/{proc['id']}")


def test_idempotency_key(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A retry with the same key returns the same process and never runs it twice."""
    sb = sandbox["id"]
    key = {"Idempotency-Key": "idem-" + secrets.token_hex(8)}
    cmd = "echo run >> idem.log; sleep 0.3"
    first = start(client, sb, headers=key, cmd=cmd)
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": cmd}, headers=key)
    assert r.status_code in (200, 201), r.text
    assert r.json()["id"] == first["id"]
    wait(client, sb, first["id"])
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": cmd}, headers=key)
    assert r.json()["id"] == first["id"], "a key is remembered as long as its process"
    assert run(client, sb, cmd="cat idem.log")["stdout"] == "run\n"
    r = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": "echo other"}, headers=key)
    assert_error(r, 409, "conflict")

    res1 = client.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "echo x >> e.log; cat e.log"},
                       headers={"Idempotency-Key": "exec-" + key["Idempotency-Key"]}).json()
    res2 = client.post(f"/v1/sandboxes/{sb}/exec", json={"cmd": "echo x >> e.log; cat e.log"},
                       headers={"Idempotency-Key": "exec-" + key["Idempotency-Key"]}).json()
    assert res1["process_id"] == res2["process_id"] and res2["stdout"] == "x\n", (res1, res2)
