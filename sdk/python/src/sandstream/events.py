"""Typed process events, and the SSE parsing and decoding that turns the wire into them.

Pure functions and small state machines only: no I/O, shared by the sync and async clients.
"""

from __future__ import annotations

import base64
import codecs
import json
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class Start:
    """The process started (always sequence number 1)."""

    seq: int
    process_id: str
    sandbox_id: str
    pid: int | None


@dataclass(frozen=True)
class Stdout:
    """A chunk of stdout as `read()` returned it: not a line. `data` is `raw` decoded as UTF-8."""

    seq: int
    data: str
    raw: bytes = field(repr=False)


@dataclass(frozen=True)
class Stderr:
    """A chunk of stderr as `read()` returned it: not a line. `data` is `raw` decoded as UTF-8."""

    seq: int
    data: str
    raw: bytes = field(repr=False)


@dataclass(frozen=True)
class Exit:
    """The process ended; always the last event of a process."""

    seq: int
    exit_code: int
    signal: str | None
    reason: str
    duration_ms: int | None


@dataclass(frozen=True)
class Error:
    """An infrastructure failure ended the stream without an exit (e.g. the server stopping)."""

    code: str
    message: str


@dataclass(frozen=True)
class Gap:
    """The reader fell behind the server's retained window: entries were lost, the stream goes on.
    `bytes` is how much output they held, `None` when the server no longer knows."""

    from_seq: int
    to_seq: int
    bytes: int | None


Event = Union[Start, Stdout, Stderr, Exit, Error, Gap]


@dataclass(frozen=True)
class SseMessage:
    """One dispatched Server-Sent Event."""

    event: str
    data: str
    id: str | None

    @property
    def seq(self) -> int:
        """The event's sequence number (its `id:`), 0 when it carried none."""
        return int(self.id) if self.id is not None and self.id.isdigit() else 0

    def payload(self) -> dict[str, Any]:
        """The JSON object in `data`; `{}` for an empty or malformed one."""
        try:
            value: Any = json.loads(self.data) if self.data else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


class SseParser:
    """Incremental `text/event-stream` parser: feed it bytes as they arrive, get whole events.

    Lines may end in LF, CRLF or CR; a CR at the end of a chunk is held until the next byte
    shows whether an LF follows.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseMessage]:
        """Consumes bytes and returns the events they completed."""
        self._buf += chunk
        out: list[SseMessage] = []
        start = 0
        buf = self._buf
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            if cr >= 0:
                if cr + 1 == n:
                    break
                end, nxt = cr, cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
            elif lf >= 0:
                end, nxt = lf, lf + 1
            else:
                break
            message = self._line(buf[start:end].decode("utf-8", "replace"))
            if message is not None:
                out.append(message)
            start = nxt
        self._buf = buf[start:]
        return out

    def _line(self, line: str) -> SseMessage | None:
        if not line:
            if not self._data and not self._event:
                self._id = None
                return None
            message = SseMessage(self._event or "message", "\n".join(self._data), self._id)
            # Unlike a browser, report only an id the event itself carried: `error` and
            # keepalive-adjacent events must not inherit the previous sequence number.
            self._event, self._data, self._id = "", [], None
            return message
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


class EventDecoder:
    """Turns the daemon's SSE messages (`format=pandastack`, `encoding=base64`) into events.

    The wire carries base64 so that chunks are byte-exact; each stream has its own incremental
    UTF-8 decoder, so a code point split across chunks (or across a reconnect, because the
    decoder outlives the connection) comes out whole, and invalid bytes become U+FFFD.
    """

    def __init__(self) -> None:
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self.last_seq = 0
        self.ended = False  # the exit (or error) event was decoded: nothing follows it

    def decode(self, message: SseMessage) -> list[Event]:
        """Returns the events one SSE message yields (a flush may precede an exit or a gap)."""
        seq = message.seq
        if seq:
            # After a reconnect the server resumes after Last-Event-ID; never deliver twice.
            if seq <= self.last_seq:
                return []
            self.last_seq = seq
        payload = message.payload()
        kind = message.event
        if kind in ("stdout", "stderr"):
            raw = base64.b64decode(str(payload.get("chunk", "")))
            text = self._decoders[kind].decode(raw)
            return [Stdout(seq, text, raw) if kind == "stdout" else Stderr(seq, text, raw)]
        if kind == "start":
            pid = payload.get("pid")
            return [
                Start(
                    seq,
                    str(payload.get("process_id", "")),
                    str(payload.get("sandbox_id", "")),
                    int(pid) if isinstance(pid, int) else None,
                )
            ]
        if kind == "exit":
            duration = payload.get("duration_ms")
            exit_event = Exit(
                seq,
                int(payload.get("exit_code", -1)),
                payload.get("signal"),
                str(payload.get("reason", "exited")),
                int(duration) if isinstance(duration, (int, float)) else None,
            )
            self.ended = True
            return [*self.flush(seq), exit_event]
        if kind == "gap":
            lost = payload.get("bytes")
            gap = Gap(
                int(payload.get("from_seq", 0)),
                int(payload.get("to_seq", 0)),
                int(lost) if isinstance(lost, (int, float)) else None,
            )
            # Bytes are missing, so a code point begun before the gap can never be completed.
            return [*self.flush(gap.from_seq - 1), gap]
        if kind == "error":
            self.ended = True
            return [Error(str(payload.get("code", "internal")), str(payload.get("message", "")))]
        return []

    def flush(self, seq: int) -> list[Event]:
        """Emits any incomplete UTF-8 tail as U+FFFD; used when no more bytes can follow it."""
        out: list[Event] = []
        for kind, decoder in self._decoders.items():
            tail = decoder.decode(b"", final=True)
            decoder.reset()
            if tail:
                out.append(Stdout(seq, tail, b"") if kind == "stdout" else Stderr(seq, tail, b""))
        return out


