"""The names spec/sdk-verbs.md retired still work for a minor version, warn, and do what the
new names do."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandstream import AsyncProcess, Process

# old name -> (new name, arguments)
RENAMED: dict[str, tuple[str, tuple[Any, ...]]] = {
    "send_stdin": ("write_stdin", (b"x", True)),
    "signal": ("send_signal", ("INT", False)),
    "wait": ("wait_for_exit", (5.0,)),
}


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_a_retired_process_verb_warns_and_calls_the_new_one(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    new, args = RENAMED[old]
    calls: list[tuple[Any, ...]] = []
    def replacement(*a: Any) -> str:
        calls.append(a)
        return "done"

    process = Process.__new__(Process)
    monkeypatch.setattr(process, new, replacement, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"Process\.{old} is deprecated .* use {new}"):
        assert getattr(process, old)(*args) == "done"
    assert calls == [args]


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_a_retired_async_process_verb_warns_and_awaits_the_new_one(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    new, args = RENAMED[old]
    calls: list[tuple[Any, ...]] = []

    async def replacement(*a: Any) -> str:
        calls.append(a)
        return "done"

    process = AsyncProcess.__new__(AsyncProcess)
    monkeypatch.setattr(process, new, replacement, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"Process\.{old} is deprecated .* use {new}"):
        assert asyncio.run(getattr(process, old)(*args)) == "done"
    assert calls == [args]
