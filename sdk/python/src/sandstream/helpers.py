"""Output helpers: chunks to lines, ANSI stripping that survives chunk boundaries, digests.

Chunks are what `read()` returned, not lines; these turn them into text fit for a log or a
model's context. No I/O here.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable

_TOKEN = re.compile(
    r"(?P<csi>\x1b\[(?P<params>[0-?]*)[ -/]*(?P<final>[@-~]))"
    r"|(?P<osc>\x1b\][^\x07\x1b]*(?:\x07|\x1b\\))"
    r"|(?P<esc>\x1b[ -/]*[0-Z\\^-~])"
    r"|(?P<text>[^\x00-\x08\x0a-\x1f\x7f]+)"
    r"|(?P<ctl>[\x00-\x1f\x7f])"
)
# An escape sequence cut off by the end of the data so far: wait for the rest.
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[ -/]*)")
_MAX_CARRY = 4096


class AnsiStripper:
    """Removes ANSI escape sequences from a stream of chunks and applies line redraws.

    Stateful: an escape sequence split across chunks is recognised whole, never half-stripped.
    Carriage returns, backspaces and erase-in-line redraw the current line the way a terminal
    would, so a progress bar leaves only its final state. `feed()` returns the finished lines
    (through the last newline); the line being drawn is held until its newline or `flush()`.
    """

    def __init__(self) -> None:
        self._carry = ""
        self._line: list[str] = []
        self._cursor = 0

    def feed(self, chunk: str) -> str:
        """Consumes a chunk and returns the cleaned text of the lines it finished."""
        data = self._carry + chunk
        self._carry = ""
        out: list[str] = []
        pos, end = 0, len(data)
        while pos < end:
            m = _TOKEN.match(data, pos)
            if m is None or (m.lastgroup == "ctl" and data[pos] == "\x1b"):
                rest = _INCOMPLETE.fullmatch(data, pos)
                if rest is not None:
                    if end - pos <= _MAX_CARRY:
                        self._carry = data[pos:]
                    break
                pos += 1  # a malformed escape: drop the ESC byte alone
                continue
            pos = m.end()
            kind = m.lastgroup
            if kind == "text":
                self._write(m.group())
            elif kind == "csi":
                self._csi(m.group("params"), m.group("final"))
            elif kind == "ctl":
                ch = m.group()
                if ch == "\n":
                    out.append("".join(self._line) + "\n")
                    self._line, self._cursor = [], 0
                elif ch == "\r":
                    self._cursor = 0
                elif ch == "\b":
                    self._cursor = max(0, self._cursor - 1)
        return "".join(out)

    def flush(self) -> str:
        """Returns the unfinished last line (without a newline) and resets the state."""
        text = "".join(self._line)
        self._carry, self._line, self._cursor = "", [], 0
        return text

    def _write(self, text: str) -> None:
        line, cur = self._line, self._cursor
        if cur == len(line):
            line.extend(text)
        else:
            if cur > len(line):
                line.extend(" " * (cur - len(line)))
            line[cur : cur + len(text)] = list(text)
        self._cursor = cur + len(text)

    def _csi(self, params: str, final: str) -> None:
        first = params.split(";")[0]
        n = int(first) if first.isdigit() else None
        if final == "K":
            if n in (None, 0):
                del self._line[self._cursor :]
            elif n == 1:
                self._line[: self._cursor] = [" "] * min(self._cursor, len(self._line))
            elif n == 2:
                self._line = []
        elif final == "G":
            self._cursor = max(0, (n or 1) - 1)
        elif final == "C":
            self._cursor += n or 1
        elif final == "D":
            self._cursor = max(0, self._cursor - (n or 1))


def strip_ansi(text: str) -> str:
    """Returns `text` without ANSI escape sequences, each line showing its final redraw."""
    stripper = AnsiStripper()
    return stripper.feed(text) + stripper.flush()


class LineBuffer:
    """Reassembles chunks into whole lines (without their `\\n` or `\\r\\n`).

    Use `feed` as an `on_stdout` callback; call `flush()` after the command ends to get the
    last line when the output did not end with a newline.
    """

    def __init__(self, on_line: Callable[[str], object] | None = None) -> None:
        self._pending = ""
        self._on_line = on_line

    def feed(self, chunk: str) -> list[str]:
        """Consumes a chunk; returns (and passes to `on_line`) the lines it completed."""
        self._pending += chunk
        if "\n" not in chunk:
            return []
        *lines, self._pending = self._pending.split("\n")
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        self._emit(lines)
        return lines

    def flush(self) -> list[str]:
        """Returns the unfinished last line, if any, as a line of its own."""
        if not self._pending:
            return []
        line, self._pending = self._pending, ""
        self._emit([line])
        return [line]

    @property
    def pending(self) -> str:
        """The text received after the last newline."""
        return self._pending

    def _emit(self, lines: list[str]) -> None:
        if self._on_line is not None:
            for line in lines:
                self._on_line(line)


DEFAULT_ERROR_PATTERNS = (
    r"\berror\b",
    r"\bfailed\b",
    r"\bfailure\b",
    r"\bfatal\b",
    r"\bexception\b",
    r"^Traceback ",
    r"\bpanic\b",
    r"\bdenied\b",
    r"\bnot found\b",
    r"\bsegmentation fault\b",
    r"^E\s",
)


class OutputDigest:
    """A bounded summary of a command's output, for a log or a language model's context.

    Keeps the last `tail_lines` lines and up to `max_matches` earlier lines that match an
    error pattern, with ANSI codes and progress redraws removed. Memory stays bounded
    however much the command prints. Feed it chunks (e.g. `on_stdout=digest.feed`).
    """

    def __init__(
        self,
        tail_lines: int = 50,
        max_matches: int = 20,
        patterns: Iterable[str] = DEFAULT_ERROR_PATTERNS,
        max_line_chars: int = 400,
    ) -> None:
        self._stripper = AnsiStripper()
        self._tail: deque[tuple[int, str]] = deque(maxlen=tail_lines)
        self._matches: list[tuple[int, str]] = []
        self._max_matches = max_matches
        self._pattern = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
        self._max_line_chars = max_line_chars
        self.lines = 0
        self.matched = 0

    def feed(self, chunk: str) -> None:
        """Consumes a chunk of output."""
        text = self._stripper.feed(chunk)
        if text:
            for line in text[:-1].split("\n"):
                self._add(line)

    def flush(self) -> None:
        """Takes in the unfinished last line; call once the command has ended."""
        line = self._stripper.flush()
        if line:
            self._add(line)

    def text(self) -> str:
        """The digest: error-pattern lines from before the tail, then the tail."""
        self.flush()
        tail_start = self._tail[0][0] if self._tail else self.lines + 1
        earlier = [m for m in self._matches if m[0] < tail_start]
        parts: list[str] = []
        if earlier:
            parts.append(f"[{self.matched} line(s) matched error patterns; earlier ones:]")
            parts.extend(f"{n}: {line}" for n, line in earlier)
        omitted = tail_start - 1
        if omitted > 0:
            parts.append(f"[{omitted} line(s) before the last {len(self._tail)} not shown]")
        parts.extend(line for _, line in self._tail)
        return "\n".join(parts)

    def tail(self) -> str:
        """Only the last lines kept."""
        self.flush()
        return "\n".join(line for _, line in self._tail)

    __str__ = text

    def _add(self, line: str) -> None:
        self.lines += 1
        if len(line) > self._max_line_chars:
            line = line[: self._max_line_chars] + " [...]"
        self._tail.append((self.lines, line))
        if self._pattern.search(line):
            self.matched += 1
            if len(self._matches) < self._max_matches:
                self._matches.append((self.lines, line))
