"""The asyncio client against the real daemon: the same surface as the sync one."""

from __future__ import annotations

import asyncio
import time

import pytest

import sandstream
from sandstream import AsyncSandbox, CommandFailed, Exit, Start, Stderr, Stdout

from .conftest import Daemon


async def test_create_exec_and_delete_on_exit(daemon: Daemon) -> None:
    async with await AsyncSandbox.create(template="code-interpreter", env={"A": "1"}, timeout=300) as sb:
        assert sb.info.ttl_seconds == 300
        r = await sb.exec("echo $A; echo e >&2; exit 5")
        assert (r.stdout, r.stderr, r.exit_code, r.reason) == ("1\n", "e\n", 5, "exited")
        with pytest.raises(CommandFailed) as info:
            await sb.exec("echo nope; exit 9", check=True)
        assert info.value.exit_code == 9 and "nope" in info.value.output_tail
        other = await AsyncSandbox.connect(sb.id)
        assert (await other.refresh()).id == sb.id
        await other.close()
        assert any(s.id == sb.id for s in await AsyncSandbox.list())
    with pytest.raises(sandstream.NotFound):
        await AsyncSandbox.connect(sb.id)


async def test_async_callbacks_fire_before_exit(daemon: Daemon) -> None:
    async with await AsyncSandbox.create() as sb:
        arrivals: list[tuple[float, str]] = []
        started = time.monotonic()
        errs: list[str] = []
        code = await sb.exec_stream(
            "echo first; sleep 1.5; echo second; echo warn >&2",
            on_stdout=lambda c: arrivals.append((time.monotonic() - started, c)),
            on_stderr=errs.append,
        )
        ended = time.monotonic() - started
        assert code == 0
        assert arrivals[0] == (arrivals[0][0], "first\n") and arrivals[0][0] < ended - 1.0
        assert "".join(c for _, c in arrivals) == "first\nsecond\n" and "".join(errs) == "warn\n"


async def test_async_callbacks_do_not_block_the_loop(daemon: Daemon) -> None:
    async with await AsyncSandbox.create() as sb:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.create_task(ticker())
        await sb.exec_stream("sleep 1; echo done")
        task.cancel()
        assert ticks >= 10


async def test_async_event_iterator_split_utf8_and_timeouts(daemon: Daemon) -> None:
    async with await AsyncSandbox.create() as sb:
        events = [e async for e in sb.exec_events("printf '\\303'; sleep 0.3; printf '\\251\\n'; echo x >&2")]
        assert isinstance(events[0], Start) and isinstance(events[-1], Exit)
        out = [e for e in events if isinstance(e, Stdout)]
        assert b"".join(e.raw for e in out) == b"\xc3\xa9\n" and "".join(e.data for e in out) == "é\n"
        assert "".join(e.data for e in events if isinstance(e, Stderr)) == "x\n"
        exits: list[Exit] = []
        code = await sb.exec_stream("sleep 30", timeout_seconds=0.5, on_exit=exits.append)
        assert code != 0 and exits[0].reason == "timeout"
        with pytest.raises(CommandFailed) as info:
            await sb.exec_stream("echo hi; sleep 30", idle_timeout_seconds=0.5, check=True)
        assert info.value.reason == "idle_timeout" and "hi" in info.value.output_tail


async def test_async_processes(daemon: Daemon) -> None:
    async with await AsyncSandbox.create() as sb:
        p = await sb.processes.start("cat", id="async-cat")
        await p.send_stdin("ping\n")
        await p.close_stdin()
        info = await p.wait(timeout=10)
        assert info.exit_code == 0
        text = "".join([e.data async for e in p.logs(follow=True, since=0) if isinstance(e, Stdout)])
        assert text == "ping\n"
        assert [x.id for x in await sb.processes.list()] == ["async-cat"]
        q = await sb.processes.start("for i in $(seq 1 10); do echo $i; sleep 0.1; done")
        got = ""
        async for event in q.logs():
            if isinstance(event, Stdout):
                got += event.data
                if "3\n" in got:
                    q.disconnect()
        got += "".join([e.data async for e in q.reattach() if isinstance(e, Stdout)])
        assert got == "".join(f"{i}\n" for i in range(1, 11))
        r = await sb.processes.start("sleep 60")
        with pytest.raises(sandstream.Timeout):
            await r.wait(timeout=0.3)
        await r.signal("KILL")
        info = await r.wait(timeout=10)
        assert info.reason == "signaled" and info.signal == "SIGKILL" and info.exit_code == 137
        s = await sb.processes.start("sleep 60")
        assert (await s.kill()).reason == "killed"
        with pytest.raises(sandstream.NotFound):
            await sb.processes.get("missing")
        with pytest.raises(sandstream.Conflict):
            await sb.processes.start("true", id="async-cat")


async def test_async_errors(daemon: Daemon) -> None:
    with pytest.raises(sandstream.Unauthorized):
        await AsyncSandbox.create(api_key="wrong")
    with pytest.raises(sandstream.InvalidRequest, match="template"):
        await AsyncSandbox.create(template="nope")
    async with await AsyncSandbox.create() as sb:
        with pytest.raises(sandstream.InvalidRequest):
            await sb.exec("true", idle_timeout_seconds=0)


async def test_async_auto_pause_mode_and_pause_mode(daemon: Daemon) -> None:
    async with await AsyncSandbox.create(auto_pause=600, auto_pause_mode="checkpoint") as sb:
        assert (sb.info.auto_pause_seconds, sb.info.auto_pause_mode) == (600, "checkpoint")
        info = await sb.set_lifecycle(auto_pause=30, auto_pause_mode="freeze")
        assert (info.auto_pause_seconds, info.auto_pause_mode) == (30, "freeze")
        assert (await sb.refresh()).auto_pause_mode == "freeze"
        with pytest.raises(ValueError, match="auto_pause"):
            await sb.set_lifecycle(auto_pause_mode="checkpoint")
        paused = await sb.pause(mode="freeze")
        assert paused.paused and paused.pause_mode == "freeze"
        assert (await sb.resume()).pause_mode is None
