"""E2B's code interpreter SDK (the real `e2b-code-interpreter` package, pinned in
tests/requirements.txt, unpatched) against the daemon: `Sandbox.create()` asks for E2B's
`code-interpreter-v1`, which the daemon serves from its `code-interpreter` template, and the
SDK's `run_code` and `*_code_context` calls go to `/execute` and `/contexts` at the daemon's
root. Effects are checked through sandstream's own /v1 API, the sandbox's files and commands or
a later cell, not only through the answer of the call under test. The JS SDK's counterpart is
tests/compat/e2b/test/code_interpreter.test.mjs.

One sandbox serves the module (the tests that need a namespace of their own make a context of
their own), so the interpreters start once."""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2b_code_interpreter import (
    AsyncSandbox,
    Context,
    Execution,
    ExecutionError,
    NotFoundException,
    OutputMessage,
    Result,
    Sandbox,
    SandboxException,
    TimeoutException,
)
from e2b_code_interpreter.charts import BarChart, ChartType, LineChart

from helpers import API_KEY, Daemon

HOME = "/home/user"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A cell that imports matplotlib or pandas for the first time may take a while.
SLOW_CELL = 120


@pytest.fixture(scope="module")
def ci_env(daemon: Daemon) -> Iterator[Daemon]:
    """The environment a user sets to point the SDK at sandstream (this module only)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("E2B_API_URL", daemon.url)
        mp.setenv("E2B_SANDBOX_URL", daemon.url)
        mp.setenv("E2B_API_KEY", API_KEY)
        for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
            mp.delenv(name, raising=False)
        yield daemon


@pytest.fixture(scope="module")
def sbx(ci_env: Daemon) -> Iterator[Sandbox]:
    """The module's sandbox, made with the code interpreter's `Sandbox.create()`."""
    sandbox = Sandbox.create(timeout=900)
    yield sandbox
    sandbox.kill()


def v1_contexts(client: httpx.Client, sandbox_id: str) -> dict[str, dict[str, Any]]:
    """The sandbox's code contexts by id, through sandstream's own API."""
    r = client.get(f"/v1/sandboxes/{sandbox_id}/contexts")
    assert r.status_code == 200, r.text
    return {c["id"]: c for c in r.json()["contexts"]}


def v1_read(client: httpx.Client, sandbox_id: str, path: str) -> bytes:
    """A file's bytes through sandstream's own API."""
    r = client.get(f"/v1/sandboxes/{sandbox_id}/files/content", params={"path": path})
    assert r.status_code == 200, r.text
    return r.content


def stdout_of(execution: Execution) -> str:
    """What the cell printed, its chunks joined."""
    return "".join(execution.logs.stdout)


def plain(traceback: str) -> str:
    """A traceback without its terminal colours."""
    return ANSI.sub("", traceback)


def ok(execution: Execution) -> Execution:
    """Asserts the cell raised nothing; returns it."""
    assert execution.error is None, (execution.error.name, execution.error.value,
                                     plain(execution.error.traceback))
    return execution


# --- the sandbox ------------------------------------------------------------------------------


def test_create_serves_the_code_interpreter_template(sbx: Sandbox,
                                                     client: httpx.Client) -> None:
    """Sandbox.create() of this SDK is a sandbox of the daemon's `code-interpreter` template,
    with the tokens its /execute and /contexts calls carry."""
    v1 = client.get(f"/v1/sandboxes/{sbx.sandbox_id}")
    assert v1.status_code == 200, v1.text
    assert v1.json()["template"] == "code-interpreter"
    assert sbx._envd_access_token and sbx.traffic_access_token
    assert sbx._envd_access_token == sbx.traffic_access_token


def test_state_persists_and_the_last_expression_is_the_result(sbx: Sandbox) -> None:
    """run_code runs in the default Python context, which keeps its variables; the last
    expression is the main result, its repr the text; the default context is then listed."""
    first = ok(sbx.run_code("x = 41"))
    assert first.results == [] and first.text is None
    second = ok(sbx.run_code("x + 1"))
    assert second.text == "42"
    [main] = second.results
    assert main.is_main_result is True and main.text == "42"
    assert ok(sbx.run_code("'a' * 3")).text == "'aaa'"
    listed = [c for c in sbx.list_code_contexts() if c.language == "python"]
    assert listed, sbx.list_code_contexts()
    assert HOME in [c.cwd for c in listed], [(c.id, c.cwd) for c in listed]


def test_callbacks_are_called_as_output_arrives(sbx: Sandbox) -> None:
    """on_stdout, on_stderr and on_result get the cell's output while it runs; logs hold it."""
    events: list[tuple[float, str, str]] = []
    results: list[Result] = []
    start = time.monotonic()

    def on_stdout(m: OutputMessage) -> None:
        events.append((time.monotonic() - start, "out", m.line))

    def on_stderr(m: OutputMessage) -> None:
        events.append((time.monotonic() - start, "err", m.line))

    execution = ok(sbx.run_code(
        "import sys, time\nprint('one')\ntime.sleep(1)\nprint('to err', file=sys.stderr)\n"
        "print('two')\n40 + 2",
        on_stdout=on_stdout, on_stderr=on_stderr, on_result=results.append))
    done = time.monotonic() - start
    assert stdout_of(execution) == "one\ntwo\n", execution.logs
    assert "".join(execution.logs.stderr) == "to err\n", execution.logs
    assert "".join(t for _, s, t in events if s == "out") == "one\ntwo\n", events
    assert "".join(t for _, s, t in events if s == "err") == "to err\n", events
    assert events[0][1:] == ("out", "one\n"), events
    # The first line came while the cell still slept, not with its end.
    assert done - events[0][0] >= 0.7, (done, events)
    assert [(r.text, r.is_main_result) for r in results] == [("42", True)]
    assert execution.text == "42"


def test_errors_name_value_and_traceback(sbx: Sandbox) -> None:
    """An exception is execution.error (and on_error): its name, value and a traceback that
    shows the failing line; the output before it is kept and the context goes on."""
    errors: list[ExecutionError] = []
    execution = sbx.run_code("def divide(a):\n    return a / 0\nprint('before')\ndivide(7)",
                             on_error=errors.append)
    assert execution.error is not None
    assert (execution.error.name, execution.error.value) == ("ZeroDivisionError",
                                                             "division by zero")
    assert "return a / 0" in plain(execution.error.traceback), execution.error.traceback
    assert len(errors) == 1 and errors[0].name == "ZeroDivisionError"
    assert stdout_of(execution) == "before\n" and execution.results == []

    missing = sbx.run_code("undefined_name_ci + 1")
    assert missing.error is not None and missing.error.name == "NameError"
    assert "undefined_name_ci" in missing.error.value
    assert "undefined_name_ci + 1" in plain(missing.error.traceback)
    assert ok(sbx.run_code("'still alive'")).text == "'still alive'"


def test_execution_count_is_per_context(sbx: Sandbox) -> None:
    """execution_count counts the cells of its context, and another context counts its own."""
    first = sbx.create_code_context()
    counts = [ok(sbx.run_code(code, context=first)).execution_count
              for code in ("1", "2", "3")]
    assert counts == [1, 2, 3], counts
    other = sbx.create_code_context()
    assert ok(sbx.run_code("1", context=other)).execution_count == 1
    assert ok(sbx.run_code("4", context=first)).execution_count == 4


# --- results ----------------------------------------------------------------------------------


def test_display_gives_extra_results_before_the_main_one(sbx: Sandbox) -> None:
    """display(obj) adds results that are not the main one, in order; the main result is the
    last expression's."""
    execution = ok(sbx.run_code("display('first')\ndisplay([1, 2])\n'last'"))
    assert [(r.text, r.is_main_result) for r in execution.results] == [
        ("'first'", False), ("[1, 2]", False), ("'last'", True)]
    assert execution.text == "'last'"


def test_rich_reprs_give_their_formats(sbx: Sandbox) -> None:
    """An object's _repr_*_ methods give the result's html, markdown, svg, png (base64),
    json, latex, next to the text of its repr."""
    png = b"\x89PNG\r\n\x1a\n" + secrets.token_bytes(16)
    execution = ok(sbx.run_code(
        "class Rich:\n"
        "    def __repr__(self): return 'Rich()'\n"
        "    def _repr_html_(self): return '<b>bold</b>'\n"
        "    def _repr_markdown_(self): return '# Title'\n"
        "    def _repr_svg_(self): return '<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>'\n"
        f"    def _repr_png_(self): return {png!r}\n"
        "    def _repr_json_(self): return {'answer': 42, 'items': [1, 'two']}\n"
        "    def _repr_latex_(self): return r'$\\alpha$'\n"
        "Rich()"))
    [r] = execution.results
    assert r.is_main_result is True and r.text == "Rich()"
    assert r.html == "<b>bold</b>"
    assert r.markdown == "# Title"
    assert r.svg == '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
    assert r.png is not None and base64.b64decode(r.png) == png
    assert r.json == {"answer": 42, "items": [1, "two"]}
    assert r.latex == r"$\alpha$"
    assert set(r.formats()) >= {"text", "html", "markdown", "svg", "png", "json", "latex"}


@pytest.mark.timeout(SLOW_CELL + 60)
def test_matplotlib_line_chart(sbx: Sandbox) -> None:
    """plt.show() of a titled plot with two labelled lines is a result with a PNG and E2B's
    LineChart: its title, axis labels, and each line's label and points."""
    execution = ok(sbx.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(6, 4))\n"
        "plt.plot([1, 2, 3, 4], [1, 4, 9, 16], label='squares')\n"
        "plt.plot([1, 2, 3, 4], [2, 4, 6, 8], label='doubles')\n"
        "plt.title('Growth')\nplt.xlabel('step')\nplt.ylabel('value')\nplt.legend()\n"
        "plt.show()", timeout=SLOW_CELL))
    [r] = execution.results
    assert r.png is not None and r.png.startswith("iVBOR"), r.formats()
    assert base64.b64decode(r.png).startswith(b"\x89PNG\r\n\x1a\n")
    chart = r.chart
    assert isinstance(chart, LineChart), r.formats()
    assert chart.type == ChartType.LINE and chart.title == "Growth"
    assert (chart.x_label, chart.y_label) == ("step", "value")
    lines = {e.label: [(float(x), float(y)) for x, y in e.points] for e in chart.elements}
    assert lines == {"squares": [(1, 1), (2, 4), (3, 9), (4, 16)],
                     "doubles": [(1, 2), (2, 4), (3, 6), (4, 8)]}, lines
    # Shown once: the figure is closed with its cell, not shown again by the next one.
    assert [r.text for r in ok(sbx.run_code("7 * 6")).results] == ["42"]


@pytest.mark.timeout(SLOW_CELL + 60)
def test_an_open_bar_figure_is_shown_at_the_end_of_its_cell(sbx: Sandbox) -> None:
    """A figure left open (no plt.show()) comes back with the cell: a PNG and a BarChart with
    one bar per category."""
    execution = ok(sbx.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.figure()\n"
        "_ = plt.bar(['a', 'b', 'c'], [3, 5, 2], label='counts')\n"
        "_ = plt.title('Bars')", timeout=SLOW_CELL))
    charts = [r for r in execution.results if r.chart is not None]
    assert len(charts) == 1, [r.formats() for r in execution.results]
    r = charts[0]
    assert r.png is not None and r.png.startswith("iVBOR")
    chart = r.chart
    assert isinstance(chart, BarChart) and chart.type == ChartType.BAR
    assert chart.title == "Bars"
    assert [(b.label, float(b.value)) for b in chart.elements] == [("a", 3), ("b", 5), ("c", 2)]


@pytest.mark.timeout(SLOW_CELL + 60)
def test_dataframe_is_html_and_data(sbx: Sandbox) -> None:
    """A pandas DataFrame as the last expression is an HTML table and its data as a dict."""
    execution = ok(sbx.run_code(
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})", timeout=SLOW_CELL))
    [r] = execution.results
    assert r.is_main_result is True
    assert r.html is not None and "<table" in r.html
    assert r.text is not None and "a" in r.text and "x" in r.text
    assert isinstance(r.data, dict) and r.data == {"a": [1, 2], "b": ["x", "y"]}, r.data
    # A missing value (NaN, which JSON has not) is null, and the result is whole.
    execution = ok(sbx.run_code("pd.DataFrame({'a': [1.5, None], 'b': ['x', None]})"))
    [r] = execution.results
    assert r.html is not None and "NaN" in r.html
    assert r.data == {"a": [1.5, None], "b": ["x", None]}, r.data


# --- languages --------------------------------------------------------------------------------


def test_javascript_and_bash(sbx: Sandbox) -> None:
    """language="javascript" runs Node with state across cells; language="bash" a shell."""
    js = ok(sbx.run_code("const a = 1; a + 1", language="javascript"))
    assert js.text == "2"
    again = ok(sbx.run_code("console.log('from node'); a + 10", language="javascript"))
    assert stdout_of(again) == "from node\n" and again.text == "11"
    # The driver's own names (it requires fs, vm, util) are not the cells'.
    own = ok(sbx.run_code("const fs = require('fs'); const vm = 1; typeof fs.statSync",
                          language="javascript"))
    assert own.text == "'function'"
    sh = ok(sbx.run_code("echo hi", language="bash"))
    assert stdout_of(sh) == "hi\n"
    assert [c for c in sbx.list_code_contexts() if c.language == "javascript"]


def test_typescript_cells_have_their_types_stripped_and_keep_state(sbx: Sandbox) -> None:
    """language="typescript": types, interfaces and enums go, the rest runs as JavaScript with
    state across cells and top-level await; a type error of syntax is the cell's error."""
    first = ok(sbx.run_code(
        "interface Point { x: number; y: number }\n"
        "enum Color { Red, Green }\n"
        "const p: Point = { x: 1, y: 2 };\n"
        "function norm(q: Point): number { return Math.hypot(q.x, q.y) }\n"
        "p.x + p.y", language="typescript"))
    assert first.text == "3"
    again = ok(sbx.run_code(
        "const waited: number = await Promise.resolve(norm(p) as number);\n"
        "console.log(`green is ${Color.Green}`);\n"
        "waited.toFixed(3)", language="typescript"))
    assert stdout_of(again) == "green is 1\n" and again.text == "'2.236'"
    imported = ok(sbx.run_code(
        "import * as fs from 'fs';\nimport path from 'path';\n"
        "const parts: string[] = ['a', 'b'];\n"
        "`${fs.existsSync('/')} ${path.join(...parts)}`", language="typescript"))
    assert imported.text == "'true a/b'"
    bad = sbx.run_code("const broken: = 1", language="typescript")
    assert bad.error is not None and bad.error.name == "SyntaxError", bad
    assert "Type expected" in bad.error.value and "line 1" in bad.error.value, bad.error
    # Its own context, apart from JavaScript's.
    assert [c for c in sbx.list_code_contexts() if c.language == "typescript"]
    js = sbx.run_code("typeof norm", language="javascript")
    assert js.error is None and js.text == "'undefined'", js


def test_unknown_language_is_refused(sbx: Sandbox) -> None:
    """A language the daemon has no interpreter for is an error of the SDK's (400)."""
    with pytest.raises(SandboxException) as e:
        sbx.run_code("DISPLAY 'HI'.", language="cobol")
    assert not isinstance(e.value, NotFoundException)
    assert "400" in str(e.value), e.value


# --- contexts ---------------------------------------------------------------------------------


def test_context_cwd_namespace_list_restart_and_remove(sbx: Sandbox,
                                                       client: httpx.Client) -> None:
    """create_code_context makes a context of its own (its cwd, its namespace), seen by
    list_code_contexts and sandstream's own API; restart empties it; remove ends it."""
    ctx = sbx.create_code_context(cwd="/tmp", language="python")
    assert isinstance(ctx, Context) and ctx.id
    assert (ctx.language, ctx.cwd) == ("python", "/tmp")
    assert ok(sbx.run_code("import os; os.getcwd()", context=ctx)).text == "'/tmp'"

    ok(sbx.run_code("only_here = 'ctx'", context=ctx))
    assert ok(sbx.run_code("only_here", context=ctx)).text == "'ctx'"
    elsewhere = sbx.run_code("only_here")
    assert elsewhere.error is not None and elsewhere.error.name == "NameError"

    listed = {c.id: c for c in sbx.list_code_contexts()}
    assert ctx.id in listed and (listed[ctx.id].language, listed[ctx.id].cwd) == ("python", "/tmp")
    v1 = v1_contexts(client, sbx.sandbox_id)
    assert ctx.id in v1, v1
    assert (v1[ctx.id]["language"], v1[ctx.id]["cwd"]) == ("python", "/tmp")

    sbx.restart_code_context(ctx)
    gone = sbx.run_code("only_here", context=ctx)
    assert gone.error is not None and gone.error.name == "NameError"
    assert ok(sbx.run_code("import os; os.getcwd()", context=ctx)).text == "'/tmp'"

    sbx.remove_code_context(ctx)
    assert ctx.id not in {c.id for c in sbx.list_code_contexts()}
    assert ctx.id not in v1_contexts(client, sbx.sandbox_id)
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=ctx)


def test_envs_are_the_cells_only(sbx: Sandbox) -> None:
    """envs= is seen by its cell, and not by the next one."""
    code = "import os; os.environ.get('CI_FOO', 'unset')"
    assert ok(sbx.run_code(code, envs={"CI_FOO": "bar"})).text == "'bar'"
    assert ok(sbx.run_code(code)).text == "'unset'"
    # A value the OS refuses (a NUL byte) is that cell's error; the context goes on.
    execution = sbx.run_code(code, envs={"CI_FOO": "a\x00b"})
    assert execution.error is not None and execution.error.name == "ValueError", execution
    assert ok(sbx.run_code(code)).text == "'unset'"


def test_timeout_interrupts_and_the_context_goes_on(sbx: Sandbox) -> None:
    """timeout= ends the call with TimeoutException; the daemon interrupts the cell, so the
    context answers the next cell at once and keeps what it had."""
    ctx = sbx.create_code_context()
    ok(sbx.run_code("kept = 'still here'", context=ctx))
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.run_code("import time\ntime.sleep(30)", context=ctx, timeout=2)
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed < 8, elapsed
    start = time.monotonic()
    assert ok(sbx.run_code("1 + 1", context=ctx, timeout=25)).text == "2"
    assert time.monotonic() - start < 10
    assert ok(sbx.run_code("kept", context=ctx)).text == "'still here'"


# --- the rest of the sandbox ------------------------------------------------------------------


def test_commands_and_files_still_work(sbx: Sandbox, client: httpx.Client) -> None:
    """The base SDK's commands and files work on a code interpreter sandbox, on the same files
    the cells see."""
    assert sbx.commands.run("echo from-command").stdout == "from-command\n"
    sbx.files.write(f"{HOME}/ci_in.txt", "from files")
    assert ok(sbx.run_code(f"open('{HOME}/ci_in.txt').read()")).text == "'from files'"
    ok(sbx.run_code(f"with open('{HOME}/ci_out.txt', 'w') as f:\n    f.write('from a cell')"))
    assert sbx.files.read(f"{HOME}/ci_out.txt") == "from a cell"
    assert sbx.commands.run(f"cat {HOME}/ci_out.txt").stdout == "from a cell"
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/ci_out.txt") == b"from a cell"


def test_async_sandbox(ci_env: Daemon, client: httpx.Client) -> None:
    """AsyncSandbox: `await run_code(...)` with an async on_stdout, and a context of its own."""

    async def flow() -> None:
        sandbox = await AsyncSandbox.create()
        try:
            assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["template"] == \
                "code-interpreter"
            seen: list[str] = []

            async def on_stdout(m: OutputMessage) -> None:
                await asyncio.sleep(0)
                seen.append(m.line)

            execution = await sandbox.run_code("print('async hello')\nv = 5\nv * 2",
                                               on_stdout=on_stdout)
            ok(execution)
            assert "".join(seen) == "async hello\n" and execution.text == "10"
            assert (await sandbox.run_code("v + 1")).text == "6"
            ctx = await sandbox.create_code_context(cwd="/tmp")
            assert (await sandbox.run_code("import os; os.getcwd()", context=ctx)).text == "'/tmp'"
            assert ctx.id in {c.id for c in await sandbox.list_code_contexts()}
            await sandbox.remove_code_context(ctx)
            assert ctx.id not in {c.id for c in await sandbox.list_code_contexts()}
        finally:
            await sandbox.kill()

    asyncio.run(flow())


def test_execute_needs_the_sandboxs_token(sbx: Sandbox, ci_env: Daemon,
                                          client: httpx.Client) -> None:
    """/execute and /contexts without the sandbox's token are 401; a token does not open
    another sandbox, nor one that does not exist."""
    url = ci_env.url
    token = sbx._envd_access_token
    assert token
    bare = httpx.Client(timeout=30)
    body = {"code": "open('/tmp/ran-without-token', 'w').write('x')"}

    def execute(sandbox_id: str, **headers: str) -> httpx.Response:
        return bare.post(f"{url}/execute", json=body,
                         headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49999",
                                  **headers})

    assert execute(sbx.sandbox_id).status_code == 401
    assert execute(sbx.sandbox_id, **{"X-Access-Token": "not-the-token"}).status_code == 401
    assert execute(sbx.sandbox_id,
                   **{"E2B-Traffic-Access-Token": "not-the-token"}).status_code == 401
    assert execute(sbx.sandbox_id, **{"Authorization": f"Bearer {token}x"}).status_code == 401
    assert execute("sb_0000000000000000", **{"X-Access-Token": token}).status_code in (401, 404)
    r = bare.get(f"{url}/contexts", headers={"E2b-Sandbox-Id": sbx.sandbox_id})
    assert r.status_code == 401, r.text
    r = bare.post(f"{url}/contexts", json={}, headers={"E2b-Sandbox-Id": sbx.sandbox_id})
    assert r.status_code == 401, r.text

    other = Sandbox.create()
    try:
        r = execute(other.sandbox_id, **{"X-Access-Token": token})
        assert r.status_code in (401, 404), r.text
        r = execute(other.sandbox_id, **{"E2B-Traffic-Access-Token": token})
        assert r.status_code in (401, 404), r.text
        stat = client.get(f"/v1/sandboxes/{other.sandbox_id}/files/stat",
                          params={"path": "/tmp/ran-without-token"})
        assert stat.status_code == 404, stat.text
    finally:
        other.kill()
    stat = client.get(f"/v1/sandboxes/{sbx.sandbox_id}/files/stat",
                      params={"path": "/tmp/ran-without-token"})
    assert stat.status_code == 404, stat.text

    # The right token opens it (so the refusals above were the token's).
    r = bare.get(f"{url}/contexts", headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                              "X-Access-Token": token})
    assert r.status_code == 200, r.text
    assert isinstance(r.json(), list)
