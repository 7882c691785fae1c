"""Shared helpers for the integration tests: a sandstreamd process and small assertions."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SANDSTREAM_BIN", str(REPO / "build/dev/bin/sandstreamd"))
API_KEY = "testkey"
READY_RE = re.compile(r"^sandstreamd .*listening on (http://[0-9.]+:(\d+))")
START_SECONDS = 30.0
DEFAULT_TEST_TIMEOUT = 60


class Daemon:
    """One sandstreamd process started on 127.0.0.1:0: BIN, or `binary`."""

    def __init__(self, data_dir: Path, args: list[str], env: dict[str, str], log_path: Path,
                 wrapper: list[str] | None = None, listen: str = "127.0.0.1:0",
                 binary: str | None = None):
        self.binary = binary or BIN
        self.data_dir = data_dir
        self.args = args
        self.env = env
        self.log_path = log_path
        # A command the daemon runs under (nsenter into a test's network namespace), and then a
        # Unix socket relayed to its port (netns_relay.py), for clients outside.
        self.wrapper = wrapper or []
        self.listen = listen
        self.uds: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0
        self.stdout_lines: list[str] = []

    @property
    def pid(self) -> int:
        """The daemon's own pid."""
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Starts the daemon and waits for its `listening on` line."""
        if not os.access(self.binary, os.X_OK):
            pytest.fail(f"sandstreamd binary not found at {self.binary} (set SANDSTREAM_BIN)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Stopped, a test's daemon ends its sandboxes (the default keeps them for the next
        # start); a test of that default passes --teardown-on-exit false.
        # And without egress, whatever the environment says: these daemons run in this machine's
        # own network namespace, where no test may turn on forwarding (test_egress.py gives its
        # daemons a namespace of their own and --egress-pool).
        env = {**os.environ, "SANDSTREAM_API_KEY": API_KEY, "SANDSTREAM_TEARDOWN_ON_EXIT": "true",
               "SANDSTREAM_EGRESS_POOL": "none", **self.env}
        cmd = [*self.wrapper, self.binary, "--listen", self.listen, "--data-dir", str(self.data_dir),
               *self.args]
        log = open(self.log_path, "ab")
        # Its own session: a wrong group kill by the daemon must not reach the test runner.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env,
                                     start_new_session=True)
        log.close()
        ready = threading.Event()

        def drain() -> None:
            # Keeps reading stdout so the daemon never blocks on a full pipe.
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.stdout_lines.append(line)
                m = READY_RE.search(line)
                if m and not ready.is_set():
                    self.url, self.port = m.group(1), int(m.group(2))
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + START_SECONDS
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"sandstreamd did not start ({' '.join(cmd)}): stdout "
                            f"{self.stdout_lines!r}, stderr tail:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Sends `sig` and waits for the exit; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"sandstreamd did not exit within {timeout}s of signal {sig}")

    def send_signal(self, sig: int) -> None:
        """Sends `sig` without waiting."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, if still running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop_leftover_lxcfs(self) -> None:
        """Stops the lxcfs this daemon's data dir names, once no daemon runs on it.

        A daemon stopped gracefully with teardown stops its lxcfs; one a test SIGKILLed leaves
        it running for a next daemon to take over. The tests end here, so nothing will."""
        pidfile = self.data_dir / "lxcfs.pid"
        mount = self.data_dir / "lxcfs"
        try:
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            pid, cmdline = 0, b""
        if pid > 1 and str(mount).encode() in cmdline:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not Path(f"/proc/{pid}/cmdline").exists()
                       or not Path(f"/proc/{pid}/cmdline").read_bytes(), 5)
        if str(mount) in Path("/proc/self/mountinfo").read_text():
            subprocess.run(["umount", "-l", str(mount)], check=False)

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def client(self, key: str | None = API_KEY, timeout: float = 30.0) -> httpx.Client:
        """An httpx client on this daemon, authenticated unless `key` is None."""
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        if self.uds is not None:
            return httpx.Client(base_url="http://sandstream", headers=headers, timeout=timeout,
                                transport=httpx.HTTPTransport(uds=str(self.uds)))
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def rss_kib(self) -> int:
        """VmRSS from /proc/<pid>/status, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def memory_kib(self) -> int:
        """What the daemon holds, in KiB: its resident memory but for shared memory, and every
        page of the memfds it has open. Output logs are memfds it writes with splice(2), not
        through their mapping, so VmRSS alone misses what it has not read back."""
        fields = dict(line.split(":", 1)
                      for line in Path(f"/proc/{self.pid}/status").read_text().splitlines())
        held = sum(int(fields[k].split()[0]) for k in ("RssAnon", "RssFile"))
        for fd in Path(f"/proc/{self.pid}/fd").iterdir():
            try:
                if os.readlink(fd).startswith("/memfd:"):
                    held += fd.stat().st_blocks // 2
            except FileNotFoundError:
                continue  # closed meanwhile
        return held

    def log_tail(self, n: int = 40) -> str:
        """The last lines the daemon wrote to stderr."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""


def create_sandbox(c: httpx.Client, **body: Any) -> dict[str, Any]:
    """POST /v1/sandboxes; asserts 201."""
    r = c.post("/v1/sandboxes", json=body)
    assert r.status_code == 201, r.text
    sb: dict[str, Any] = r.json()
    return sb


def pgrep(pattern: str) -> list[str]:
    """Command lines of live processes matching `pattern` (pgrep -af)."""
    r = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if line.strip()]


def wait_no_process(pattern: str, within: float = 2.0) -> list[str]:
    """Polls until nothing matches `pattern` or `within` passes; returns what is left."""
    deadline = time.monotonic() + within
    left = pgrep(pattern)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = pgrep(pattern)
    return left


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Asserts the spec's error shape, status and code; returns the error object."""
    assert r.status_code == status, f"{r.status_code} {r.text}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"error"}, body
    err: dict[str, Any] = body["error"]
    assert err.get("code") == code, body
    assert isinstance(err.get("message"), str) and err["message"], body
    return err


def pause(c: httpx.Client, sandbox_id: str, **body: Any) -> dict[str, Any]:
    """POST .../pause with `body` ({"mode": ...}); asserts 200 and returns the sandbox."""
    r = c.post(f"/v1/sandboxes/{sandbox_id}/pause", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def resume(c: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    """POST .../resume; asserts 200 and returns the sandbox."""
    r = c.post(f"/v1/sandboxes/{sandbox_id}/resume")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def run(c: httpx.Client, sandbox_id: str, **body: Any) -> dict[str, Any]:
    """POST .../exec; asserts 200 and returns the result."""
    r = c.post(f"/v1/sandboxes/{sandbox_id}/exec", json=body)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def wait_until(predicate: Any, within: float, interval: float = 0.05) -> bool:
    """Polls `predicate()` until it is truthy or `within` seconds pass; returns the last value."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return bool(value)
        time.sleep(interval)


def cgroup_parent_name(data_dir: Path) -> str:
    """sandstream-<FNV-1a of the data directory>, as the daemon names it."""
    h = 2166136261
    for b in str(data_dir).encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return f"sandstream-{h:08x}"


def sandbox_memory_bytes(d: Daemon, sandbox_id: str) -> int:
    """What the memory cgroup of a sandbox of `d` is charged now (cgroup v2 or v1)."""
    name = cgroup_parent_name(d.data_dir)
    for line in Path(f"/proc/{d.pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        path = path.removesuffix(f"/{name}.daemon").lstrip("/")
        if controllers == "":
            f = Path("/sys/fs/cgroup") / path / name / sandbox_id / "memory.current"
        elif "memory" in controllers.split(","):
            f = Path("/sys/fs/cgroup/memory") / path / name / sandbox_id / "memory.usage_in_bytes"
        else:
            continue
        if f.exists():
            return int(f.read_text())
    raise AssertionError(f"no memory cgroup found for {sandbox_id}")


def tenant(admin: httpx.Client, name: str, **quotas: int) -> str:
    """Creates tenant `name` (with `quotas`) through the admin's client and returns a key of it."""
    r = admin.post("/v1/admin/tenants", json={"name": name, "quotas": quotas})
    assert r.status_code == 201, r.text
    r = admin.post(f"/v1/admin/tenants/{name}/keys")
    assert r.status_code == 201, r.text
    key: str = r.json()["key"]
    assert key.startswith("ssk_") and r.json()["id"] in key.replace("ssk_", "key_")
    return key
