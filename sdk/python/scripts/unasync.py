"""Writes the sync client, src/sandstream/_sync/, from the async one, src/sandstream/_async/,
module by module (`_async/files.py` makes `_sync/files.py`), the way httpcore's
scripts/unasync.py does: a fixed table of substitutions applied line by line. `--check` writes
nothing and exits 1 if a module of `_sync/` is not what its `_async/` source makes, or if
`_sync/` holds a module `_async/` does not.

What only one client has is marked in the source: lines between `# unasync: async only` and
`# unasync: end` are left out; lines between `# unasync: sync only` and `# unasync: end` are
commented out there and written to the sync module uncommented, as they are. An `async only`
block may switch straight to `sync only` to replace its lines. Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sandstream"
SOURCE = PACKAGE / "_async"
TARGET = PACKAGE / "_sync"

HEADER = (
    "# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do\n"
    "# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells\n"
    "# whether this file is current).\n"
)

# Applied in order to every shared line. A rule that matches nothing in any module is an error, so
# the table never holds a stale entry; a line a rule empties is dropped.
SUBSTITUTIONS: list[tuple[str, str]] = [
    (r"^import (asyncio|inspect)\n", ""),
    # A callback that may be a coroutine function is a plain call in the sync client.
    (r"\bawait _invoke\(([\w.]+)(, )?", r"\1("),
    (r"\(await ([\w.]+\([^()]*\))\)", r"\1"),  # (await f(x)).y: f(x).y
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\basync for ", "for "),
    (r"\bawait ", ""),
    (r"\basyncio\.sleep\(", "time.sleep("),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\(", "close("),
    (r"\baread\(", "read("),
    (r"\baiter_bytes\(", "iter_bytes("),
    # AsyncSandbox, _AsyncApi, httpx.AsyncClient, AsyncIterator, AsyncIterable, ...
    (r"\b(_?)Async([A-Z]\w*)", r"\1\2"),
]
RULES = [(re.compile(pattern, re.M), replacement) for pattern, replacement in SUBSTITUTIONS]

# What no shared line may still hold once the table has been applied.
LEFTOVER = re.compile(r"\b(async|await|asyncio)\b|\binspect\.|Async[A-Z]|\ba(close|read|iter_\w+)\(")

MARKER = re.compile(r"^\s*# unasync: (async only|sync only|end)\n?$")
COMMENTED = re.compile(r"^(\s*)# ?(.*\n?)$")


class UnasyncError(Exception):
    """An async module cannot be turned into its sync one; the message names the line."""


def unasync(source: str, name: str = "source", *, every_rule: bool = True,
            used: set[int] | None = None) -> str:
    """The sync module for the async module `source`. With `every_rule`, a substitution that
    matches nothing is an error. The indexes of the rules that matched are added to `used`."""
    used = set() if used is None else used
    out: list[str | None] = [HEADER]  # None: where a marker stood
    block: str | None = None  # the open block's kind
    opened = 0
    align = _Align()
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        where = f"{name}:{number}"
        marker = MARKER.match(line)
        if marker is None and "# unasync:" in line:
            raise UnasyncError(f"{where}: not a marker: {line.strip()!r}")
        if marker is not None:
            align = _Align()
            out.append(None)
            kind = marker.group(1)
            if kind == "end":
                if block is None:
                    raise UnasyncError(f"{where}: `# unasync: end` without a block open")
                block = None
            elif kind == "sync only" and block in (None, "async only"):
                block = kind
            elif block is None:
                block = kind
            else:
                raise UnasyncError(f"{where}: `# unasync: {kind}` inside a `{block}` block")
            opened = number
            continue
        if block == "async only":
            continue
        if block == "sync only":
            commented = COMMENTED.match(line)
            if line.strip() and commented is None:
                raise UnasyncError(f"{where}: a line of a `sync only` block must be commented out")
            if commented is None or not commented.group(2).strip():
                out.append("\n")
            else:
                out.append(commented.group(1) + commented.group(2))
            continue
        out.append(align.line(line, _shared_line(line, where, used)))
    if block is not None:
        raise UnasyncError(f"{name}:{opened}: `# unasync: {block}` is never ended")
    unused = [SUBSTITUTIONS[i][0] for i in range(len(RULES)) if i not in used]
    if every_rule and unused:
        raise UnasyncError(f"substitutions that match nothing in {name}: {unused}")
    lines = _close_seams(out)
    text = "".join(lines)
    for line in lines:
        if line.rstrip("\n").endswith((" ", "\t")):
            raise UnasyncError(f"a generated line ends with white space: {line!r}")
    try:
        compile(text, name, "exec")
    except SyntaxError as exc:
        raise UnasyncError(f"the sync module would not compile: {exc}") from exc
    return text


def _shared_line(line: str, where: str, used: set[int]) -> str:
    result = line
    for index, (rule, replacement) in enumerate(RULES):
        result, count = rule.subn(replacement, result)
        if count:
            used.add(index)
    leftover = LEFTOVER.search(result)
    if leftover is not None:
        raise UnasyncError(
            f"{where}: `{leftover.group(0)}` is left after the substitutions; add a rule or "
            f"put the line in an `# unasync: async only` block"
        )
    if line.strip() and not result.strip():
        return ""
    return result


def _close_seams(out: list[str | None]) -> list[str]:
    """`out` without its marker places, the blank lines around each cut down to what the next
    line wants (two before a top-level one, one before an indented one), as if the blocks left
    out had never been there."""
    lines: list[str] = []
    blank, seam = 0, False
    for line in out:
        if line is None:
            seam = True
        elif not line:
            continue  # a line the table emptied
        elif not line.strip():
            blank += 1
        else:
            if seam:
                blank = min(blank, 1 if line[0] in " \t" else 2)
            lines += ["\n"] * blank + [line]
            blank, seam = 0, False
    return lines + ["\n"] * blank


class _Align:
    """Keeps continuation lines under the bracket they align with when a substitution has
    shortened the line that opened it (`async def f(a,` loses six columns before its bracket)."""

    def __init__(self) -> None:
        self.depth = 0  # brackets still open since that line
        self.column = 0  # lines indented this far or further in aio.py move left...
        self.shift = 0  # ...by this many columns

    def line(self, source: str, result: str) -> str:
        """`result`, the sync form of the line `source`, aligned."""
        balance, bracket = _brackets(source)
        if self.depth > 0:
            indent = len(source) - len(source.lstrip(" "))
            if source.strip() and indent >= self.column:
                result = result[self.shift:]
            self.depth = max(0, self.depth + balance)
        elif balance > 0 and result != source:
            shift = bracket - _brackets(result)[1]
            if shift > 0:
                self.depth, self.column, self.shift = balance, bracket + 1, shift
        return result


def _brackets(line: str) -> tuple[int, int]:
    """How many more brackets the code of `line` opens than it closes, and the column of the
    last one it leaves open (-1 if none); strings and comments are skipped."""
    opened: list[int] = []
    closed = 0
    quote = ""
    for column, char in enumerate(line):
        if quote:
            if char == quote and line[column - 1] != "\\":
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            break
        elif char in "([{":
            opened.append(column)
        elif char in ")]}":
            if opened:
                opened.pop()
            else:
                closed += 1
    return len(opened) - closed, opened[-1] if opened else -1


def expected_modules() -> dict[str, str]:
    """Each sync module's name and text, from every module of SOURCE; every rule must match in
    one of them."""
    used: set[int] = set()
    modules = {path.name: unasync(path.read_text(), f"{SOURCE.name}/{path.name}", every_rule=False, used=used)
               for path in sorted(SOURCE.glob("*.py"))}
    unused = [SUBSTITUTIONS[i][0] for i in range(len(RULES)) if i not in used]
    if unused:
        raise UnasyncError(f"substitutions that match nothing in {SOURCE.name}/: {unused}")
    return modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if _sync/ differs from what _async/ makes")
    args = parser.parse_args(argv)
    try:
        expected = expected_modules()
    except UnasyncError as exc:
        print(f"unasync: {exc}", file=sys.stderr)
        return 2
    current = {path.name: path.read_text() for path in sorted(TARGET.glob("*.py"))}
    stale = sorted(name for name in expected.keys() | current.keys()
                   if expected.get(name) != current.get(name))
    if args.check:
        if not stale:
            print(f"unasync: {TARGET.name}/ is current ({len(expected)} modules)")
            return 0
        for name in stale:
            diff = difflib.unified_diff(
                current.get(name, "").splitlines(keepends=True),
                expected.get(name, "").splitlines(keepends=True),
                f"{TARGET.name}/{name} (committed)",
                f"{TARGET.name}/{name} (from {SOURCE.name}/{name})",
            )
            sys.stdout.writelines(diff)
        print(f"unasync: {', '.join(stale)} in {TARGET.name}/ not what {SOURCE.name}/ makes; run "
              f"`python sdk/python/scripts/unasync.py` and commit the result", file=sys.stderr)
        return 1
    TARGET.mkdir(exist_ok=True)
    for name in stale:
        if name in expected:
            (TARGET / name).write_text(expected[name])
            print(f"unasync: wrote {TARGET.name}/{name}")
        else:
            (TARGET / name).unlink()
            print(f"unasync: removed {TARGET.name}/{name}, which {SOURCE.name}/ no longer has")
    if not stale:
        print(f"unasync: {TARGET.name}/ was current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
