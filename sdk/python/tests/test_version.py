"""The package's version is the repository's VERSION, and every request says it."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import sandstream
from sandstream import ClientConfig

VERSION = (Path(__file__).resolve().parents[3] / "VERSION").read_text().strip()


def test_version_is_the_repository_s() -> None:
    assert sandstream.__version__ == VERSION
    assert version("sandstream") == VERSION


def test_user_agent_carries_the_version() -> None:
    config = ClientConfig.resolve("http://127.0.0.1:1", "key")
    assert config.headers()["User-Agent"] == f"sandstream-python/{VERSION}"
