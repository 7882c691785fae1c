"""Dropped connections: the test cuts the TCP connection mid-stream through a loopback proxy;
the SDK must resume after the last event, deliver every chunk exactly once, and never run the
command twice. When it cannot reconnect it must say how to reattach. A cell's run is read
again by its number once started, and a run the server has forgotten is never posted again."""

from __future__ import annotations

import httpx
import pytest

import sandstream
from sandstream import AsyncSandbox, ClientConfig, Exit, Sandbox, Stdout

from .conftest import API_KEY, Daemon, Proxy

LINES = 40
# Records each run in the sandbox's workspace, then prints numbered lines slowly.
COMMAND = f"echo run >> runs.log; for i in $(seq 1 {LINES}); do echo line $i; sleep 0.03; done"
EXPECTED = "".join(f"line {i}\n" for i in range(1, LINES + 1))
# A cell that records each run of itself, then prints, sleeps and prints.
CELL = (
    "import time\n"
    "with open('/workspace/cells.log', 'a') as log:\n"
    "    log.write('run\\n')\n"
    f"for i in range(1, {LINES + 1}):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(0.03)\n"
    "'done'"
)


def test_exec_stream_resumes_after_a_cut_connection(daemon: Daemon, proxy: Proxy) -> None:
    with Sandbox.create(base_url=proxy.url, api_key=API_KEY) as sb:
        chunks: list[str] = []
        cuts = 0

        def on_out(chunk: str) -> None:
            nonlocal cuts
            chunks.append(chunk)
            if (cuts == 0 and "line 5\n" in chunk) or (cuts == 1 and "line 20\n" in chunk):
                cuts += 1
                proxy.cut()

        code = sb.exec_stream(COMMAND, on_stdout=on_out)
        assert code == 0
        assert cuts == 2
        assert "".join(chunks) == EXPECTED
        assert sb.exec("cat runs.log").stdout == "run\n"
        assert proxy.connections >= 3


def test_event_iterator_resumes_and_keeps_sequence_numbers_unique(
    daemon: Daemon, proxy: Proxy
) -> None:
    with Sandbox.create(base_url=proxy.url, api_key=API_KEY) as sb:
        seqs: list[int] = []
        text = ""
        for event in sb.exec_events(COMMAND):
            if isinstance(event, (Stdout, Exit)):
                seqs.append(event.seq)
            if isinstance(event, Stdout):
                text += event.data
                if event.data.startswith("line 10\n"):
                    proxy.cut()
        assert text == EXPECTED
        assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs)
        assert sb.exec("cat runs.log").stdout == "run\n"


def test_bounded_attempts_then_a_clear_error_and_a_working_reattach(
    daemon: Daemon, proxy: Proxy
) -> None:
    config = ClientConfig(proxy.url, API_KEY, max_reconnects=2)
    sb = Sandbox.create(config=config)
    chunks: list[str] = []

    def on_out(chunk: str) -> None:
        chunks.append(chunk)
        if "line 3\n" in chunk:
            proxy.refuse()

    with pytest.raises(sandstream.StreamLost) as info:
        sb.exec_stream(COMMAND, on_stdout=on_out)
    err = info.value
    assert err.attempts == 3 and err.sandbox_id == sb.id
    assert err.process_id is not None and err.process_id.startswith("proc_")
    message = str(err)
    assert "may still be running" in message
    assert (f"processes.get({err.process_id!r}).logs(follow=True, since={err.last_event_id}, "
            "flow='wait')") in message

    direct = Sandbox.connect(sb.id)
    try:
        process = direct.processes.get(err.process_id)
        rest = process.logs(follow=True, since=err.last_event_id)
        chunks += [e.data for e in rest if isinstance(e, Stdout)]
        assert "".join(chunks) == EXPECTED
        assert direct.exec("cat runs.log").stdout == "run\n"
    finally:
        direct.kill()


def test_process_logs_resume_after_a_cut(daemon: Daemon, proxy: Proxy) -> None:
    with Sandbox.create(base_url=proxy.url, api_key=API_KEY) as sb:
        p = sb.processes.start(COMMAND)
        text = ""
        for event in p.logs(follow=True):
            if isinstance(event, Stdout):
                text += event.data
                if "line 7\n" in event.data:
                    proxy.cut()
        assert text == EXPECTED
        assert sb.exec("cat runs.log").stdout == "run\n"


async def test_async_exec_stream_resumes_after_a_cut(daemon: Daemon, proxy: Proxy) -> None:
    async with await AsyncSandbox.create(base_url=proxy.url, api_key=API_KEY) as sb:
        chunks: list[str] = []
        cut = False

        async def on_out(chunk: str) -> None:
            nonlocal cut
            chunks.append(chunk)
            if not cut and "line 6\n" in chunk:
                cut = True
                proxy.cut()

        assert await sb.exec_stream(COMMAND, on_stdout=on_out) == 0
        assert cut and "".join(chunks) == EXPECTED
        assert (await sb.exec("cat runs.log")).stdout == "run\n"


def test_run_code_resumes_after_a_cut_connection(daemon: Daemon, proxy: Proxy) -> None:
    with Sandbox.create(template="code-interpreter", base_url=proxy.url, api_key=API_KEY) as sb:
        ctx = sb.create_code_context("python")
        chunks: list[str] = []
        cuts = 0

        def on_out(chunk: str) -> None:
            nonlocal cuts
            chunks.append(chunk)
            text = "".join(chunks)
            if (cuts == 0 and "line 5\n" in text) or (cuts == 1 and "line 20\n" in text):
                cuts += 1
                proxy.cut()

        execution = sb.run_code(CELL, context=ctx, on_stdout=on_out)
        assert cuts == 2 and proxy.connections >= 3
        assert execution.error is None and execution.text == "'done'"
        assert "".join(chunks) == EXPECTED and "".join(execution.logs.stdout) == EXPECTED
        assert execution.execution_count == 1
        # Both resumes read the started run by its number; the cell was posted once.
        context_path = f"/v1/sandboxes/{sb.id}/contexts/{ctx.id}"
        assert proxy.requests_to("/run") == [f"POST {context_path}/run"]
        assert proxy.requests_to("/runs/1") == [f"GET {context_path}/runs/1"] * 2
        assert sb.files.read_text("/workspace/cells.log") == "run\n"
        assert sb.run_code("1", context=ctx).execution_count == 2


async def test_async_run_code_resumes_after_a_cut(daemon: Daemon, proxy: Proxy) -> None:
    config = ClientConfig(proxy.url, API_KEY)
    async with await AsyncSandbox.create(template="code-interpreter", config=config) as sb:
        chunks: list[str] = []
        cut = False

        async def on_out(chunk: str) -> None:
            nonlocal cut
            chunks.append(chunk)
            if not cut and "line 6\n" in "".join(chunks):
                cut = True
                proxy.cut()

        execution = await sb.run_code(CELL, on_stdout=on_out)
        assert cut and execution.error is None and execution.text == "'done'"
        assert "".join(chunks) == EXPECTED and "".join(execution.logs.stdout) == EXPECTED
        posts = proxy.requests_to("/run")
        assert len(posts) == 1 and posts[0].startswith("POST ")
        number = execution.execution_count
        assert proxy.requests_to(f"/runs/{number}") == [f"GET {posts[0][5:-4]}/runs/{number}"]
        assert await sb.files.read_text("/workspace/cells.log") == "run\n"


def test_run_code_never_runs_again_a_cell_the_context_forgot(daemon: Daemon, proxy: Proxy) -> None:
    with Sandbox.create(template="code-interpreter", base_url=proxy.url, api_key=API_KEY) as sb:
        ctx = sb.create_code_context("python")
        direct = httpx.Client(
            base_url=daemon.url,
            headers={"Authorization": f"Bearer {API_KEY}", "Accept": "application/json"},
            timeout=60,
        )
        cut = False
        chunks: list[str] = []

        def on_out(chunk: str) -> None:
            # While the client is cut off, 33 more cells end: the context forgets run 1.
            nonlocal cut
            chunks.append(chunk)
            if not cut and "line 5\n" in "".join(chunks):
                cut = True
                proxy.cut()
                for i in range(33):
                    response = direct.post(f"/v1/sandboxes/{sb.id}/contexts/{ctx.id}/run",
                                           json={"code": str(i)})
                    assert response.status_code == 200 and response.json()["error"] is None
                assert direct.get(f"/v1/sandboxes/{sb.id}/contexts/{ctx.id}/runs/1").status_code == 404

        with direct, pytest.raises(sandstream.StreamLost) as info:
            sb.run_code(CELL, context=ctx, on_stdout=on_out)
        message = str(info.value)
        assert cut and "forgotten" in message and "not run again" in message
        assert info.value.last_event_id >= 2
        assert len(proxy.requests_to("/run")) == 1 and len(proxy.requests_to("/runs/1")) == 1
        assert sb.files.read_text("/workspace/cells.log") == "run\n"
        assert sb.run_code("1", context=ctx).execution_count == 35
