"""LineBuffer, AnsiStripper/strip_ansi and OutputDigest on chunk sequences cut everywhere."""

from __future__ import annotations

import pytest

from sandstream import AnsiStripper, LineBuffer, OutputDigest, strip_ansi


def every_split(text: str) -> list[list[str]]:
    """All ways of cutting `text` into two or three chunks."""
    cuts = [[text[:i], text[i:]] for i in range(len(text) + 1)]
    cuts += [[text[:i], text[i:j], text[j:]] for i in range(len(text)) for j in range(i, len(text))]
    return cuts


def feed_all(chunks: list[str]) -> str:
    stripper = AnsiStripper()
    return "".join(stripper.feed(c) for c in chunks) + stripper.flush()


def test_line_buffer_reassembles_and_flushes_the_last_line() -> None:
    seen: list[str] = []
    lb = LineBuffer(seen.append)
    assert lb.feed("hel") == []
    assert lb.feed("lo\nwor") == ["hello"]
    assert lb.feed("ld\r\n\nlast") == ["world", ""]
    assert lb.pending == "last"
    assert lb.flush() == ["last"]
    assert lb.flush() == []
    assert seen == ["hello", "world", "", "last"]


def test_line_buffer_crlf_split_across_chunks() -> None:
    lb = LineBuffer()
    assert lb.feed("a\r") == []
    assert lb.feed("\nb") == ["a"]


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("\x1b[31mred\x1b[0m plain\n", "red plain\n"),
        ("\x1b[1;32;40mbold\x1b[m\n", "bold\n"),
        ("\x1b]0;window title\x07text\n", "text\n"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n", "link\n"),
        ("\x1b(Bcharset\n", "charset\n"),
        ("progress 10%\rprogress 55%\rprogress 100%\n", "progress 100%\n"),
        ("abc\rX\n", "Xbc\n"),
        ("50%\r\x1b[2Kdone\n", "done\n"),
        ("downloading\x1b[1G\x1b[Kok\n", "ok\n"),
        ("ab\bc\n", "ac\n"),
        ("tab\there\n", "tab\there\n"),
        ("windows\r\nline\r\n", "windows\nline\n"),
        ("bell\x07!\n", "bell!\n"),
        ("no newline \x1b[33mat end", "no newline at end"),
        ("€ ünïcode ✓\n", "€ ünïcode ✓\n"),
    ],
)
def test_strip_ansi_is_the_same_however_the_text_is_chunked(raw: str, clean: str) -> None:
    assert strip_ansi(raw) == clean
    for chunks in every_split(raw):
        assert feed_all(chunks) == clean, chunks


def test_stripper_holds_a_split_escape_instead_of_leaking_half() -> None:
    s = AnsiStripper()
    assert s.feed("ok \x1b[3") == ""
    assert s.feed("1mred\x1b[0m\n") == "ok red\n"


def test_stripper_returns_finished_lines_only() -> None:
    s = AnsiStripper()
    assert s.feed("one\ntw") == "one\n"
    assert s.feed("o\rTWO\nthr") == "TWO\n"
    assert s.flush() == "thr"


def test_malformed_escape_drops_only_the_escape_byte() -> None:
    assert strip_ansi("a\x1b[12\nb\n") == "a[12\nb\n"


def test_output_digest_keeps_errors_and_tail_and_drops_progress() -> None:
    digest = OutputDigest(tail_lines=3, max_matches=5)
    digest.feed("starting\n")
    digest.feed("ERROR: could not resolve host\n")
    for i in range(100):
        digest.feed(f"\rdownloading {i}%")
    digest.feed("\n")
    for i in range(10):
        digest.feed(f"line {i}\n")
    digest.feed("build failed")
    text = digest.text()
    assert "2: ERROR: could not resolve host" in text
    assert "downloading" not in text
    assert text.endswith("line 8\nline 9\nbuild failed")
    assert "[11 line(s) before the last 3 not shown]" in text
    assert digest.lines == 14
    assert digest.matched == 2
    assert digest.tail() == "line 8\nline 9\nbuild failed"


def test_output_digest_bounds_memory_and_long_lines() -> None:
    digest = OutputDigest(tail_lines=5, max_matches=2, max_line_chars=20)
    for i in range(10_000):
        digest.feed(f"error number {i} " + "x" * 100 + "\n")
    assert digest.lines == 10_000
    assert digest.matched == 10_000
    text = digest.text()
    assert len(text.splitlines()) == 2 + 2 + 5
    assert all(len(line) < 60 for line in text.splitlines())
