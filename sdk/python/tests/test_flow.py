"""Flow control against the real daemon: a command the SDK starts and reads is held back rather
than losing output, a follower waits when asked to (and skips by default), and a follow resumed
after the exit ends cleanly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandstream import AsyncSandbox, Event, Exit, Flow, Gap, Process, Sandbox, Stdout

from .conftest import Daemon

LINE = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n"


def producer(size: int, pause: float = 0) -> str:
    """Prints `size` bytes of LINE repeated as fast as it can, after `pause` seconds."""
    head = f"sleep {pause}; " if pause else ""
    return f"{head}yes {LINE[:-1]} | head -c {size}"


class TextCheck:
    """Checks that chunks are LINE repeated, in order, with holes only where a gap says."""

    def __init__(self) -> None:
        self.pos = 0
        self.received = 0
        self.skipped = 0
        self.gaps = 0

    def feed(self, chunk: str) -> None:
        start = self.pos % len(LINE)
        want = (LINE * (len(chunk) // len(LINE) + 2))[start : start + len(chunk)]
        assert chunk == want, f"output changed or out of order at offset {self.pos}"
        self.pos += len(chunk)
        self.received += len(chunk)

    def event(self, event: Event) -> None:
        if isinstance(event, Stdout):
            self.feed(event.data)
        elif isinstance(event, Gap):
            assert event.bytes is not None, event
            self.gaps += 1
            self.pos += event.bytes
            self.skipped += event.bytes


@pytest.fixture
def sb(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create() as sandbox:
        yield sandbox


@pytest.mark.timeout(300)
def test_exec_stream_of_a_fast_producer_arrives_whole(sb: Sandbox) -> None:
    size = 256 << 20
    check = TextCheck()
    exits: list[Exit] = []
    code = sb.exec_stream(producer(size), on_stdout=check.feed, on_exit=exits.append)
    assert code == 0 and exits[0].reason == "exited"
    assert check.received == size


def follow(process: Process, flow: Flow | None) -> TextCheck:
    check = TextCheck()
    for event in process.logs(follow=True, flow=flow):
        check.event(event)
        if isinstance(event, Exit):
            assert event.exit_code == 0
    return check


def test_a_waiting_follower_gets_every_byte(sb: Sandbox) -> None:
    size = 32 << 20
    # The pause lets the follower attach before the first byte.
    waited = follow(sb.processes.start(producer(size, 0.5)), "wait")
    assert waited.gaps == 0 and waited.received == size
    skipped = follow(sb.processes.start(producer(size, 0.5)), None)
    assert skipped.received + skipped.skipped == size


def test_a_follow_resumed_after_the_exit_ends_at_once(sb: Sandbox) -> None:
    process = sb.processes.start("echo one; echo two")
    events = list(process.logs(follow=True, flow="wait"))
    assert isinstance(events[-1], Exit)
    assert list(process.reattach()) == []
    assert list(process.logs(follow=True, since=events[-1].seq + 5)) == []


async def test_async_waiting_follower_gets_every_byte_and_ends_after_the_exit(
    daemon: Daemon,
) -> None:
    size = 16 << 20
    async with await AsyncSandbox.create() as sb:
        process = await sb.processes.start(producer(size, 0.5))
        check = TextCheck()
        async for event in process.logs(follow=True, flow="wait"):
            check.event(event)
        assert check.gaps == 0 and check.received == size
        assert [e async for e in process.reattach()] == []
