"""One version, VERSION's: sandstreamd --version, sandstream --version and /healthz say it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from helpers import BIN, Daemon
from test_cli import CLI  # $SANDSTREAM_CLI

VERSION = (Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()


def test_daemon_prints_its_version() -> None:
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"sandstreamd {VERSION}\n"


def test_cli_prints_its_version() -> None:
    for argv in (["--version"], ["--url", "http://127.0.0.1:1", "--version"]):
        out = subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"sandstream {VERSION}\n"


def test_healthz_and_listening_line_say_the_version(daemon: Daemon) -> None:
    assert httpx.get(f"{daemon.url}/healthz").json()["version"] == VERSION
    assert any(line.startswith(f"sandstreamd {VERSION} listening on") for line in daemon.stdout_lines)
