"""Code interpreter contexts: state across cells, results as MIME bundles (PNG figures,
DataFrame HTML), errors with tracebacks, timeouts that interrupt, crashes that are reported and
restartable, javascript and bash contexts."""

from __future__ import annotations

import base64
import contextlib
import struct
import zlib
from typing import Any

import httpx
import pytest

from helpers import assert_error, create_sandbox
from sse import SseEvent, read_events

CELL_END = frozenset({"exit", "error"})


@pytest.fixture
def interpreter(client: httpx.Client) -> Any:
    """A code-interpreter sandbox, deleted afterwards."""
    sb = create_sandbox(client, template="code-interpreter")
    yield sb
    client.delete(f"/v1/sandboxes/{sb['id']}")


def new_context(c: httpx.Client, sb: dict[str, Any], language: str = "python") -> dict[str, Any]:
    """POST .../contexts; asserts 201."""
    r = c.post(f"/v1/sandboxes/{sb['id']}/contexts", json={"language": language})
    assert r.status_code == 201, r.text
    ctx: dict[str, Any] = r.json()
    return ctx


def run_cell(c: httpx.Client, sb: dict[str, Any], ctx: dict[str, Any], code: str,
             timeout: float | None = None) -> list[SseEvent]:
    """POST .../run and reads its SSE events up to `exit` or `error`."""
    body: dict[str, Any] = {"code": code}
    if timeout is not None:
        body["timeout_seconds"] = timeout
    with c.stream("POST", f"/v1/sandboxes/{sb['id']}/contexts/{ctx['id']}/run", json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return read_events(r, stop_after=CELL_END, limit_seconds=60)


def text_of(events: list[SseEvent], stream: str) -> str:
    """Joins a stream's chunks."""
    return "".join(e.json()["chunk"] for e in events if e.event == stream)


def results(events: list[SseEvent]) -> list[dict[str, Any]]:
    """The MIME bundles of the `result` events."""
    return [e.json()["data"] for e in events if e.event == "result"]


def test_state_persists_across_cells(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """Variables, imports and functions survive; the last expression is the result."""
    ctx = new_context(client, interpreter)
    assert ctx["language"] == "python" and ctx["status"] == "idle"
    first = run_cell(client, interpreter, ctx, "import math\nx = 20\ndef double(v):\n    return 2 * v\n"
                                               "print('set', end='')")
    assert [e.event for e in first][0] == "start" and first[-1].event == "exit", first
    assert text_of(first, "stdout") == "set" and results(first) == []
    second = run_cell(client, interpreter, ctx, "import sys\nprint('to err', file=sys.stderr)\n"
                                                "double(x) + math.floor(1.5)")
    assert text_of(second, "stderr") == "to err\n"
    assert results(second) == [{"text/plain": "41"}]
    assert second[-1].json()["execution_count"] == 2
    again = run_cell(client, interpreter, ctx, "_ + 1")
    assert results(again) == [{"text/plain": "42"}]


def test_error_event(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """An exception ends the cell with `error`: name, value and a traceback of the cell."""
    ctx = new_context(client, interpreter)
    events = run_cell(client, interpreter, ctx, "print('before')\n{}['missing']")
    assert text_of(events, "stdout") == "before\n"
    err = events[-1]
    assert err.event == "error"
    data = err.json()
    assert data["name"] == "KeyError" and data["value"] == "'missing'"
    assert "<cell-1>" in data["traceback"] and "KeyError" in data["traceback"]
    assert data["timeout"] is False
    syntax = run_cell(client, interpreter, ctx, "def broken(:")[-1].json()
    assert syntax["name"] == "SyntaxError"
    # The interpreter is still there.
    assert results(run_cell(client, interpreter, ctx, "1 + 1")) == [{"text/plain": "2"}]


def png_size(data: bytes) -> tuple[int, int]:
    """Checks the PNG signature, the IHDR chunk and its CRC; returns (width, height)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    ihdr = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(b"IHDR" + ihdr) == crc
    width, height = struct.unpack(">II", ihdr[:8])
    assert data.endswith(b"IEND\xaeB`\x82")
    return width, height


def test_matplotlib_figure_is_png(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """A matplotlib plot comes back as a PNG result that decodes."""
    ctx = new_context(client, interpreter)
    events = run_cell(client, interpreter, ctx, "import matplotlib.pyplot as plt\n"
                                                "plt.figure(figsize=(4, 3))\nplt.plot([1, 4, 9, 16])\n"
                                                "plt.title('squares')\nplt.show()", timeout=120)
    assert events[-1].event == "exit", events[-1]
    images = [r for r in results(events) if "image/png" in r]
    assert len(images) == 1, results(events)
    width, height = png_size(base64.b64decode(images[0]["image/png"]))
    assert 200 < width < 2000 and 150 < height < 1500, (width, height)


def test_dataframe_is_html(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """A pandas DataFrame as the last expression has text/html and text/plain."""
    ctx = new_context(client, interpreter)
    events = run_cell(client, interpreter, ctx, "import pandas as pd\n"
                                                "pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})", timeout=120)
    assert events[-1].event == "exit", events[-1]
    [bundle] = results(events)
    assert "<table" in bundle["text/html"] and "a" in bundle["text/plain"]


def test_timeout_interrupts(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """A cell past its timeout gets KeyboardInterrupt; the context keeps its state."""
    ctx = new_context(client, interpreter)
    run_cell(client, interpreter, ctx, "kept = 'still here'")
    events = run_cell(client, interpreter, ctx, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)",
                      timeout=1)
    assert text_of(events, "stdout") == "sleeping\n"
    err = events[-1].json()
    assert events[-1].event == "error"
    assert (err["name"], err["timeout"], err["restarted"]) == ("KeyboardInterrupt", True, False), err
    assert results(run_cell(client, interpreter, ctx, "kept")) == [{"text/plain": "'still here'"}]


def test_timeout_restarts_when_interrupt_is_ignored(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """A cell that ignores SIGINT is killed and the context restarted, and the answer says so."""
    ctx = new_context(client, interpreter)
    run_cell(client, interpreter, ctx, "lost = 1")
    events = run_cell(client, interpreter, ctx,
                      "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
                      timeout=1)
    err = events[-1].json()
    assert (err["name"], err["timeout"], err["restarted"]) == ("TimeoutError", True, True), err
    after = run_cell(client, interpreter, ctx, "'lost' in globals()")
    assert results(after) == [{"text/plain": "False"}]
    info = client.get(f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}").json()
    assert info["restarts"] == 1 and info["status"] == "idle"


def test_crash_is_reported_and_restartable(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """An interpreter that dies is reported; the context is dead until restarted."""
    ctx = new_context(client, interpreter)
    events = run_cell(client, interpreter, ctx, "import os\nos._exit(3)")
    err = events[-1].json()
    assert events[-1].event == "error" and err["name"] == "InterpreterDied", err
    assert "code 3" in err["value"]
    url = f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}"
    assert client.get(url).json()["status"] == "dead"
    dead = run_cell(client, interpreter, ctx, "1")
    assert dead[-1].event == "error" and dead[-1].json()["name"] == "ContextDead"
    r = client.post(url + "/restart")
    assert r.status_code == 200 and r.json()["status"] == "idle", r.text
    assert results(run_cell(client, interpreter, ctx, "6 * 7")) == [{"text/plain": "42"}]


def test_json_answer_and_listing(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """With Accept: application/json the run is one document; contexts list and delete."""
    ctx = new_context(client, interpreter)
    r = client.post(f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}/run",
                    json={"code": "print('a')\n3"}, headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "".join(body["logs"]["stdout"]) == "a\n" and body["results"][0]["data"] == {"text/plain": "3"}
    assert body["error"] is None and body["exit"]["status"] == "ok"
    listed = client.get(f"/v1/sandboxes/{interpreter['id']}/contexts").json()["contexts"]
    assert [c["id"] for c in listed] == [ctx["id"]]
    assert client.delete(f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}").status_code == 204
    assert_error(client.get(f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}"), 404, "not_found")
    bad = client.post(f"/v1/sandboxes/{interpreter['id']}/contexts", json={"language": "cobol"})
    assert_error(bad, 400, "invalid_request")


def test_javascript_context(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """javascript cells share globals; the completion value is the result; errors are errors."""
    ctx = new_context(client, interpreter, "javascript")
    run_cell(client, interpreter, ctx, "globalThis.n = 20; console.log('logged')")
    events = run_cell(client, interpreter, ctx, "n * 2 + 2")
    assert results(events) == [{"text/plain": "42"}]
    err = run_cell(client, interpreter, ctx, "null.x")[-1]
    assert err.event == "error" and err.json()["name"] == "TypeError"


def test_bash_context(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """bash cells share the shell state; a failing command is an error with its exit code."""
    ctx = new_context(client, interpreter, "bash")
    run_cell(client, interpreter, ctx, "cd /tmp; export V=7")
    events = run_cell(client, interpreter, ctx, "pwd; echo $V")
    assert text_of(events, "stdout") == "/tmp\n7\n" and events[-1].event == "exit"
    err = run_cell(client, interpreter, ctx, "exit 4")[-1]
    assert err.event == "error" and err.json()["exit_code"] == 4


def test_python_command_exists(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """The code-interpreter template has `python` (seed 003 runs `python -u`)."""
    r = client.post(f"/v1/sandboxes/{interpreter['id']}/exec",
                    json={"cmd": "python -u -c 'import sys; print(sys.version_info[0])'"})
    assert r.json()["stdout"] == "3\n", r.json()


def test_cut_run_resumes_with_its_idempotency_key(client: httpx.Client,
                                                    interpreter: dict[str, Any]) -> None:
    """A retry with the same key and Last-Event-ID gets the rest of the run; it ran once."""
    ctx = new_context(client, interpreter)
    run_cell(client, interpreter, ctx, "runs = 0")
    url = f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}/run"
    body = {"code": "import sys, time\nruns += 1\nsys.stdout.write('one\\n'); sys.stdout.flush()\n"
                    "time.sleep(1)\nprint('two')\nruns"}
    headers = {"Idempotency-Key": "cell-resume-1"}
    with client.stream("POST", url, json=body, headers=headers) as r:
        assert r.status_code == 200
        first = read_events(r, stop_after=frozenset({"stdout"}), limit_seconds=30)
    assert first[-1].event == "stdout" and first[-1].json()["chunk"] == "one\n"
    last_id = first[-1].id
    with client.stream("POST", url, json=body, headers={**headers, "Last-Event-ID": last_id}) as r:
        assert r.status_code == 200
        rest = read_events(r, stop_after=CELL_END, limit_seconds=30)
    # print() may reach the pipe as two writes ("two", "\n"): chunks are bytes, not lines.
    names = [e.event for e in rest]
    assert [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]] == \
        ["stdout", "result", "exit"], rest
    assert all(int(e.id) > int(last_id) for e in rest)
    assert text_of(rest, "stdout") == "two\n" and results(rest) == [{"text/plain": "1"}]

    other = client.post(url, json={"code": "runs"}, headers=headers)
    assert_error(other, 409, "conflict")
    assert results(run_cell(client, interpreter, ctx, "runs")) == [{"text/plain": "1"}]


def test_a_run_can_be_read_again(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """GET .../runs/{n}: the run's events again, from a point, or as one document; 404 else."""
    ctx = new_context(client, interpreter)
    events = run_cell(client, interpreter, ctx, "print('hi')\n6 * 7")
    n = events[0].json()["execution_count"]
    url = f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}/runs/{n}"
    with client.stream("GET", url) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        again = read_events(r, stop_after=CELL_END, limit_seconds=30)
    assert [(e.id, e.event, e.data) for e in again] == [(e.id, e.event, e.data) for e in events]
    with client.stream("GET", url, params={"since": events[1].id}) as r:
        tail = read_events(r, stop_after=CELL_END, limit_seconds=30)
    assert [e.id for e in tail] == [e.id for e in events[2:]]
    doc = client.get(url, headers={"Accept": "application/json"}).json()
    assert doc["execution_count"] == n and doc["results"][0]["data"] == {"text/plain": "42"}
    base = f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}/runs"
    assert_error(client.get(f"{base}/999"), 404, "not_found")
    assert_error(client.get(f"{base}/x"), 404, "not_found")
    assert_error(client.get(url, headers={"Last-Event-ID": "x"}), 400, "invalid_request")


def test_javascript_top_level_await(client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """A javascript cell may await at top level; its declarations persist, its value is the result."""
    ctx = new_context(client, interpreter, "javascript")
    events = run_cell(client, interpreter, ctx,
                      "const v = await new Promise((r) => setTimeout(() => r(20), 50));\nv + 1")
    assert results(events) == [{"text/plain": "21"}], events
    assert results(run_cell(client, interpreter, ctx, "v * 2")) == [{"text/plain": "40"}]
    err = run_cell(client, interpreter, ctx, "await Promise.reject(new RangeError('no'))")[-1]
    assert err.event == "error" and err.json()["name"] == "RangeError" and err.json()["value"] == "no"


def test_javascript_top_level_await_without_a_final_expression(
        client: httpx.Client, interpreter: dict[str, Any]) -> None:
    """A cell that awaits and ends with a declaration or a loop has no result and no error."""
    ctx = new_context(client, interpreter, "javascript")
    for code in ("await 1; let x = 2;", "for (const i of [1, 2]) { await i; }",
                 "await null; function later() { return 5; }"):
        events = run_cell(client, interpreter, ctx, code)
        assert events[-1].event == "exit" and results(events) == [], (code, events)
    assert results(run_cell(client, interpreter, ctx, "x + later()")) == [{"text/plain": "7"}]


def test_a_refused_run_request_runs_nothing(client: httpx.Client,
                                            interpreter: dict[str, Any]) -> None:
    """A bad Last-Event-ID is a 400 before the cell is queued; too many queued cells is a 429."""
    ctx = new_context(client, interpreter)
    run_cell(client, interpreter, ctx, "n = 0")
    url = f"/v1/sandboxes/{interpreter['id']}/contexts/{ctx['id']}/run"
    assert_error(client.post(url, json={"code": "n += 1"}, headers={"Last-Event-ID": "x"}),
                 400, "invalid_request")
    events = run_cell(client, interpreter, ctx, "n")
    assert results(events) == [{"text/plain": "0"}]
    assert events[0].json()["execution_count"] == 2

    with httpx.Client(base_url=str(client.base_url), headers=client.headers,
                      limits=httpx.Limits(max_connections=64), timeout=30) as many:
        with contextlib.ExitStack() as streams:
            for code in ["import time; time.sleep(5)"] + ["1"] * 31:
                r = streams.enter_context(many.stream("POST", url, json={"code": code}))
                assert r.status_code == 200
            assert_error(many.post(url, json={"code": "2"}), 429, "quota_exceeded")


def test_the_driver_token_is_not_in_any_environment(client: httpx.Client,
                                                    interpreter: dict[str, Any]) -> None:
    """The token that marks driver messages is never in an environment another process of the
    sandbox could read from /proc/<pid>/environ."""
    for language, code in (
            ("python", "import os\nopen(f'/proc/{os.getpid()}/environ','rb').read()"),
            ("javascript", "require('fs').readFileSync('/proc/self/environ').toString()")):
        ctx = new_context(client, interpreter, language)
        environ = results(run_cell(client, interpreter, ctx, code))[0]["text/plain"]
        assert "SANDSTREAM_CONTEXT_TOKEN" not in environ and "PATH=" in environ, environ[:300]


@pytest.mark.timeout(180)
def test_a_message_that_never_ends_does_not_grow_the_daemon(
        daemon_factory: Any) -> None:
    """A cell that finds the driver's marker and prints it followed by 512 MiB without a newline
    costs the daemon a bounded amount of memory, and the context keeps working."""
    d = daemon_factory(env={"ASAN_OPTIONS": "quarantine_size_mb=8"})
    with d.client(timeout=120) as c:
        sb = create_sandbox(c, template="code-interpreter", limits={"memory_mb": 2048})
        ctx = new_context(c, sb)
        run_cell(c, sb, ctx, "1")
        before = d.memory_kib()
        code = ("import gc, os\n"
                "m = next(o['_marker'] for o in gc.get_objects()"
                " if isinstance(o, dict) and '_marker' in o)\n"
                "os.write(1, m)\n"
                "chunk = b'x' * (1 << 20)\n"
                "for _ in range(512): os.write(1, chunk)\n"
                "os.write(1, b'\\n')\n"
                "'done'")
        run_cell(c, sb, ctx, code, timeout=120)
        growth = (d.memory_kib() - before) / 1024
        assert growth < 160, f"daemon memory grew {growth:.0f} MiB"
        assert results(run_cell(c, sb, ctx, "6 * 7"))[0]["text/plain"] == "42"
