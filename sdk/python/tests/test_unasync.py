"""The generator of the sync client, scripts/unasync.py: its table, its blocks, its alignment and
what it refuses. Whether the committed _sync/ is current is a suite of scripts/test."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "unasync.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


unasync = _load()


def sync(source: str) -> str:
    text: str = unasync.unasync(source, "t.py", every_rule=False)
    assert text.startswith(unasync.HEADER)
    return text[len(unasync.HEADER):]


def test_the_table_turns_coroutines_into_plain_calls() -> None:
    source = (
        "import asyncio\n"
        "import time\n"
        "class AsyncThing(_AsyncBase):\n"
        "    async def run(self, client: httpx.AsyncClient) -> AsyncIterator[bytes]:\n"
        "        async with client.stream() as response:\n"
        "            async for chunk in response.aiter_bytes():\n"
        "                yield chunk\n"
        "            await response.aclose()\n"
        "        await _invoke(callback, (await self.read(path)).decode())\n"
        "        await _invoke(deliver)\n"
        "        await asyncio.sleep(1)\n"
    )
    assert sync(source) == (
        "import time\n"
        "class Thing(_Base):\n"
        "    def run(self, client: httpx.Client) -> Iterator[bytes]:\n"
        "        with client.stream() as response:\n"
        "            for chunk in response.iter_bytes():\n"
        "                yield chunk\n"
        "            response.close()\n"
        "        callback(self.read(path).decode())\n"
        "        deliver()\n"
        "        time.sleep(1)\n"
    )


def test_lines_aligned_under_a_bracket_stay_aligned() -> None:
    source = (
        "async def exec(self, cmd: str,\n"
        "               check: bool) -> int:\n"
        "    return await self.sandbox.exec(cmd, {'(': 1},\n"
        "                                   check=check)\n"
        "async def hanging(\n"
        "    a: int,\n"
        ") -> None:\n"
        "    pass\n"
    )
    assert sync(source) == (
        "def exec(self, cmd: str,\n"
        "         check: bool) -> int:\n"
        "    return self.sandbox.exec(cmd, {'(': 1},\n"
        "                             check=check)\n"
        "def hanging(\n"
        "    a: int,\n"
        ") -> None:\n"
        "    pass\n"
    )


def test_blocks_hold_what_only_one_client_has() -> None:
    source = (
        "def f() -> None:\n"
        "    # unasync: async only\n"
        '    """Async."""\n'
        "    # unasync: sync only\n"
        '    # """Sync.\n'
        "    #\n"
        "    # More.\n"
        '    # """\n'
        "    #     # a comment, indented\n"
        "    # unasync: end\n"
        "    x = 1\n"
        "    # unasync: sync only\n"
        "    # y = 2\n"
        "    # unasync: end\n"
        "# unasync: async only\n"
        "async def only_async() -> None:\n"
        "    await thing()\n"
        "# unasync: end\n"
    )
    assert sync(source) == (
        "def f() -> None:\n"
        '    """Sync.\n'
        "\n"
        "    More.\n"
        '    """\n'
        "        # a comment, indented\n"
        "    x = 1\n"
        "    y = 2\n"
    )


def test_a_block_left_out_leaves_no_extra_blank_lines() -> None:
    source = (
        "x = 1\n\n\n"
        "# unasync: async only\n"
        "async def f() -> None:\n"
        "    pass\n"
        "# unasync: end\n\n\n"
        "class A:\n"
        "    x = 1\n\n"
        "    # unasync: async only\n"
        "    async def f(self) -> None:\n"
        "        pass\n"
        "    # unasync: end\n\n"
        "    y = 2\n"
    )
    assert sync(source) == "x = 1\n\n\nclass A:\n    x = 1\n\n    y = 2\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("# unasync: async only\nx = 1\n", r"t.py:1: `# unasync: async only` is never ended"),
        ("x = 1\n# unasync: end\n", r"t.py:2: `# unasync: end` without a block open"),
        ("# unasync: sync only\nx = 1\n# unasync: end\n", r"t.py:2: .* must be commented out"),
        ("# unasync: sync only\n# unasync: async only\n", r"t.py:2: .* inside a `sync only` block"),
        ("# unasync: async-only\n", r"t.py:1: not a marker"),
        ("await asyncio.gather(a, b)\n", r"t.py:1: `asyncio` is left"),
        ("# unasync: sync only\n# def f(:\n# unasync: end\n", r"would not compile"),
    ],
)
def test_what_it_refuses(source: str, message: str) -> None:
    with pytest.raises(unasync.UnasyncError, match=message):
        unasync.unasync(source, "t.py", every_rule=False)


def test_a_substitution_that_matches_nothing_is_an_error() -> None:
    with pytest.raises(unasync.UnasyncError, match="match nothing"):
        unasync.unasync("x = 1\n", "t.py")


def test_check_fails_on_a_stale_file_and_passes_once_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "_async", tmp_path / "_sync"
    shutil.copytree(SCRIPT.parents[1] / "src" / "sandstream" / "_async", source)
    target.mkdir()
    (target / "sandbox.py").write_text("stale\n")
    (target / "gone.py").write_text("a module _async/ does not have\n")
    monkeypatch.setattr(unasync, "SOURCE", source)
    monkeypatch.setattr(unasync, "TARGET", target)
    assert unasync.main(["--check"]) == 1
    assert "-stale" in capsys.readouterr().out and (target / "sandbox.py").read_text() == "stale\n"
    assert unasync.main([]) == 0
    assert unasync.main(["--check"]) == 0
    assert not (target / "gone.py").exists()
    for module in source.glob("*.py"):
        assert (target / module.name).read_text() == unasync.unasync(module.read_text(), every_rule=False)


def test_a_substitution_that_matches_in_no_module_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.py").write_text("async def f() -> None:\n    await g()\n")
    monkeypatch.setattr(unasync, "SOURCE", tmp_path)
    monkeypatch.setattr(unasync, "TARGET", tmp_path / "out")
    assert unasync.main(["--check"]) == 2
    assert "match nothing in" in capsys.readouterr().err
