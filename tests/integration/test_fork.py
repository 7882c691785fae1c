"""Forks with memory: POST /v1/sandboxes/{id}/fork checkpoints a running sandbox with CRIU (it
keeps running, stopped only while it is written) and restores `count` new sandboxes from that
one checkpoint. Each fork has its own id, hostname, host uid range and copy of the writable
files; the source's processes run on in it with the same ids and pids, their logs carrying on
with nothing lost or repeated, and its code contexts hold their variables. Forks diverge from
each other and from the source, which runs on with its own log stream unbroken. A paused source
is resumed first; what cannot be checkpointed is a 501; bad bodies are a 400; forks count
against quotas, outlive a daemon SIGKILL, and can be forked again. With "memory": false a fork
is still a snapshot template and sandboxes of its files.

Everything runs against the real daemon and the real CRIU; effects are checked from outside
(what the sandboxes' processes answer, the log streams, the host's process table)."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import images
from helpers import (Daemon, assert_error, create_sandbox, pause, pgrep, run, tenant,
                     wait_no_process, wait_until)
from sse import SseEvent, read_events

CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")
if not os.access(CRIU, os.X_OK):
    pytest.skip(f"CRIU is not installed at {CRIU} (scripts/install-criu builds it); "
                "forks with memory cannot be tested", allow_module_level=True)

# After the guard: test_checkpoint's own guard skips the same way.
from test_checkpoint import (COUNTER, KEEP, Stream, cmdline_inside, get, process,  # noqa: E402
                             start)

TAR = {"Content-Type": "application/x-tar"}


def fork(c: httpx.Client, sb: str, **body: Any) -> dict[str, Any]:
    """POST .../fork with `body`; asserts 201 and returns the answer."""
    r = c.post(f"/v1/sandboxes/{sb}/fork", json=body, timeout=120)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def sh(c: httpx.Client, sb: str, cmd: str) -> str:
    out = run(c, sb, cmd=cmd)
    assert out["exit_code"] == 0, out
    return str(out["stdout"])


def cell(c: httpx.Client, sb: str, ctx: str, code: str) -> list[dict[str, Any]]:
    """Runs `code` in context `ctx` (SSE); the MIME bundles of its `result` events."""
    with c.stream("POST", f"/v1/sandboxes/{sb}/contexts/{ctx}/run", json={"code": code}) as r:
        assert r.status_code == 200, r.read()
        events: list[SseEvent] = read_events(r, stop_after=frozenset({"exit", "error"}),
                                             limit_seconds=30)
    assert events and events[-1].event == "exit", [(e.event, e.data) for e in events]
    return [e.json()["data"] for e in events if e.event == "result"]


def value_of(c: httpx.Client, sb: str, ctx: str, expr: str) -> str:
    """The text/plain result of `expr` in the context."""
    got = cell(c, sb, ctx, expr)
    assert len(got) == 1, got
    return str(got[0]["text/plain"])


def ids_of(c: httpx.Client) -> set[str]:
    return {s["id"] for s in c.get("/v1/sandboxes").json()["sandboxes"]}


def assert_running_process(c: httpx.Client, sb: str, proc: dict[str, Any]) -> None:
    got = process(c, sb, proc["id"])
    assert got["status"] == "running" and got["pid"] == proc["pid"], (sb, got)


@contextlib.contextmanager
def deleted_after(c: httpx.Client) -> Iterator[list[str]]:
    """A list of sandbox ids the test appends to; each is deleted afterwards, newest first."""
    made: list[str] = []
    try:
        yield made
    finally:
        for sb in reversed(made):
            with contextlib.suppress(httpx.HTTPError):
                c.delete(f"/v1/sandboxes/{sb}")


def test_five_forks_of_a_python_context_hold_its_variables_each_and_diverge(
        client: httpx.Client) -> None:
    with deleted_after(client) as made:
        src = create_sandbox(client, template="code-interpreter")["id"]
        made.append(src)
        r = client.post(f"/v1/sandboxes/{src}/contexts", json={"language": "python"})
        assert r.status_code == 201, r.text
        ctx = r.json()["id"]
        assert cell(client, src, ctx, "x = 41") == []
        sh(client, src, "echo before > /workspace/f")
        answer = fork(client, src, count=5)
        assert set(answer) == {"sandboxes"}, answer
        forks = [f["id"] for f in answer["sandboxes"]]
        made += forks
        assert len(set(forks)) == 5 and src not in forks, forks
        for f in answer["sandboxes"]:
            assert f["status"] == "running" and f["template"] == "code-interpreter", f
        assert set(forks) <= ids_of(client)
        # The context is in each, with the same id and its variable.
        for f in forks:
            assert value_of(client, f, ctx, "x + 1") == "42", f
            contexts = client.get(f"/v1/sandboxes/{f}/contexts").json()
            assert ctx in [c["id"] for c in contexts["contexts"]], contexts
        # Each goes its own way; the source keeps its own.
        for i, f in enumerate(forks):
            assert cell(client, f, ctx, f"x = {100 * (i + 1)}") == []
        sh(client, src, "echo after > /workspace/f")
        sh(client, forks[0], "echo only-in-0 > /workspace/mine")
        for i, f in enumerate(forks):
            assert value_of(client, f, ctx, "x") == str(100 * (i + 1)), f
            assert sh(client, f, "cat /workspace/f") == "before\n", f
            assert sh(client, f, "ls /workspace") == ("f\nmine\n" if i == 0 else "f\n"), f
        assert value_of(client, src, ctx, "x") == "41"
        assert sh(client, src, "cat /workspace/f; ls /workspace") == "after\nf\n"
        # Each its own name and its own uids on the host.
        for sb in (src, *forks):
            assert sh(client, sb, "hostname; cat /etc/hostname") == f"{sb}\n" * 2
        maps = {sh(client, sb, "cat /proc/self/uid_map") for sb in (src, *forks)}
        assert len(maps) == 6, maps
        # A fork of a fork: what the first fork holds now.
        again = fork(client, forks[0])
        made.append(again["id"])
        assert again["id"] not in [src, *forks]
        assert value_of(client, again["id"], ctx, "x") == "100"
        assert sh(client, again["id"], "hostname; cat /workspace/mine") == \
            f"{again['id']}\nonly-in-0\n"
        assert value_of(client, forks[0], ctx, "x") == "100"


def test_a_forks_counter_goes_on_from_its_log_while_the_sources_stream_goes_on_too(
        daemon: Daemon, client: httpx.Client, marker: str) -> None:
    with deleted_after(client) as made:
        src = create_sandbox(client)["id"]
        made.append(src)
        sh(client, src, "echo at-fork > /workspace/f; echo home > /home/user/h")
        counter = start(client, src, cmd=f"{COUNTER}; : {marker}")
        stream = Stream(daemon, src, counter["id"])
        streams = [stream]
        try:
            assert stream.read(5, until=10)
            host = pgrep(marker)
            assert len(host) == 1, host
            f = fork(client, src)
            # Without count: the fork's own sandbox object, as a GET answers it.
            assert f["id"] != src and f["status"] == "running", f
            assert f["template"] == "base" and f["processes_running"] == 1, f
            made.append(f["id"])
            got = get(client, f["id"])
            assert set(got) == set(f) and got["id"] == f["id"], (got, f)
            # The counter runs on in the fork: the same process, and one more on the host.
            assert_running_process(client, f["id"], counter)
            assert "while true" in cmdline_inside(client, f["id"], counter["pid"])
            assert wait_until(lambda: len(pgrep(marker)) == 2, 5), pgrep(marker)
            assert host[0] in pgrep(marker), (host, pgrep(marker))
            # Its log holds the source's lines up to the fork, then goes on with the next.
            in_fork = Stream(daemon, f["id"], counter["id"])
            streams.append(in_fork)
            last = stream.numbers[-1]
            in_fork.read(10, until=last + 20)
            in_fork.assert_continuous()
            assert in_fork.numbers[-1] >= last + 20, in_fork.numbers
            # The source's stream was never broken: every number once, in order.
            stream.read(10, until=in_fork.numbers[-1])
            stream.assert_continuous()
            assert stream.numbers[-1] >= last + 20, stream.numbers
            assert not stream.ended.is_set() and not in_fork.ended.is_set()
            assert_running_process(client, src, counter)
            # Its own name, its own uids on the host, its own copy of the files.
            assert sh(client, f["id"], "hostname; cat /etc/hostname") == f"{f['id']}\n" * 2
            hosts = sh(client, f["id"], "grep '^127.0.1.1' /etc/hosts")
            assert f["id"] in hosts and src not in hosts, hosts
            assert src in sh(client, src, "grep '^127.0.1.1' /etc/hosts")
            assert sh(client, src, "hostname") == f"{src}\n"
            maps = {sb: sh(client, sb, "cat /proc/self/uid_map") for sb in (src, f["id"])}
            assert maps[src] != maps[f["id"]], maps
            assert sh(client, f["id"], "cat /workspace/f /home/user/h") == "at-fork\nhome\n"
            sh(client, f["id"], "echo fork > /workspace/f; echo new > /workspace/n")
            assert sh(client, src, "cat /workspace/f; ls /workspace") == "at-fork\nf\n"
            sh(client, src, "echo source > /home/user/h")
            assert sh(client, f["id"], "cat /home/user/h /workspace/f") == "home\nfork\n"
            # Its processes are its own: a kill in the fork leaves the source's counter be.
            r = client.delete(f"/v1/sandboxes/{f['id']}/processes/{counter['id']}")
            assert r.status_code in (200, 202, 204), r.text
            assert wait_until(
                lambda: process(client, f["id"], counter["id"])["status"] != "running", 5)
            assert wait_until(lambda: pgrep(marker) == host, 5), (host, pgrep(marker))
            assert_running_process(client, src, counter)
            before = stream.numbers[-1]
            assert stream.read(5, until=before + 5)[-1] >= before + 5
            stream.assert_continuous()
            # Deleted, the fork goes; the source runs on.
            assert client.delete(f"/v1/sandboxes/{f['id']}").status_code == 204
            assert_error(client.get(f"/v1/sandboxes/{f['id']}"), 404, "not_found")
            assert_running_process(client, src, counter)
            assert pgrep(marker) == host, (host, pgrep(marker))
        finally:
            for s in streams:
                s.close()
    assert wait_no_process(marker, 5) == []


def test_fork_refuses_bad_bodies_and_a_paused_sandbox_that_will_not_resume(
        client: httpx.Client, sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    before = ids_of(client)
    url = f"/v1/sandboxes/{sb}/fork"
    for body in ({"name": "mine"}, {"memory": True, "name": "mine"}, {"count": 0},
                 {"count": 33}, {"count": "x"}, {"count": 1.5}, {"count": -1}, {"count": True},
                 {"memory": "yes"}, {"memory": 1}, {"memory": False, "name": 5}):
        err = assert_error(client.post(url, json=body), 400, "invalid_request")
        assert err["message"], (body, err)
    assert_error(client.post(url, content=b"{not json",
                             headers={"Content-Type": "application/json"}), 400, "invalid_json")
    assert_error(client.post("/v1/sandboxes/sb_nope/fork", json={}), 404, "not_found")
    assert ids_of(client) == before, "a refused fork left a sandbox"
    assert not [t for t in client.get("/v1/templates").json()["templates"]
                if t.get("source") == sb], "a refused fork left a template"
    # A paused sandbox that does not resume by itself is not forked.
    held = create_sandbox(client, auto_resume=False)["id"]
    try:
        pause(client, held, mode="freeze")
        err = assert_error(client.post(f"/v1/sandboxes/{held}/fork", json={}), 409, "paused")
        assert "resume" in err["message"], err
        assert get(client, held)["status"] == "paused"
        assert ids_of(client) == before | {held}
    finally:
        client.delete(f"/v1/sandboxes/{held}")


def refused(c: httpx.Client, sb: str, word: str) -> None:
    """A fork with memory of `sb` is 501 not_implemented naming `word`; nothing is made and it
    runs on as it was."""
    before = ids_of(c)
    sleeper = start(c, sb, cmd="sleep 600")
    for body in ({}, {"memory": True, "count": 3}):
        err = assert_error(c.post(f"/v1/sandboxes/{sb}/fork", json=body), 501,
                           "not_implemented")
        assert word in err["message"], err
    assert ids_of(c) == before, "a refused fork left a sandbox"
    assert get(c, sb)["status"] == "running"
    assert_running_process(c, sb, sleeper)
    assert sh(c, sb, "echo alive") == "alive\n"


def test_a_fork_with_memory_of_what_cannot_be_checkpointed_is_501_and_it_runs_on(
        client: httpx.Client) -> None:
    vol = f"fork-{secrets.token_hex(4)}"
    image = f"fork-img-{secrets.token_hex(4)}"
    snap = f"fork-snap-{secrets.token_hex(4)}"
    templates: list[str] = []
    try:
        with deleted_after(client) as made:
            r = client.post("/v1/volumes", json={"name": vol, "size_mb": 16})
            assert r.status_code == 201, r.text
            made.append(create_sandbox(client, volumes=[{"name": vol, "path": "/mnt/v"}])["id"])
            refused(client, made[-1], "volumes")
            r = client.post("/v1/templates", params={"name": image},
                            content=images.tiny_image().oci_archive(), headers=TAR, timeout=120)
            assert r.status_code == 201, r.text
            templates.append(image)
            made.append(create_sandbox(client, template=image)["id"])
            refused(client, made[-1], "image template")
            r = client.post(f"/v1/sandboxes/{made[1]}/snapshot", json={"name": snap})
            assert r.status_code == 201, r.text
            templates.append(snap)
            made.append(create_sandbox(client, template=snap)["id"])
            refused(client, made[-1], "snapshot")
            # Its files can still be forked.
            sh(client, made[-1], "echo files > /home/app/f")
            files = fork(client, made[-1], memory=False)
            made.append(files["id"])
            templates.append(files["template"])
            assert files["template"].startswith("fork-"), files
            assert sh(client, files["id"], "cat /home/app/f") == "files\n"
            assert client.get(f"/v1/sandboxes/{files['id']}/processes",
                              params={"status": "running"}).json()["processes"] == []
    finally:
        wait_until(lambda: client.delete(f"/v1/volumes/{vol}").status_code in (204, 404), 10,
                   0.2)
        for name in reversed(templates):
            client.delete(f"/v1/templates/{name}")


def test_a_fork_of_files_makes_a_template_and_its_sandboxes(client: httpx.Client) -> None:
    name = f"fork-files-{secrets.token_hex(4)}"
    templates: list[str] = []
    try:
        with deleted_after(client) as made:
            src = create_sandbox(client, env={"MINE": "1"})["id"]
            made.append(src)
            sleeper = start(client, src, cmd="sleep 600")
            sh(client, src, "echo files > /workspace/f")
            answer = fork(client, src, memory=False, count=2, name=name)
            assert set(answer) == {"sandboxes"}, answer
            templates.append(name)
            made += [f["id"] for f in answer["sandboxes"]]
            assert len(answer["sandboxes"]) == 2
            for f in answer["sandboxes"]:
                assert f["template"] == name and f["env"] == {"MINE": "1"}, f
                assert f["processes_running"] == 0, f
                assert sh(client, f["id"], "cat /workspace/f; echo $MINE") == "files\n1\n"
                assert_error(client.get(f"/v1/sandboxes/{f['id']}/processes/{sleeper['id']}"),
                             404, "not_found")
            t = client.get(f"/v1/templates/{name}").json()
            assert t["kind"] == "snapshot" and t["source"] == src, t
            one = fork(client, src, memory=False)
            made.append(one["id"])
            templates.append(one["template"])
            assert one["template"].startswith("fork-") and one["template"] != name, one
            assert_running_process(client, src, sleeper)
            # "name": null is no name, with memory or without.
            mem = fork(client, src, name=None)
            made.append(mem["id"])
            assert mem["template"] == "base", mem
            assert_running_process(client, mem["id"], sleeper)
    finally:
        for t in templates:
            assert client.delete(f"/v1/templates/{t}").status_code == 204


def test_a_fork_has_its_sources_settings(client: httpx.Client) -> None:
    settings = {"env": {"MINE": "1"}, "cwd": "/tmp", "ttl_seconds": 900,
                "limits": {"memory_mb": 384, "pids": 77}, "metadata": {"team": "a"},
                "auto_resume": False, "on_timeout": "pause",
                "auto_pause": {"idle_seconds": 600, "mode": "checkpoint"}}
    with deleted_after(client) as made:
        src = create_sandbox(client, **settings)
        made.append(src["id"])
        for f in [fork(client, src["id"]), fork(client, src["id"], memory=False)]:
            made.append(f["id"])
            for key in ("env", "cwd", "metadata", "auto_resume", "on_timeout", "auto_pause",
                        "ttl_seconds"):
                assert f[key] == src[key], (key, f[key], src[key])
            assert f["limits"]["memory_mb"] == 384 and f["limits"]["pids"] == 77, f
            if f["template"] != "base":
                assert client.delete(f"/v1/sandboxes/{f['id']}").status_code == 204
                assert client.delete(f"/v1/templates/{f['template']}").status_code == 204


def test_a_paused_sandbox_is_resumed_and_forked(client: httpx.Client, marker: str) -> None:
    with deleted_after(client) as made:
        src = create_sandbox(client)["id"]
        made.append(src)
        sleeper = start(client, src, argv=["sleep", marker])
        for mode in ("checkpoint", "freeze"):
            paused = pause(client, src, mode=mode)
            assert paused["status"] == "paused" and paused["pause_mode"] == mode, paused
            f = fork(client, src)
            made.append(f["id"])
            assert f["status"] == "running" and f["processes_running"] == 1, f
            got = get(client, src)
            assert got["status"] == "running" and got["pause_mode"] is None, got
            assert_running_process(client, src, sleeper)
            assert_running_process(client, f["id"], sleeper)
            assert "sleep" in cmdline_inside(client, f["id"], sleeper["pid"])
        # The source's sleeper and one in each fork, on the host.
        assert wait_until(lambda: len(pgrep(marker)) == 3, 5), pgrep(marker)
        assert sh(client, made[1], "hostname") == f"{made[1]}\n"
        assert sh(client, made[2], "hostname") == f"{made[2]}\n"
    assert wait_no_process(marker, 5) == []


def test_forks_count_against_the_tenants_quota_all_or_none(client: httpx.Client) -> None:
    name = f"forkq{secrets.token_hex(4)}"
    key = tenant(client, name, sandboxes=3)
    try:
        with httpx.Client(base_url=str(client.base_url), timeout=120,
                          headers={"Authorization": f"Bearer {key}"}) as t, \
                deleted_after(t) as made:
            made.append(create_sandbox(t)["id"])
            err = assert_error(t.post(f"/v1/sandboxes/{made[0]}/fork", json={"count": 3}), 429,
                               "quota_exceeded")
            assert "sandboxes 3" in err["message"], err
            assert ids_of(t) == {made[0]}, "a fork over the quota left some of its sandboxes"
            answer = fork(t, made[0], count=2)
            made += [f["id"] for f in answer["sandboxes"]]
            assert all(f["tenant"] == name for f in answer["sandboxes"]), answer
            assert t.get("/v1/usage").json()["usage"]["sandboxes"] == 3
            assert_error(t.post(f"/v1/sandboxes/{made[1]}/fork", json={}), 429, "quota_exceeded")
            assert sh(t, made[2], "hostname") == f"{made[2]}\n"
    finally:
        client.delete(f"/v1/admin/tenants/{name}")


@pytest.mark.timeout(150)
def test_forks_and_their_processes_outlive_a_daemon_sigkill(daemon_factory: Any,
                                                            marker: str) -> None:
    """A code-interpreter sandbox with a counter and a context holding x = 41, forked twice;
    the daemon SIGKILLed and started again on its data directory: each fork is back with its
    counter running on from its log and its context still holding its own x."""
    d = daemon_factory(args=KEEP)
    made: list[str] = []
    alive = d
    try:
        with d.client(timeout=120) as c:
            made.append(create_sandbox(c, template="code-interpreter")["id"])
            src = made[0]
            counter = start(c, src, cmd=f"{COUNTER}; : {marker}")
            r = c.post(f"/v1/sandboxes/{src}/contexts", json={"language": "python"})
            assert r.status_code == 201, r.text
            ctx = r.json()["id"]
            assert cell(c, src, ctx, "x = 41") == []
            logs = f"/v1/sandboxes/{src}/processes/{counter['id']}/logs"
            assert wait_until(lambda: len(c.get(logs).json()["stdout"].split()) > 5, 5)
            forks = [f["id"] for f in fork(c, src, count=2)["sandboxes"]]
            made += forks
            assert cell(c, forks[0], ctx, "x = 1") == []
            assert wait_until(lambda: len(pgrep(marker)) == 3, 5), pgrep(marker)
        d.kill()
        alive = d2 = daemon_factory(data_dir=d.data_dir, args=KEEP)
        with d2.client(timeout=120) as c:
            assert set(made) <= ids_of(c)
            for sb in made:
                assert get(c, sb)["status"] == "running"
                assert sh(c, sb, "hostname") == f"{sb}\n"
            assert value_of(c, forks[0], ctx, "x + 1") == "2"
            assert value_of(c, forks[1], ctx, "x + 1") == "42"
            assert value_of(c, src, ctx, "x + 1") == "42"
            for sb in made:
                assert_running_process(c, sb, counter)
            assert len(pgrep(marker)) == 3, pgrep(marker)
            # A fork's whole log, from the source's first line, going on.
            held = len(c.get(f"/v1/sandboxes/{forks[1]}/processes/{counter['id']}/logs")
                       .json()["stdout"].split())
            stream = Stream(d2, forks[1], counter["id"])
            try:
                stream.read(10, until=held + 10)
                stream.assert_continuous()
                assert stream.numbers[-1] >= held + 10, stream.numbers
            finally:
                stream.close()
    finally:
        # Started with --teardown-on-exit false: its sandboxes outlive it unless deleted.
        if alive.alive():
            with alive.client(timeout=60) as c:
                for sb in reversed(made):
                    c.delete(f"/v1/sandboxes/{sb}")
    assert wait_no_process(marker, 5) == []
