"""Persistent shell sessions: state persists between commands, per-call env and cwd do not
leak, framing stays exact, commands run one at a time, and a deleted session is gone."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from helpers import assert_error, run
from sse import read_events


def new_session(c: httpx.Client, sb: dict[str, Any], **body: Any) -> dict[str, Any]:
    """POST .../sessions; asserts 201."""
    r = c.post(f"/v1/sandboxes/{sb['id']}/sessions", json=body)
    assert r.status_code == 201, r.text
    s: dict[str, Any] = r.json()
    return s


def test_cd_and_export_persist(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """cd, export, shell variables, functions and aliases survive to the next command."""
    s = new_session(client, sandbox)
    assert s["id"].startswith("sess_") and s["cwd"] == "/workspace" and s["busy"] is False
    sid = s["id"]
    run(client, sandbox["id"], session=sid, cmd="mkdir -p /tmp/here && cd /tmp/here && export GREETING=hi; "
                                               "count=3; twice() { echo \"$1$1\"; }; alias say='echo said'; "
                                               "umask 027")
    res = run(client, sandbox["id"], session=sid, cmd="pwd; echo $GREETING $count; twice ab; say; "
                                                     "sh -c 'echo child:$GREETING'; umask")
    assert res["stdout"] == "/tmp/here\nhi 3\nabab\nsaid\nchild:hi\n0027\n", res
    # Outside the session nothing of it exists.
    plain = run(client, sandbox["id"], cmd="pwd; echo ${GREETING-unset}")
    assert plain["stdout"] == "/workspace\nunset\n"
    got = client.get(f"/v1/sandboxes/{sandbox['id']}/sessions/{sid}").json()
    assert got["commands"] == 2


def test_unset_and_exit_codes(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """`unset` of an environment variable persists; `exit N` and `set -e` keep their codes."""
    s = new_session(client, sandbox, env={"FROM_SESSION": "1"})
    sid = s["id"]
    assert run(client, sandbox["id"], session=sid, cmd="echo $FROM_SESSION")["stdout"] == "1\n"
    run(client, sandbox["id"], session=sid, cmd="unset FROM_SESSION")
    assert run(client, sandbox["id"], session=sid, cmd="echo ${FROM_SESSION-gone}")["stdout"] == "gone\n"
    res = run(client, sandbox["id"], session=sid, cmd="cd /tmp; exit 7")
    assert res["exit_code"] == 7
    assert run(client, sandbox["id"], session=sid, cmd="pwd")["stdout"] == "/tmp\n"
    res = run(client, sandbox["id"], session=sid, cmd="set -e; false; echo not-here")
    assert res["exit_code"] == 1 and res["stdout"] == ""
    res = run(client, sandbox["id"], session=sid, cmd="false; echo still-set-e")
    assert res["exit_code"] == 1 and res["stdout"] == "", res


def test_per_call_env_and_cwd_do_not_leak(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A command with its own env or cwd sees them; the session keeps its own state."""
    sid = new_session(client, sandbox)["id"]
    run(client, sandbox["id"], session=sid, cmd="export MODE=session; cd /tmp")
    res = run(client, sandbox["id"], session=sid, cmd="echo $MODE $EXTRA; pwd; cd /; export MODE=changed",
              env={"EXTRA": "x", "MODE": "call"}, cwd="/workspace")
    assert res["stdout"] == "call x\n/workspace\n", res
    after = run(client, sandbox["id"], session=sid, cmd="echo $MODE ${EXTRA-none}; pwd")
    assert after["stdout"] == "session none\n/tmp\n", after


def test_framing_is_exact(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """No trailing newline, stdin reads, and stderr all come back exactly, command by command."""
    sid = new_session(client, sandbox)["id"]
    a = run(client, sandbox["id"], session=sid, cmd="printf 'no newline'")
    b = run(client, sandbox["id"], session=sid, cmd="cat; printf err >&2", stdin="line1\nline2")
    c = run(client, sandbox["id"], session=sid, cmd="read x; echo got:$x")
    assert a["stdout"] == "no newline" and a["stderr"] == ""
    assert b["stdout"] == "line1\nline2" and b["stderr"] == "err"
    assert c["stdout"] == "got:\n" and c["exit_code"] == 0


def test_stream_in_session(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """exec/stream takes `session` too, with the usual events."""
    sid = new_session(client, sandbox)["id"]
    run(client, sandbox["id"], session=sid, cmd="cd /etc")
    with client.stream("POST", f"/v1/sandboxes/{sandbox['id']}/exec/stream",
                       json={"cmd": "pwd; exit 2", "session": sid}) as r:
        events = read_events(r)
    names = [e.event for e in events]
    assert names[0] == "start" and names[-1] == "exit", names
    assert "".join(e.json()["chunk"] for e in events if e.event == "stdout") == "/etc\n"
    assert events[-1].json()["exit_code"] == 2


def test_one_at_a_time(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A second command waits for the first; order of arrival is order of execution."""
    sid = new_session(client, sandbox)["id"]
    results: dict[str, dict[str, Any]] = {}

    def go(name: str, cmd: str) -> None:
        results[name] = run(client, sandbox["id"], session=sid, cmd=cmd)

    first = threading.Thread(target=go, args=("first", "sleep 0.5; echo 1 >> /tmp/order; export LAST=first"))
    first.start()
    time.sleep(0.2)
    assert client.get(f"/v1/sandboxes/{sandbox['id']}/sessions/{sid}").json()["busy"] is True
    second = threading.Thread(target=go, args=("second", "echo 2 >> /tmp/order; echo $LAST"))
    second.start()
    first.join(10)
    second.join(10)
    assert results["second"]["stdout"] == "first\n"
    assert run(client, sandbox["id"], cmd="cat /tmp/order")["stdout"] == "1\n2\n"


def test_errors_and_delete(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Unknown sessions are 404; root is refused; a deleted session is gone; ids can be chosen."""
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec", json={"cmd": "true", "session": "sess_none"})
    assert_error(r, 404, "not_found")
    s = new_session(client, sandbox, id="mine", cwd="/tmp")
    assert s["id"] == "mine" and s["cwd"] == "/tmp"
    assert_error(client.post(f"/v1/sandboxes/{sandbox['id']}/sessions", json={"id": "mine"}), 409, "conflict")
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec", json={"cmd": "id", "session": "mine", "user": "root"})
    assert_error(r, 400, "invalid_request")
    assert run(client, sandbox["id"], session="mine", cmd="pwd")["stdout"] == "/tmp\n"
    listed = client.get(f"/v1/sandboxes/{sandbox['id']}/sessions").json()["sessions"]
    assert [x["id"] for x in listed] == ["mine"]
    assert client.delete(f"/v1/sandboxes/{sandbox['id']}/sessions/mine").status_code == 204
    assert_error(client.get(f"/v1/sandboxes/{sandbox['id']}/sessions/mine"), 404, "not_found")
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec", json={"cmd": "true", "session": "mine"})
    assert_error(r, 404, "not_found")


def test_a_strict_umask_keeps_the_session(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """umask 0477 applies to the next commands and does not make the saved state unreadable."""
    sid = new_session(client, sandbox)["id"]
    run(client, sandbox["id"], session=sid, cmd="cd /tmp && X=1 && umask 0477")
    res = run(client, sandbox["id"], session=sid, cmd="pwd; echo X=$X; umask; touch f; stat -c %a f")
    assert res["stdout"] == "/tmp\nX=1\n0477\n200\n", res
