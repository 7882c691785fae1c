"""Every Python example in the README (and the repository's README) runs against the real daemon.

A sandbox with egress needs a host set up for it (tests/integration/test_egress.py builds one in
namespaces of its own), so an example that asks for egress runs against a daemon without it,
which checks the request in full and refuses it by name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import API_KEY, Daemon

README = Path(__file__).resolve().parents[1] / "README.md"
# The repository's README shows one example of this SDK too, when the tests run from a checkout.
TOP_README = Path(__file__).resolve().parents[3] / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.S) + (
    re.findall(r"```python\n(.*?)```", TOP_README.read_text(), re.S) if TOP_README.is_file() else [])


def asks_for_egress(code: str) -> bool:
    return "Egress(" in code or 'network="egress"' in code


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(daemon: Daemon, code: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    egress = asks_for_egress(code)
    target: Daemon = request.getfixturevalue("daemon_without_egress") if egress else daemon
    env = {**os.environ, "SANDSTREAM_URL": target.url, "SANDSTREAM_API_KEY": API_KEY}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    if egress:
        last = result.stderr.strip().splitlines()[-1:]
        assert last and last[0].startswith("sandstream.errors.InvalidRequest: "), result.stderr
        assert "egress_pool" in last[0], result.stderr
        return
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 6
