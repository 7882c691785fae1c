"""Fixtures for the integration tests: the real sandstreamd on a loopback port.

`daemon` is one daemon for the whole session; `daemon_factory` starts extra daemons with other
flags or on an existing data directory (restarts). `client` and `sandbox` sit on `daemon`.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import DEFAULT_TEST_TIMEOUT, Daemon, create_sandbox
# Records the E2B SDK methods each test calls when SANDSTREAM_SDK_MATRIX is set (a hook;
# `pytest_plugins` would break `pytest tests`, where this conftest is not the first).
from sdk_matrix import pytest_configure  # noqa: F401

DaemonFactory = Callable[..., Daemon]


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The shared daemon, in its default configuration."""
    root = tmp_path_factory.mktemp("daemon")
    d = Daemon(root / "data", [], {}, root / "sandstreamd.log")
    d.start()
    yield d
    d.stop()
    d.stop_leftover_lxcfs()


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Starts extra daemons: `daemon_factory(args=[...], env={...}, data_dir=path)`."""
    started: list[Daemon] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None,
              data_dir: Path | None = None) -> Daemon:
        n = len(started)
        d = Daemon(data_dir or tmp_path / f"data{n}", args or [], env or {},
                   tmp_path / f"sandstreamd{n}.log")
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        # Gracefully, so the daemon kills its sandboxes' processes; stop() kills it if it hangs.
        if d.alive():
            with contextlib.suppress(AssertionError):
                d.stop(timeout=15)
    for d in started:
        d.stop_leftover_lxcfs()


@pytest.fixture(autouse=True)
def _session_daemon_alive(request: pytest.FixtureRequest) -> None:
    """Fails fast, with the daemon's last words, when an earlier test killed the session daemon."""
    if "daemon" in request.fixturenames:
        d: Daemon = request.getfixturevalue("daemon")
        if not d.alive():
            pytest.fail(f"the session daemon has died (status {d.proc.returncode if d.proc else None}"
                        f"); stderr tail:\n{d.log_tail()}")


@pytest.fixture(scope="session")
def client(daemon: Daemon) -> Iterator[httpx.Client]:
    """An authenticated client on the session daemon."""
    with daemon.client() as c:
        yield c


@pytest.fixture
def sandbox(client: httpx.Client) -> Iterator[dict[str, Any]]:
    """A fresh sandbox on the session daemon, deleted afterwards."""
    sb = create_sandbox(client)
    yield sb
    client.delete(f"/v1/sandboxes/{sb['id']}")


@pytest.fixture
def marker() -> str:
    """A unique `sleep` argument, so pgrep finds only this test's processes."""
    return f"1000.{secrets.randbelow(10**9):09d}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Gives every test a time limit unless it sets its own."""
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT))
