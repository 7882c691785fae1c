"""Every Python example in the README runs against the real daemon."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import API_KEY, Daemon

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(daemon: Daemon, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "SANDSTREAM_URL": daemon.url, "SANDSTREAM_API_KEY": API_KEY}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 6
