"""Fixtures for the API fuzz: one sandstreamd on a loopback port and real objects in it.

The daemon is the integration tests' `Daemon` (tests/integration/helpers.py), started from
SANDSTREAM_BIN (default build/schema/bin/sandstreamd). `world` holds a sandbox, an ended process
with output, a session, a code context and one of its runs, a volume, whose ids replace
generated ones.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import helpers  # noqa: E402

helpers.BIN = os.environ.get("SANDSTREAM_BIN", str(ROOT / "build" / "schema" / "bin" / "sandstreamd"))

# Streams that never end on their own (a follow, a files watch) are cut by schemathesis after a
# few events or its request timeout; a one-second keepalive lets it see that timeout pass.
# Commands the fuzzer makes up run for at most ten seconds unless they ask for longer.
# A fuzzed pull reaches nothing: the one registry allowed is a loopback port, which the policy
# refuses before connecting (no plain HTTP, no private address named).
DAEMON_ARGS = ["--keepalive-seconds", "1", "--exec-default-timeout-seconds", "10",
               "--resume-grace-seconds", "1", "--kill-grace-ms", "200",
               "--registry-allow", "127.0.0.1:9"]


@dataclass
class World:
    """Real objects on the daemon whose ids the fuzzed requests use."""

    url: str
    sandbox: str        # a running sandbox shared by the read-mostly operations
    process: str        # an ended process of `sandbox` that wrote to stdout and stderr
    session: str        # a shell session of `sandbox`
    context: str        # a bash code context of `sandbox`
    run: int            # the execution_count of a finished run of `context`
    port: int           # a port of `sandbox` something listens on, exposed
    tenant: str         # a tenant with a key
    key: str            # the id of that key
    token: str          # the id of a read token of `sandbox`
    volume: str         # the id of a small volume with a file in it


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[helpers.Daemon]:
    """The daemon under test."""
    root = tmp_path_factory.mktemp("fuzz")
    d = helpers.Daemon(root / "data", DAEMON_ARGS, {}, root / "sandstreamd.log")
    d.start()
    yield d
    with contextlib.suppress(AssertionError):
        d.stop(timeout=30)


@pytest.fixture(scope="session")
def client(daemon: helpers.Daemon) -> Iterator[httpx.Client]:
    """An authenticated client on the daemon, for setting up and cleaning up."""
    with daemon.client() as c:
        yield c


@pytest.fixture(scope="session")
def world(daemon: helpers.Daemon, client: httpx.Client) -> World:
    """A sandbox with an ended process, a session, a context with one finished run and an
    exposed port with a server on it."""
    sb = helpers.create_sandbox(client)["id"]
    r = client.post(f"/v1/sandboxes/{sb}/processes",
                    json={"cmd": "echo out; echo err >&2", "id": "fuzz-ended"})
    assert r.status_code == 201, r.text
    assert client.get(f"/v1/sandboxes/{sb}/processes/fuzz-ended/wait").status_code == 200
    r = client.post(f"/v1/sandboxes/{sb}/sessions", json={"id": "fuzz-session"})
    assert r.status_code == 201, r.text
    r = client.post(f"/v1/sandboxes/{sb}/contexts", json={"language": "bash"})
    assert r.status_code == 201, r.text
    ctx = r.json()["id"]
    r = client.post(f"/v1/sandboxes/{sb}/contexts/{ctx}/run", json={"code": "echo 42"},
                    headers={"Accept": "application/json"})
    assert r.status_code == 200, r.text
    run = r.json()["execution_count"]
    port = 8000
    r = client.post(f"/v1/sandboxes/{sb}/processes",
                    json={"argv": ["python3", "-m", "http.server", "-b", "127.0.0.1", str(port)]})
    assert r.status_code == 201, r.text
    assert client.get(f"/v1/sandboxes/{sb}/ports/{port}/wait").status_code == 200
    assert client.post(f"/v1/sandboxes/{sb}/ports", json={"port": port}).status_code == 201
    assert client.post("/v1/admin/tenants", json={"name": "fuzz-tenant"}).status_code == 201
    r = client.post("/v1/admin/tenants/fuzz-tenant/keys")
    assert r.status_code == 201, r.text
    key = r.json()["id"]
    r = client.post(f"/v1/sandboxes/{sb}/tokens", json={"scopes": ["read"]})
    assert r.status_code == 201, r.text
    token = r.json()["id"]
    r = client.post("/v1/volumes", json={"name": "fuzz-volume", "size_mb": 16})
    assert r.status_code == 201, r.text
    volume = r.json()["id"]
    r = client.put(f"/v1/volumes/{volume}/files/content", params={"path": "/f"}, content=b"x")
    assert r.status_code == 201, r.text
    return World(daemon.url, sb, "fuzz-ended", "fuzz-session", ctx, run, port, "fuzz-tenant", key,
                 token, volume)


@pytest.fixture(autouse=True)
def _daemon_alive(daemon: helpers.Daemon) -> Iterator[None]:
    """After each test the daemon still runs: a crash is named with its last words."""
    yield
    assert daemon.alive(), f"sandstreamd died; stderr tail:\n{daemon.log_tail()}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Gives every test a time limit unless it sets its own."""
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(180))
