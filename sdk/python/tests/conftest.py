"""Fixtures: the real sandstreamd started once per session on a free loopback port with a
temporary data dir, a TCP proxy in front of it that tests can cut, and asyncio test support."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import selectors
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
API_KEY = "sdk-test-key"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs `async def` tests in a fresh event loop."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
        return True
    return None


def daemon_binary() -> Path | None:
    """The daemon under test: `SANDSTREAMD`, else the dev preset's build. Extra flags for it
    come from `SANDSTREAMD_ARGS`."""
    configured = os.environ.get("SANDSTREAMD")
    path = Path(configured) if configured else REPO / "build" / "dev" / "bin" / "sandstreamd"
    return path if path.is_file() and os.access(path, os.X_OK) else None


@dataclass
class Daemon:
    """A running sandstreamd."""

    url: str
    process: subprocess.Popen[str]
    data_dir: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_daemon(data_dir: Path, argv_prefix: list[str] | None = None, binary: Path | None = None,
                 args: list[str] | None = None) -> Daemon:
    """Starts sandstreamd on 127.0.0.1:0 with `args` after its own and waits for its
    `listening on` line."""
    exe = binary or daemon_binary()
    if exe is None:
        pytest.skip("sandstreamd is not built (build/dev/bin/sandstreamd; or set SANDSTREAMD)")
    data_dir.mkdir(parents=True, exist_ok=True)
    # No egress, whatever the environment says: these daemons run in this machine's own
    # network namespace, where no test may turn on forwarding.
    env = {**os.environ, "SANDSTREAM_API_KEY": API_KEY, "SANDSTREAM_EGRESS_POOL": "none"}
    extra = os.environ.get("SANDSTREAMD_ARGS", "").split()  # e.g. "--runtime directory"
    argv = [*(argv_prefix or []), str(exe), "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra, *(args or [])]
    log = open(data_dir.parent / f"{data_dir.name}.stderr.log", "w")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    seen: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(process.stdout, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if not sel.select(timeout=0.5):
            if process.poll() is not None:
                break
            continue
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(r"listening on (http://\S+)", line)
        if match:
            threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
            return Daemon(match.group(1).rstrip("/"), process, data_dir)
    process.kill()
    process.wait()
    log.close()
    errors = (data_dir.parent / f"{data_dir.name}.stderr.log").read_text()[-3000:]
    raise RuntimeError(f"sandstreamd did not start: stdout={''.join(seen)!r} stderr={errors}")


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The session's daemon; SANDSTREAM_URL and SANDSTREAM_API_KEY point at it."""
    d = start_daemon(tmp_path_factory.mktemp("sandstreamd") / "data")
    saved = {k: os.environ.get(k) for k in ("SANDSTREAM_URL", "SANDSTREAM_API_KEY")}
    os.environ["SANDSTREAM_URL"] = d.url
    os.environ["SANDSTREAM_API_KEY"] = API_KEY
    yield d
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    d.stop()


@pytest.fixture(scope="session")
def daemon_without_egress(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon whose config has no egress (`egress_pool none`): a request for egress is
    checked in full and then refused, and nothing is set up on this machine's network."""
    d = start_daemon(tmp_path_factory.mktemp("no-egress") / "data", args=["--egress-pool", "none"])
    yield d
    d.stop()


@pytest.fixture(autouse=True)
def daemon_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails fast, with the daemon's last words, once the session's daemon has died."""
    if "daemon" not in request.fixturenames:
        yield
        return
    d: Daemon = request.getfixturevalue("daemon")
    _fail_if_dead(d, "before this test")
    yield
    _fail_if_dead(d, "during this test")


def _fail_if_dead(d: Daemon, when: str) -> None:
    code = d.process.poll()
    if code is not None:
        log = d.data_dir.parent / f"{d.data_dir.name}.stderr.log"
        lines = log.read_text(errors="replace").splitlines()
        summary = [line for line in lines if "SUMMARY" in line or "ERROR" in line][-3:]
        pytest.fail(f"sandstreamd exited ({code}) {when}: {summary or lines[-5:]}", pytrace=False)


REQUEST_LINE = re.compile(rb"(?:^|\r\n)(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.[01]\r\n")


class Proxy:
    """A loopback TCP proxy to the daemon whose live connections a test can cut at will."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self.connections = 0
        # "METHOD /path" of each request the client sent through the proxy, in order.
        self.requests: list[str] = []
        self._refusing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                client.close()
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._pairs.append((client, upstream))
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client:
                    self._note_requests(data)
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _note_requests(self, data: bytes) -> None:
        # JSON bodies carry no raw CRLF, so only request lines match.
        for method, target in REQUEST_LINE.findall(data):
            with self._lock:
                self.requests.append(f"{method.decode()} {target.decode().split('?')[0]}")

    def requests_to(self, suffix: str) -> list[str]:
        """The requests seen whose path ends with `suffix`."""
        with self._lock:
            return [r for r in self.requests if r.endswith(suffix)]

    def cut(self) -> None:
        """Breaks every open connection, as a network failure would."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def refuse(self) -> None:
        """Cuts every connection and refuses new ones from now on."""
        self._refusing = True
        try:
            # close() alone does not wake a thread blocked in accept(); shutdown() does.
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self.cut()


@pytest.fixture
def proxy(daemon: Daemon) -> Iterator[Proxy]:
    """A cuttable proxy in front of the session's daemon."""
    port = int(daemon.url.rsplit(":", 1)[1])
    p = Proxy(port)
    yield p
    p.refuse()


@pytest.fixture
def unshare_available() -> None:
    """Skips unless a private mount namespace can be made (root with CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot create a mount namespace: {probe.stderr.strip()}")
