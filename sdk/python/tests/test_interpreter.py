"""Code contexts, sessions and files through the Python SDK, against the real daemon."""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sandstream import ExecutionError, FileEvent, InvalidRequest, NotFound, Result, Sandbox

from .conftest import Daemon


@pytest.fixture
def ci(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create(template="code-interpreter") as sandbox:
        yield sandbox


def test_run_code_state_results_and_callbacks(ci: Sandbox) -> None:
    """State persists in the default context; callbacks see output live; results are bundles."""
    seen: list[str] = []
    ci.run_code("import math\nradius = 2", on_stdout=seen.append)
    execution = ci.run_code("print('area')\nround(math.pi * radius ** 2, 2)", on_stdout=seen.append)
    # Chunks are what each read returned: `print` may arrive as "area" and "\n".
    assert "".join(seen) == "area\n"
    assert "".join(execution.logs.stdout) == "area\n" and execution.error is None
    assert execution.text == "12.57"
    assert [r.is_main_result for r in execution.results] == [True]


def test_cells_reuse_one_connection(ci: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell's stream ends right after its exit event, and the SDK reads that end: the next
    call goes over the same kept-alive connection, not a new one."""
    assert ci.run_code("0").text == "0"  # the default context made, a connection open
    opened: list[object] = []
    connect = socket.socket.connect

    def counting(self: socket.socket, address: object) -> None:
        opened.append(address)
        connect(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", counting)
    for i in range(5):
        assert ci.run_code(f"{i} + 1").text == str(i + 1)
    assert opened == []


def test_error_object(ci: Sandbox) -> None:
    """A raised exception is `.error` with name, value and traceback."""
    errors: list[ExecutionError] = []
    execution = ci.run_code("raise ValueError('bad input')", on_error=errors.append)
    assert execution.error is not None and errors == [execution.error]
    assert (execution.error.name, execution.error.value) == ("ValueError", "bad input")
    assert "ValueError: bad input" in execution.error.traceback


def test_chart_png_and_timeout(ci: Sandbox) -> None:
    """A matplotlib chart is a PNG result; a timeout interrupts and says so."""
    ctx = ci.create_code_context("python")
    got: list[Result] = []
    execution = ci.run_code("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()",
                            context=ctx, on_result=got.append, timeout_seconds=120)
    assert execution.error is None, execution.error
    [chart] = [r for r in execution.results if r.png is not None]
    assert chart.png is not None and chart.png.startswith(b"\x89PNG\r\n\x1a\n") and got == execution.results
    slow = ci.run_code("import time\ntime.sleep(30)", context=ctx, timeout_seconds=1)
    assert slow.error is not None and slow.error.name == "KeyboardInterrupt"
    assert slow.error.timeout and not slow.error.restarted
    assert [c.id for c in ci.list_code_contexts()] == [ctx.id]


def test_crash_and_restart(ci: Sandbox) -> None:
    """A dead interpreter is reported, and restart_code_context brings it back empty."""
    ctx = ci.create_code_context()
    ci.run_code("x = 1", context=ctx)
    died = ci.run_code("import os\nos._exit(9)", context=ctx)
    assert died.error is not None and died.error.name == "InterpreterDied"
    assert ci.restart_code_context(ctx).status == "idle"
    after = ci.run_code("'x' in globals()", context=ctx)
    assert after.text == "False"
    ci.delete_code_context(ctx)
    assert ci.list_code_contexts() == []


def test_javascript(ci: Sandbox) -> None:
    """language="javascript" keeps globals across cells."""
    ci.run_code("globalThis.total = 40", language="javascript")
    assert ci.run_code("total + 2", language="javascript").text == "42"


def test_sessions(daemon: Daemon) -> None:
    """cd and export persist in a session; per-call cwd does not."""
    with Sandbox.create() as sb:
        session = sb.create_session(env={"A": "1"})
        session.exec("cd /tmp && export B=2")
        assert session.exec("pwd; echo $A$B").stdout == "/tmp\n12\n"
        assert session.exec("pwd", cwd="/").stdout == "/\n"
        chunks: list[str] = []
        assert session.exec_stream("pwd; exit 3", on_stdout=chunks.append) == 3
        assert "".join(chunks) == "/tmp\n"
        assert session.refresh()["commands"] == 4
        session.delete()
        with pytest.raises(NotFound):
            session.exec("true")


def test_files(daemon: Daemon) -> None:
    """Write (bytes, text, streamed), read, list, stat, move, remove, watch; escapes refused."""
    with Sandbox.create() as sb:
        info = sb.files.write("/workspace/a/b.txt", "hello")
        assert info.size == 5 and info.type == "file"
        assert sb.files.read_text("/workspace/a/b.txt") == "hello"
        sb.files.write("/workspace/run.sh", b"#!/bin/sh\necho ok\n", mode=0o755)
        assert sb.exec("/workspace/run.sh").stdout == "ok\n"
        streamed = sb.files.write("/workspace/big", (bytes([i % 256]) * 1000 for i in range(100)))
        assert streamed.size == 100_000
        assert sb.files.read("/workspace/big")[:1000] == b"\x00" * 1000
        assert {f.name for f in sb.files.list("/workspace")} == {"a", "run.sh", "big"}
        assert sb.files.stat("/workspace/a").is_dir
        sb.files.move("/workspace/a/b.txt", "/workspace/c.txt")
        assert sb.files.exists("/workspace/c.txt") and not sb.files.exists("/workspace/a/b.txt")
        sb.files.remove("/workspace/a")
        with pytest.raises(InvalidRequest):
            sb.files.read("/../etc/passwd")
        with pytest.raises(NotFound):
            sb.files.read("/workspace/a/b.txt")

        events: list[FileEvent] = []

        def watch() -> None:
            for event in sb.files.watch("/workspace"):
                events.append(event)
                if event.type == "delete":
                    return

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        # Until the watch is in place writes go unseen: repeat one until it is reported.
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            sb.files.write("/workspace/w.txt", "1")
            time.sleep(0.05)
        sb.files.remove("/workspace/w.txt")
        t.join(10)
        assert events and (events[0].type, events[0].path) in {("create", "/workspace/w.txt"),
                                                                ("modify", "/workspace/w.txt")}
        assert events[-1].type == "delete" and events[-1].path == "/workspace/w.txt"


def test_png_decodes_from_bundle(ci: Sandbox) -> None:
    """Result.png is the decoded image; Result.data keeps the base64 text."""
    execution = ci.run_code("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                            "fig = plt.figure()\nplt.plot([0, 1])", timeout_seconds=120)
    pngs = [r for r in execution.results if "image/png" in r.data]
    assert len(pngs) == 1
    assert base64.b64decode(str(pngs[0].data["image/png"])) == pngs[0].png
