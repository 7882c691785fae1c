"""The package is fully typed: mypy --strict passes on it and on the tests' use of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_mypy_strict_passes_on_the_package() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(ROOT / "src" / "sandstream")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_package_ships_py_typed() -> None:
    assert (ROOT / "src" / "sandstream" / "py.typed").is_file()
