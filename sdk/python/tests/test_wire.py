"""The wire layer without the daemon: SSE parsing, event decoding, the error table, and the
resume protocol against a scripted local HTTP server (for endings the daemon never produces)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import sandstream
from sandstream import errors
from sandstream.events import EventDecoder, Exit, Gap, SseParser, Start, Stderr, Stdout
from sandstream.models import ProcessInfo


def sse(event: str, data: dict[str, Any], seq: int | None = None) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# The start of process proc_x, as the scripted server sends it.
START = sse("start", {"process_id": "proc_x", "sandbox_id": "sb_1", "pid": 1}, 1)


def test_sse_parser_handles_any_chunking_and_line_endings() -> None:
    wire = (
        b": keepalive\n\nid: 1\r\nevent: start\r\ndata: {\"pid\":1}\r\n\r\n"
        b"id: 2\revent: stdout\rdata: {\"chunk\":\"aGk=\"}\r\r"
        b"event: error\ndata: {\"code\":\"shutting_down\",\n"
        b"data: \"message\":\"bye\"}\n\n"
    )
    expected = SseParser().feed(wire)
    assert [(m.event, m.id) for m in expected] == [("start", "1"), ("stdout", "2"), ("error", None)]
    assert json.loads(expected[2].data) == {"code": "shutting_down", "message": "bye"}
    for size in (1, 2, 3, 7):
        parser = SseParser()
        got = []
        for i in range(0, len(wire), size):
            got += parser.feed(wire[i : i + size])
        assert got == expected


def test_decoder_joins_code_points_split_across_chunks_and_skips_replays() -> None:
    text = "€uro ✓ 😀\n".encode()
    decoder = EventDecoder()
    parser = SseParser()
    out = []
    wire = sse("start", {"process_id": "p", "sandbox_id": "s", "pid": 7}, 1)
    for i, byte in enumerate(text):
        wire += sse("stdout", {"chunk": b64(bytes([byte]))}, i + 2)
    wire += sse("stdout", {"chunk": b64(text[:1])}, 2)  # a replayed entry: dropped
    wire += sse("exit", {"exit_code": 0, "signal": None, "reason": "exited", "duration_ms": 3}, 99)
    for message in parser.feed(wire):
        out += decoder.decode(message)
    assert isinstance(out[0], Start) and out[0].pid == 7
    assert "".join(e.data for e in out if isinstance(e, Stdout)) == text.decode()
    assert b"".join(e.raw for e in out if isinstance(e, Stdout)) == text
    assert out[-1] == Exit(99, 0, None, "exited", 3)
    assert decoder.last_seq == 99


def test_decoder_flushes_an_incomplete_code_point_before_a_gap_and_at_exit() -> None:
    decoder = EventDecoder()
    parser = SseParser()
    wire = (
        sse("stderr", {"chunk": b64("€".encode()[:2])}, 2)
        + sse("gap", {"from_seq": 3, "to_seq": 5, "bytes": 10}, 5)
        + sse("stderr", {"chunk": b64(b"ok\xe2")}, 6)
        + sse("exit", {"exit_code": 1, "signal": None, "reason": "exited"}, 7)
    )
    out = [e for m in parser.feed(wire) for e in decoder.decode(m)]
    assert out[0] == Stderr(2, "", b"\xe2\x82")
    assert out[1] == Stderr(2, "\ufffd", b"")
    assert out[2] == Gap(3, 5, 10)
    assert out[3].data == "ok"  # type: ignore[union-attr]
    assert out[4] == Stderr(7, "\ufffd", b"")
    assert isinstance(out[5], Exit) and out[5].exit_code == 1


@pytest.mark.parametrize(
    "code, status, cls",
    [
        ("invalid_json", 400, sandstream.InvalidJson),
        ("invalid_request", 400, sandstream.InvalidRequest),
        ("unauthorized", 401, sandstream.Unauthorized),
        ("not_found", 404, sandstream.NotFound),
        ("method_not_allowed", 405, sandstream.MethodNotAllowed),
        ("timeout", 408, sandstream.Timeout),
        ("conflict", 409, sandstream.Conflict),
        ("payload_too_large", 413, sandstream.PayloadTooLarge),
        ("unsupported_media_type", 415, sandstream.UnsupportedMediaType),
        ("quota_exceeded", 429, sandstream.QuotaExceeded),
        ("sandbox_setup_failed", 500, sandstream.SandboxSetupFailed),
        ("internal", 500, sandstream.InternalError),
        ("shutting_down", 503, sandstream.ShuttingDown),
        ("bad_gateway", 502, sandstream.BadGateway),
        ("request_header_too_large", 431, sandstream.RequestHeaderTooLarge),
        ("too_many_connections", 503, sandstream.TooManyConnections),
        ("unavailable", 503, sandstream.Unavailable),
        ("node_unreachable", 503, sandstream.NodeUnreachable),
        ("not_implemented", 501, sandstream.RouteNotImplemented),
        ("paused", 409, sandstream.SandboxPaused),
    ],
)
def test_every_error_code_has_its_type(code: str, status: int, cls: type[Exception]) -> None:
    body = json.dumps({"error": {"code": code, "message": f"the {code} text"}}).encode()
    err = errors.error_from_response(status, body)
    assert type(err) is cls
    assert isinstance(err, sandstream.SandboxError)
    assert isinstance(err, sandstream.SandstreamError)
    assert err.code == code and err.status == status
    assert err.message == f"the {code} text"
    assert str(err) == f"{status} {code}: the {code} text"


def test_unknown_code_and_foreign_bodies_still_raise_sandbox_error() -> None:
    err = errors.error_from_response(418, b'{"error": {"code": "teapot", "message": "short"}}')
    assert type(err) is sandstream.SandboxError and err.code == "teapot"
    err = errors.error_from_response(502, b"<html>bad gateway</html>")
    assert type(err) is sandstream.SandboxError
    assert "502" in str(err) and "bad gateway" in str(err)


class Script:
    """What the scripted server answers to each streamed request (exec/stream, a cell's run,
    re-reading a run, process logs): an SSE body, or a bare status; and what it received."""

    def __init__(self, responses: list[bytes | int]) -> None:
        self.responses = responses
        self.requests: list[dict[str, Any]] = []


@pytest.fixture
def scripted() -> Iterator[tuple[str, Script]]:
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/v1/sandboxes":
                self._send(201, "application/json", json.dumps({"id": "sb_1"}).encode())
                return
            self._stream(body)

        def do_GET(self) -> None:
            self._stream(None)

        def _stream(self, body: Any) -> None:
            script.requests.append({"method": self.command, "path": self.path,
                                    "headers": dict(self.headers), "body": body})
            index = min(len(script.requests), len(script.responses)) - 1
            response = script.responses[index]
            if isinstance(response, int):
                self._send(response, "text/plain", b"")
            else:
                self._send(200, "text/event-stream", response)

        def _send(self, status: int, ctype: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", script
    server.shutdown()
    server.server_close()


def test_a_stream_that_ends_without_exit_raises_and_never_reruns(
    scripted: tuple[str, Script],
) -> None:
    url, script = scripted
    script.responses = [
        START
        + sse("stdout", {"chunk": b64(b"partial")}, 2),
        b": nothing more\n\n",
    ]
    config = sandstream.ClientConfig(url, "k", max_reconnects=3)
    sb = sandstream.Sandbox.create(config=config)
    chunks: list[str] = []
    with pytest.raises(sandstream.StreamLost) as info:
        sb.exec_stream("make", on_stdout=chunks.append)
    assert chunks == ["partial"]
    err = info.value
    assert err.process_id == "proc_x" and err.last_event_id == 2 and err.attempts == 4
    assert "may still be running" in str(err)
    assert "logs(follow=True, since=2, flow='wait')" in str(err)
    keys = {r["headers"]["Idempotency-Key"] for r in script.requests}
    assert len(keys) == 1 and len(script.requests) == 4
    assert "Last-Event-ID" not in script.requests[0]["headers"]
    assert all(r["headers"]["Last-Event-ID"] == "2" for r in script.requests[1:])
    assert all(r["body"]["encoding"] == "base64" for r in script.requests)
    assert all(r["body"]["flow"] == "wait" for r in script.requests)


def test_an_error_event_raises_the_servers_error(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.responses = [
        START
        + sse("error", {"code": "shutting_down", "message": "sandstreamd is shutting down"})
    ]
    sb = sandstream.Sandbox.create(config=sandstream.ClientConfig(url, "k"))
    with pytest.raises(sandstream.ShuttingDown, match="sandstreamd is shutting down"):
        sb.exec_stream("make")
    events = list(sb.exec_events("make"))
    assert events[-1] == sandstream.Error("shutting_down", "sandstreamd is shutting down")


async def test_async_stream_without_exit_raises(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.responses = [sse("stdout", {"chunk": b64(b"x")}, 2), b""]
    config = sandstream.ClientConfig(url, "k", max_reconnects=1)
    sb = await sandstream.AsyncSandbox.create(config=config)
    with pytest.raises(sandstream.StreamLost, match="ended without an exit event"):
        await sb.exec_stream("make")
    assert len(script.requests) == 2


def test_unreachable_server_is_connection_failed() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(sandstream.ConnectionFailed, match="127.0.0.1"):
        sandstream.Sandbox.create(base_url=f"http://127.0.0.1:{port}", api_key="k")


def test_run_code_resumes_a_started_run_by_its_number_after_the_last_event(
    scripted: tuple[str, Script],
) -> None:
    url, script = scripted
    start = sse("start", {"context_id": "ctx_1", "language": "python", "execution_count": 7}, 1)
    script.responses = [
        start + sse("stdout", {"chunk": "a"}, 2),
        sse("stdout", {"chunk": "a"}, 2)  # sent again: dropped
        + sse("stderr", {"chunk": "w"}, 3)
        + sse("result", {"data": {"text/plain": "2"}, "is_main_result": True}, 4)
        + sse("exit", {"status": "ok", "execution_count": 7, "duration_ms": 5}, 5),
    ]
    sb = sandstream.Sandbox.create(config=sandstream.ClientConfig(url, "k"))
    out: list[str] = []
    err: list[str] = []
    execution = sb.run_code("1 + 1", context="ctx_1", on_stdout=out.append, on_stderr=err.append,
                            timeout_seconds=5)
    assert (out, err, execution.text, execution.execution_count) == (["a"], ["w"], "2", 7)
    assert execution.logs.stdout == ["a"] and execution.logs.stderr == ["w"]
    first, second = script.requests
    assert (first["method"], first["path"]) == ("POST", "/v1/sandboxes/sb_1/contexts/ctx_1/run")
    assert "Idempotency-Key" in first["headers"] and "Last-Event-ID" not in first["headers"]
    assert first["body"] == {"code": "1 + 1", "timeout_seconds": 5}
    assert (second["method"], second["path"]) == ("GET", "/v1/sandboxes/sb_1/contexts/ctx_1/runs/7")
    assert second["headers"]["Last-Event-ID"] == "2" and "Idempotency-Key" not in second["headers"]


async def test_async_run_code_posts_again_with_the_same_key_before_start(
    scripted: tuple[str, Script],
) -> None:
    url, script = scripted
    script.responses = [
        b": queued\n\n",
        sse("start", {"context_id": "ctx_1", "language": "python", "execution_count": 3}, 1)
        + sse("exit", {"status": "ok", "execution_count": 3, "duration_ms": 5}, 2),
    ]
    sb = await sandstream.AsyncSandbox.create(config=sandstream.ClientConfig(url, "k"))
    execution = await sb.run_code("x = 1", context="ctx_1")
    assert execution.execution_count == 3 and execution.error is None
    first, second = script.requests
    assert first["method"] == second["method"] == "POST"
    assert first["path"] == second["path"] == "/v1/sandboxes/sb_1/contexts/ctx_1/run"
    assert first["headers"]["Idempotency-Key"] == second["headers"]["Idempotency-Key"]
    assert first["body"] == second["body"] == {"code": "x = 1"}


async def test_async_run_code_raises_an_infrastructure_error(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.responses = [
        sse("start", {"context_id": "ctx_1", "language": "python", "execution_count": 1}, 1)
        + sse("error", {"code": "shutting_down", "message": "sandstreamd is shutting down"})
    ]
    sb = await sandstream.AsyncSandbox.create(config=sandstream.ClientConfig(url, "k"))
    with pytest.raises(sandstream.ShuttingDown, match="shutting down"):
        await sb.run_code("1", context="ctx_1")
    assert len(script.requests) == 1


def scripted_process(url: str) -> sandstream.Process:
    sb = sandstream.Sandbox.create(config=sandstream.ClientConfig(url, "k", max_reconnects=2))
    return sandstream.Process(sb, ProcessInfo.from_json({"id": "proc_x", "status": "running"}))


def query(request: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(urlsplit(request["path"]).query)


def test_a_follows_flow_is_sent_on_every_request_and_kept_by_reattach(
    scripted: tuple[str, Script],
) -> None:
    url, script = scripted
    script.responses = [
        START,
        sse("stdout", {"chunk": b64(b"a")}, 2),
        sse("exit", {"exit_code": 0, "signal": None, "reason": "exited"}, 3),
    ]
    process = scripted_process(url)
    events = list(process.logs(follow=True, flow="wait"))
    assert [type(e) for e in events] == [Start, Stdout, Exit]
    assert [query(r).get("flow") for r in script.requests] == [["wait"]] * 3
    assert [r["headers"].get("Last-Event-ID") for r in script.requests] == [None, "1", "2"]

    script.requests.clear()
    script.responses = [204]
    assert list(process.reattach()) == []
    assert query(script.requests[0])["flow"] == ["wait"]
    assert script.requests[0]["headers"]["Last-Event-ID"] == "3"

    script.requests.clear()
    list(process.logs(follow=True, since=0))
    assert "flow" not in query(script.requests[0])  # the server's default: skip
    script.requests.clear()
    list(process.logs(follow=False, flow="skip"))
    assert "flow" not in query(script.requests[0]) and "follow" not in query(script.requests[0])


def test_a_204_on_resume_ends_iteration_cleanly(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.responses = [
        START
        + sse("stdout", {"chunk": b64(b"a")}, 2),
        204,
        sse("stdout", {"chunk": b64(b"never read")}, 3),
    ]
    process = scripted_process(url)
    events = list(process.logs(follow=True, flow="wait"))
    assert [type(e) for e in events] == [Start, Stdout]
    assert len(script.requests) == 2
    assert script.requests[1]["headers"]["Last-Event-ID"] == "2"
    assert query(script.requests[1])["flow"] == ["wait"]


async def test_async_a_204_on_resume_ends_iteration_cleanly(scripted: tuple[str, Script]) -> None:
    url, script = scripted
    script.responses = [sse("stdout", {"chunk": b64(b"a")}, 2), 204]
    sb = await sandstream.AsyncSandbox.create(config=sandstream.ClientConfig(url, "k"))
    process = sandstream.AsyncProcess(sb, ProcessInfo.from_json({"id": "proc_x"}))
    events = [e async for e in process.logs(follow=True, flow="wait")]
    assert [type(e) for e in events] == [Stdout]
    assert [query(r).get("flow") for r in script.requests] == [["wait"], ["wait"]]


def test_a_gap_of_unknown_size_decodes_as_none() -> None:
    wire = sse("gap", {"from_seq": 2, "to_seq": 9, "bytes": None}, 9)
    out = [e for m in SseParser().feed(wire) for e in EventDecoder().decode(m)]
    assert out == [Gap(2, 9, None)]
