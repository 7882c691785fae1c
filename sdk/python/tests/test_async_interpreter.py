"""Code contexts, sessions and files through the asyncio client, against the real daemon."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator

import pytest

from sandstream import AsyncSandbox, ExecutionError, FileEvent, InvalidRequest, NotFound, Result

from .conftest import Daemon


def host_has_matplotlib() -> bool:
    """The code-interpreter template has the host's /usr/bin/python3, so its packages decide
    (not those of whatever python3 comes first in PATH)."""
    if not os.access("/usr/bin/python3", os.X_OK):
        return False
    probe = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True)
    return probe.returncode == 0


async def test_async_run_code_state_callbacks_and_errors(daemon: Daemon) -> None:
    """State persists in the default context; sync and async callbacks see each event once."""
    async with await AsyncSandbox.create(template="code-interpreter") as sb:
        await sb.run_code("import math\nradius = 2")
        seen: list[str] = []

        async def on_stdout(chunk: str) -> None:
            await asyncio.sleep(0)
            seen.append(chunk)

        results: list[Result] = []
        execution = await sb.run_code("print('area')\nround(math.pi * radius ** 2, 2)",
                                      on_stdout=on_stdout, on_result=results.append)
        assert "".join(seen) == "area\n" and "".join(execution.logs.stdout) == "area\n"
        assert execution.text == "12.57" and results == execution.results
        assert execution.error is None and execution.execution_count == 2
        errors: list[ExecutionError] = []
        failed = await sb.run_code("raise ValueError('bad input')", on_error=errors.append)
        assert failed.error is not None and errors == [failed.error]
        assert (failed.error.name, failed.error.value) == ("ValueError", "bad input")
        assert (await sb.run_code("globalThis.n = 40", language="javascript")).error is None
        assert (await sb.run_code("n + 2", language="javascript")).text == "42"


async def test_async_timeout_interrupts_and_contexts_restart(daemon: Daemon) -> None:
    """A cell past its timeout stops on SIGINT with its state kept; restart clears the state."""
    async with await AsyncSandbox.create(template="code-interpreter") as sb:
        ctx = await sb.create_code_context("python")
        await sb.run_code("x = 1", context=ctx)
        slow = await sb.run_code("import time\ntime.sleep(30)", context=ctx, timeout_seconds=1)
        assert slow.error is not None and slow.error.name == "KeyboardInterrupt"
        assert slow.error.timeout and not slow.error.restarted
        assert (await sb.run_code("x", context=ctx.id)).text == "1"
        assert [c.id for c in await sb.list_code_contexts()] == [ctx.id]
        assert (await sb.restart_code_context(ctx)).restarts == 1
        assert (await sb.run_code("'x' in globals()", context=ctx)).text == "False"
        await sb.delete_code_context(ctx)
        assert await sb.list_code_contexts() == []


async def test_async_matplotlib_chart_is_a_png(daemon: Daemon) -> None:
    if not host_has_matplotlib():
        pytest.skip("the host /usr/bin/python3 has no matplotlib, so the code-interpreter template lacks it")
    async with await AsyncSandbox.create(template="code-interpreter") as sb:
        execution = await sb.run_code(
            "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()",
            timeout_seconds=120,
        )
        assert execution.error is None, execution.error
        [chart] = [r for r in execution.results if r.png is not None]
        assert chart.png is not None and chart.png.startswith(b"\x89PNG\r\n\x1a\n")


async def test_async_sessions(daemon: Daemon) -> None:
    """cd and export persist in a session; per-call cwd does not; a deleted session is gone."""
    async with await AsyncSandbox.create() as sb:
        session = await sb.create_session(env={"A": "1"})
        await session.exec("cd /tmp && export B=2")
        assert (await session.exec("pwd; echo $A$B")).stdout == "/tmp\n12\n"
        assert (await session.exec("pwd", cwd="/")).stdout == "/\n"
        chunks: list[str] = []
        assert await session.exec_stream("pwd; exit 3", on_stdout=chunks.append) == 3
        assert "".join(chunks) == "/tmp\n"
        assert (await session.refresh())["commands"] == 4
        await session.delete()
        with pytest.raises(NotFound):
            await session.exec("true")


async def _chunks() -> AsyncIterator[bytes]:
    for i in range(100):
        await asyncio.sleep(0)
        yield bytes([i]) * 1000


async def test_async_files(daemon: Daemon) -> None:
    """Write (text, bytes, sync and async streams), read, list, stat, move, remove; escapes refused."""
    async with await AsyncSandbox.create() as sb:
        info = await sb.files.write("/workspace/a/b.txt", "hello")
        assert info.size == 5 and info.type == "file"
        assert await sb.files.read_text("/workspace/a/b.txt") == "hello"
        await sb.files.write("/workspace/run.sh", b"#!/bin/sh\necho ok\n", mode=0o755)
        assert (await sb.exec("/workspace/run.sh")).stdout == "ok\n"
        streamed = await sb.files.write("/workspace/big", _chunks())
        assert streamed.size == 100_000
        assert await sb.files.read("/workspace/big") == b"".join(bytes([i]) * 1000 for i in range(100))
        plain = await sb.files.write("/workspace/small", (b"x" * 10 for _ in range(3)))
        assert plain.size == 30
        assert {f.name for f in await sb.files.list("/workspace")} == {"a", "run.sh", "big", "small"}
        assert (await sb.files.stat("/workspace/a")).is_dir
        made = await sb.files.mkdir("/workspace/d/e", mode="0700")
        assert made.is_dir and made.mode == "0700"
        await sb.files.move("/workspace/a/b.txt", "/workspace/c.txt")
        assert await sb.files.exists("/workspace/c.txt")
        assert not await sb.files.exists("/workspace/a/b.txt")
        await sb.files.remove("/workspace/d", recursive=True)
        assert not await sb.files.exists("/workspace/d")
        with pytest.raises(InvalidRequest) as escape:
            await sb.files.read("../../etc/passwd")
        assert escape.value.status == 400
        with pytest.raises(InvalidRequest):
            await sb.files.write("../../etc/passwd", "x")
        with pytest.raises(NotFound):
            await sb.files.read("/workspace/a/b.txt")


async def test_async_watch_reports_a_created_file(daemon: Daemon) -> None:
    async with await AsyncSandbox.create() as sb:
        await sb.files.mkdir("/workspace/w")
        first: asyncio.Future[FileEvent] = asyncio.get_running_loop().create_future()

        async def watch() -> None:
            async for event in sb.files.watch("/workspace/w"):
                first.set_result(event)
                return

        task = asyncio.create_task(watch())
        # Until the watch is in place writes go unseen: write new files until one is reported.
        for i in range(200):
            await sb.files.write(f"/workspace/w/f{i}.txt", "1")
            try:
                event = await asyncio.wait_for(asyncio.shield(first), 0.05)
                break
            except asyncio.TimeoutError:
                continue
        else:
            pytest.fail("no watch event within 200 writes")
        await task
        assert event.type in ("create", "modify") and not event.is_dir
        assert event.path.startswith("/workspace/w/f") and event.path.endswith(".txt")
