"""A small Server-Sent Events client for the integration tests.

An incremental parser that records when each frame arrived, readers over an httpx streaming
response, and a raw-socket connection for tests that must control exactly when bytes are read.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

# Events after which a process's output stream is complete.
TERMINAL_EVENTS = frozenset({"exit", "complete", "error"})


@dataclass
class SseEvent:
    """One dispatched SSE frame."""

    event: str
    data: str
    id: str | None  # the frame's own `id:` field, None when the frame has none
    t: float  # time.monotonic() when the bytes completing the frame arrived

    def json(self) -> Any:
        """The `data:` payload parsed as JSON."""
        return json.loads(self.data)


@dataclass
class SseComment:
    """A comment line (`: keepalive`)."""

    text: str
    t: float


@dataclass
class SseParser:
    """Incremental parser: feed bytes as they arrive, get frames and comments back."""

    last_event_id: str | None = None
    _buf: bytearray = field(default_factory=bytearray)
    _event: str | None = None
    _data: list[str] = field(default_factory=list)
    _id: str | None = None
    _seen_field: bool = False

    def feed(self, data: bytes, t: float | None = None) -> list[SseEvent | SseComment]:
        """Consumes `data`; returns every frame and comment it completed, in order."""
        now = time.monotonic() if t is None else t
        self._buf += data
        out: list[SseEvent | SseComment] = []
        start = 0
        while True:
            nl = self._buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(self._buf[start:nl])
            start = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            item = self._line(line.decode("utf-8"), now)
            if item is not None:
                out.append(item)
        del self._buf[:start]
        return out

    @property
    def pending(self) -> bytes:
        """Bytes received that do not yet end a line."""
        return bytes(self._buf)

    def _line(self, line: str, t: float) -> SseEvent | SseComment | None:
        if line == "":
            if not self._seen_field:
                return None
            ev = SseEvent(self._event or "message", "\n".join(self._data), self._id, t)
            self._event, self._data, self._id, self._seen_field = None, [], None, False
            return ev
        if line.startswith(":"):
            return SseComment(line[1:].removeprefix(" "), t)
        name, sep, value = line.partition(":")
        if sep:
            value = value.removeprefix(" ")
        self._seen_field = True
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
            self.last_event_id = value
        return None


def iter_sse(response: httpx.Response, comments: bool = False) -> Iterator[SseEvent | SseComment]:
    """Yields frames (and comments if asked) from a streaming httpx response as they arrive."""
    parser = SseParser()
    for data in response.iter_raw():
        for item in parser.feed(data):
            if isinstance(item, SseEvent) or comments:
                yield item


def read_events(response: httpx.Response, stop_after: frozenset[str] = TERMINAL_EVENTS,
                limit_seconds: float = 30.0) -> list[SseEvent]:
    """Reads frames until one named in `stop_after`, the end of the stream, or the time limit."""
    deadline = time.monotonic() + limit_seconds
    events: list[SseEvent] = []
    for item in iter_sse(response):
        assert isinstance(item, SseEvent)
        events.append(item)
        if item.event in stop_after:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"no terminal event within {limit_seconds}s: {events[-3:]}")
    return events


def chunks_of(events: list[SseEvent], stream: str = "stdout", key: str = "chunk") -> str:
    """Joins the text of every `stream` event."""
    return "".join(e.json()[key] for e in events if e.event == stream)


def assert_contiguous(events: list[SseEvent], first_seq: int = 1) -> None:
    """Every entry seq appears once, in order, either as an event or inside a `gap`."""
    expected = first_seq
    for e in events:
        if e.event == "gap":
            g = e.json()
            assert g["from_seq"] == expected, (g, expected)
            assert isinstance(g["to_seq"], int) and g["to_seq"] >= g["from_seq"], g
            assert isinstance(g["bytes"], int) and g["bytes"] > 0, g
            assert e.id is not None and int(e.id) == g["to_seq"], (e.id, g)
            expected = g["to_seq"] + 1
        elif e.event != "error":
            assert e.id is not None and int(e.id) == expected, (e.event, e.id, expected)
            expected += 1


class ChunkedDecoder:
    """Incremental HTTP/1.1 chunked transfer-encoding decoder."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._remaining = 0  # body bytes left in the current chunk
        self._need_crlf = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Returns the body bytes contained in `data` (and earlier leftovers)."""
        self._buf += data
        out = bytearray()
        while not self.done:
            if self._remaining:
                take = min(self._remaining, len(self._buf))
                if take == 0:
                    break
                out += self._buf[:take]
                del self._buf[:take]
                self._remaining -= take
                self._need_crlf = self._remaining == 0
                continue
            if self._need_crlf:
                if len(self._buf) < 2:
                    break
                del self._buf[:2]
                self._need_crlf = False
                continue
            nl = self._buf.find(b"\r\n")
            if nl < 0:
                break
            size = int(bytes(self._buf[:nl]).split(b";")[0], 16)
            del self._buf[: nl + 2]
            if size == 0:
                self.done = True
            self._remaining = size
        return bytes(out)


class RawSseConnection:
    """An HTTP/1.1 request over a plain socket whose SSE body is read only when asked.

    Lets a test stop reading (with a small receive buffer, so the kernel holds little) while the
    server keeps producing, then resume.
    """

    def __init__(self, port: int, method: str, path: str, headers: dict[str, str],
                 body: bytes = b"", rcvbuf: int | None = 16384, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        self.parser = SseParser()
        self.status = 0
        self.headers: dict[str, str] = {}
        self._chunked: ChunkedDecoder | None = None
        self._early = b""
        self.closed = False
        self._read_head()

    def _read_head(self) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"connection closed before the response head: {buf!r}")
            buf += data
        head, _, rest = buf.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        for h in header_lines:
            k, _, v = h.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._chunked = ChunkedDecoder()
        self._early = rest

    def _body(self, data: bytes) -> bytes:
        return self._chunked.feed(data) if self._chunked else data

    def events(self, limit_seconds: float = 30.0) -> Iterator[SseEvent]:
        """Yields frames as they are read, until the body ends or the time limit passes."""
        deadline = time.monotonic() + limit_seconds
        if self._early:
            early, self._early = self._early, b""
            for item in self.parser.feed(self._body(early)):
                if isinstance(item, SseEvent):
                    yield item
        while not self.closed and not (self._chunked and self._chunked.done):
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream still open after {limit_seconds}s")
            data = self.sock.recv(1 << 20)
            if not data:
                self.closed = True
                break
            for item in self.parser.feed(self._body(data)):
                if isinstance(item, SseEvent):
                    yield item

    def close(self) -> None:
        """Closes the socket."""
        self.sock.close()
