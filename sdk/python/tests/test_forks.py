"""Forks and snapshots with memory against the real daemon, with both clients: a fork (one, or
`count` of them) goes on with the source's code contexts and processes where they were, a
snapshot with memory is a template whose sandboxes start with them, a fork of files still makes
a template, and what cannot be checkpointed raises `RouteNotImplemented`. Without the daemon:
the bodies sent and the template's `memory` read back."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sandstream import AsyncSandbox, InvalidRequest, Sandbox, Template
from sandstream.errors import RouteNotImplemented
from sandstream.templates import fork_body, fork_call, snapshot_call

from .conftest import Daemon

# The CRIU the daemon checkpoints sandboxes with (its `criu` default); scripts/install-criu
# builds it. Without it, a fork or snapshot with memory answers 501.
CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")
needs_criu = pytest.mark.skipif(
    not os.access(CRIU, os.X_OK),
    reason=f"CRIU is not installed at {CRIU} (scripts/install-criu builds it)")

COUNTER = "i=0; while true; do echo $i > /tmp/count; i=$((i+1)); sleep 0.1; done"


def test_the_fork_body_says_memory_and_a_name_means_files() -> None:
    assert fork_body(None, None, None) == {"memory": True}
    assert fork_body("snap", None, None) == {"memory": False, "name": "snap"}
    assert fork_body(None, False, 3) == {"memory": False, "count": 3}
    assert fork_body("snap", True, None) == {"memory": True, "name": "snap"}  # the daemon's 400
    assert fork_call("/v1/sandboxes/sb_1", None, count=2).json == {"memory": True, "count": 2}
    assert snapshot_call("/v1/sandboxes/sb_1", "t").json == {"name": "t"}
    assert snapshot_call("/v1/sandboxes/sb_1", "t", memory=True).json == {"name": "t", "memory": True}


def test_the_answers_of_a_fork_and_a_templates_memory_are_read() -> None:
    one = {"id": "sb_2", "template": "base", "status": "running"}
    assert [s.id for s in fork_call("/p", None).parse(one)] == ["sb_2"]
    many = {"sandboxes": [one, {**one, "id": "sb_3"}]}
    assert [s.id for s in fork_call("/p", None, count=2).parse(many)] == ["sb_2", "sb_3"]
    base = {"name": "t", "kind": "snapshot", "status": "ready"}
    assert Template.from_json({**base, "memory": True}).memory is True
    assert Template.from_json(base).memory is False  # a server that leaves it out


@needs_criu
def test_a_fork_goes_on_with_the_contexts_and_processes(daemon: Daemon) -> None:
    with Sandbox.create(template="code-interpreter") as sb:
        sb.run_code("x = 41")
        [ctx] = sb.list_code_contexts()
        job = sb.processes.start(COUNTER)
        time.sleep(0.3)
        with sb.fork() as forked:
            assert isinstance(forked, Sandbox) and forked.id != sb.id
            assert forked.info.template == sb.info.template  # no template made
            # The default context carries over: the same context, its variable kept.
            assert forked.run_code("x + 1").text == "42"
            assert [c.id for c in forked.list_code_contexts()] == [ctx.id]
            # The background process too, the same id, still counting.
            copy = forked.processes.get(job.id)
            assert copy.refresh().status == "running"
            first = int(forked.exec("cat /tmp/count").stdout)
            time.sleep(0.4)
            assert int(forked.exec("cat /tmp/count").stdout) > first
            # The fork and the source diverge.
            forked.run_code("x = 0")
            assert sb.run_code("x").text == "41"
            assert forked.run_code("x").text == "0"
        assert sb.run_code("x").text == "41" and job.refresh().status == "running"


@needs_criu
def test_a_fork_with_count_is_a_list_of_sandboxes(daemon: Daemon) -> None:
    with Sandbox.create(template="code-interpreter") as sb:
        sb.run_code("x = 7")
        forks = sb.fork(count=2)
        try:
            assert isinstance(forks, list) and len(forks) == 2
            assert len({sb.id, *(f.id for f in forks)}) == 3
            for i, f in enumerate(forks):
                f.run_code(f"x += {i + 1}")
            assert [f.run_code("x").text for f in forks] == ["8", "9"]
            assert sb.run_code("x").text == "7"
            one = sb.fork(count=1)
            assert isinstance(one, list) and len(one) == 1
            one[0].kill()
        finally:
            for f in forks:
                f.kill()


@needs_criu
def test_a_snapshot_with_memory_starts_its_sandboxes_where_the_source_was(daemon: Daemon) -> None:
    with Sandbox.create(template="code-interpreter") as sb:
        sb.run_code("answer = 6 * 7")
        [ctx] = sb.list_code_contexts()
        job = sb.processes.start(COUNTER)
        time.sleep(0.3)
        t = sb.snapshot("sdk-mem", memory=True)
        assert isinstance(t, Template) and t.memory is True
        assert (t.kind, t.layers_count, t.source) == ("snapshot", 0, sb.id)
        assert Sandbox.get_template("sdk-mem").memory is True
        assert next(x for x in Sandbox.list_templates() if x.name == "sdk-mem").memory
        assert Sandbox.get_template("base").memory is False
        files = sb.snapshot("sdk-files")
        assert files.memory is False and files.kind == "snapshot"
    try:
        with Sandbox.create("sdk-mem") as again:
            assert again.info.template == "sdk-mem"
            assert [c.id for c in again.list_code_contexts()] == [ctx.id]
            assert again.run_code("answer", context=ctx.id).text == "42"
            assert again.processes.get(job.id).refresh().status == "running"
            first = int(again.exec("cat /tmp/count").stdout)
            time.sleep(0.4)
            assert int(again.exec("cat /tmp/count").stdout) > first
    finally:
        for name in ("sdk-mem", "sdk-files"):
            Sandbox.delete_template(name)


def test_a_fork_of_files_with_a_name_makes_that_template(daemon: Daemon) -> None:
    with Sandbox.create(template="base") as sb:
        sb.exec("echo kept > /workspace/f")
        with pytest.raises(InvalidRequest, match="name"):
            sb.fork("sdk-named", memory=True)
        with sb.fork("sdk-named") as forked:  # a name: memory=False
            assert forked.info.template == "sdk-named"
            assert forked.exec("cat /workspace/f").stdout == "kept\n"
            assert forked.info.processes_running == 0  # files only
        forks = sb.fork(memory=False, count=2)
        generated = forks[0].info.template
        try:
            assert len(forks) == 2 and generated.startswith("fork-")
            assert forks[1].info.template == generated  # one snapshot, two forks
            assert [f.exec("cat /workspace/f").stdout for f in forks] == ["kept\n", "kept\n"]
        finally:
            for f in forks:
                f.kill()
    for name in ("sdk-named", generated):
        Sandbox.delete_template(name)


def test_what_cannot_be_checkpointed_raises_route_not_implemented(daemon: Daemon) -> None:
    # A sandbox made from a snapshot of files cannot be checkpointed (nor can any without CRIU).
    with Sandbox.create(template="base") as sb:
        sb.snapshot("sdk-files-only")
    try:
        with Sandbox.create("sdk-files-only") as of_files:
            with pytest.raises(RouteNotImplemented):
                of_files.fork()
            with pytest.raises(RouteNotImplemented):
                of_files.snapshot("sdk-never", memory=True)
            with of_files.fork(memory=False) as forked:  # its files still can be
                generated = forked.info.template
    finally:
        Sandbox.delete_template("sdk-files-only")
    Sandbox.delete_template(generated)


@needs_criu
async def test_the_async_client_forks_with_memory(daemon: Daemon) -> None:
    async with await AsyncSandbox.create(template="code-interpreter") as sb:
        await sb.run_code("x = 5")
        async with await sb.fork() as forked:
            assert isinstance(forked, AsyncSandbox)
            assert (await forked.run_code("x * 2")).text == "10"
        forks = await sb.fork(count=2)
        try:
            assert [(await f.run_code("x")).text for f in forks] == ["5", "5"]
        finally:
            for f in forks:
                await f.kill()
        t = await sb.snapshot("sdk-async-mem", memory=True)
        assert t.memory and t.layers_count == 0
    async with await AsyncSandbox.create("sdk-async-mem") as again:
        contexts = await again.list_code_contexts()
        assert (await again.run_code("x", context=contexts[0])).text == "5"
    await AsyncSandbox.delete_template("sdk-async-mem")
