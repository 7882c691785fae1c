"""Fixtures for the packaging tests: the daemon of the integration tests (tests/integration/
helpers.py), a scratch directory outside the checkout, and the version they must all say."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from helpers import Daemon  # noqa: E402

VERSION = (REPO / "VERSION").read_text().strip()


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The dev build's sandstreamd (SANDSTREAM_BIN), without egress, ending its sandboxes on
    stop."""
    root = tmp_path_factory.mktemp("daemon")
    d = Daemon(root / "data", [], {}, root / "sandstreamd.log")
    d.start()
    yield d
    d.stop()
