"""The `sandstream` CLI against the real daemon (fixtures from conftest.py) and against small
fake servers for the cases the daemon cannot be made to produce: a dropped connection at a
chosen point, a stream that ends without an exit.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from helpers import API_KEY, REPO, Daemon, create_sandbox

CLI = os.environ.get("SANDSTREAM_CLI", str(REPO / "build/dev/bin/sandstream"))


def cli_env(url: str, key: str = API_KEY) -> dict[str, str]:
    """The environment that points the CLI at `url`."""
    return {**os.environ, "SANDSTREAM_URL": url, "SANDSTREAM_API_KEY": key}


def run_cli(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    """Runs the CLI to completion, capturing stdout and stderr as bytes."""
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"sandstream binary not found at {CLI} (set SANDSTREAM_CLI)")
    return subprocess.run([CLI, *args], env=env, capture_output=True, timeout=timeout)


def spawn_cli(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """Starts the CLI with stdout and stderr piped."""
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"sandstream binary not found at {CLI} (set SANDSTREAM_CLI)")
    return subprocess.Popen([CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_exactly(stream: Any, n: int, timeout: float = 10) -> bytes:
    """Reads n bytes from a pipe as they arrive, failing after `timeout` seconds."""
    out = b""
    deadline = time.monotonic() + timeout
    while len(out) < n:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([stream], [], [], max(left, 0))
        if not ready:
            raise AssertionError(f"only {out!r} arrived within {timeout}s")
        chunk = os.read(stream.fileno(), n - len(out))
        if not chunk:
            raise AssertionError(f"pipe closed after {out!r}")
        out += chunk
    return out


@pytest.fixture
def env(daemon: Daemon) -> dict[str, str]:
    """CLI environment for the session daemon."""
    return cli_env(daemon.url)


# --- against the real daemon -------------------------------------------------------------------


def test_sandbox_create_ls_rm(env: dict[str, str], client: httpx.Client) -> None:
    created = run_cli(env, "sandbox", "create", "--ttl", "600", "--env", "GREETING=hi",
                      "--meta", "owner=cli-test")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.decode().strip()
    assert sandbox_id.startswith("sb_")
    got = client.get(f"/v1/sandboxes/{sandbox_id}").json()
    assert got["env"] == {"GREETING": "hi"}
    assert got["ttl_seconds"] == 600
    assert got["metadata"] == {"owner": "cli-test"}

    listed = run_cli(env, "sandbox", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sandbox_id in [s["id"] for s in json.loads(listed.stdout)]
    table = run_cli(env, "sandbox", "ls")
    assert table.stdout.decode().splitlines()[0].split()[0] == "ID"
    assert sandbox_id in table.stdout.decode()

    removed = run_cli(env, "sandbox", "rm", sandbox_id)
    assert removed.returncode == 0, removed.stderr
    assert client.get(f"/v1/sandboxes/{sandbox_id}").status_code == 404
    again = run_cli(env, "sandbox", "rm", sandbox_id)
    assert again.returncode == 2
    assert again.stderr.decode().startswith("sandstream: not_found: ")


def test_sandbox_pause_and_resume(env: dict[str, str], client: httpx.Client,
                                  sandbox: dict[str, Any]) -> None:
    paused = run_cli(env, "sandbox", "pause", sandbox["id"])
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.decode().split() == [sandbox["id"], "paused"]
    table = run_cli(env, "sandbox", "ls").stdout.decode()
    assert any(line.split()[:1] == [sandbox["id"]] and "paused" in line.split()
               for line in table.splitlines()), table
    resumed = run_cli(env, "sandbox", "resume", sandbox["id"])
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.decode().split() == [sandbox["id"], "running"]
    # To disk and back, where the host has CRIU; a mode the daemon does not know is 400.
    if os.path.exists("/var/cache/sandstream/criu-4.2.1/sbin/criu"):
        written = run_cli(env, "sandbox", "pause", "--mode", "checkpoint", sandbox["id"])
        assert written.returncode == 0, written.stderr
        assert client.get(f"/v1/sandboxes/{sandbox['id']}").json()["pause_mode"] == "checkpoint"
        back = run_cli(env, "sandbox", "resume", sandbox["id"])
        assert back.stdout.decode().split() == [sandbox["id"], "running"], back.stderr
    wrong = run_cli(env, "sandbox", "pause", "--mode", "sleep", sandbox["id"])
    assert wrong.returncode != 0 and b"mode" in wrong.stderr, wrong.stderr
    missing = run_cli(env, "sandbox", "pause", "sb_nope")
    assert missing.returncode == 2
    assert missing.stderr.decode().startswith("sandstream: not_found: ")
    assert run_cli(env, "sandbox", "pause").returncode == 2


def test_exec_streams_live_and_keeps_stdout_and_stderr_apart(
        env: dict[str, str], sandbox: dict[str, Any]) -> None:
    proc = spawn_cli(env, "exec", sandbox["id"], "--",
                     "sh", "-c", "printf abc; printf err >&2; sleep 2; printf def; exit 7")
    try:
        assert proc.stdout is not None and proc.stderr is not None
        # A partial line, no newline: it must arrive while the command still runs.
        assert read_exactly(proc.stdout, 3) == b"abc"
        assert read_exactly(proc.stderr, 3) == b"err"
        assert proc.poll() is None
        rest_out, rest_err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert rest_out == b"def"
    assert rest_err == b""
    assert proc.returncode == 7


def test_exec_writes_bytes_exactly(env: dict[str, str], sandbox: dict[str, Any]) -> None:
    result = run_cli(env, "exec", sandbox["id"], "--", "printf", r"\377\000\001\303")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"\xff\x00\x01\xc3"


def test_exec_options_reach_the_command(env: dict[str, str], sandbox: dict[str, Any]) -> None:
    result = run_cli(env, "exec", sandbox["id"], "--env", "A=1", "-e", "B=x=y", "--cwd", "/tmp",
                     "--", "sh", "-c", 'echo "$A $B $(pwd)"')
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"1 x=y /tmp\n"


def test_exec_reports_signals_as_128_plus_n(env: dict[str, str], sandbox: dict[str, Any]) -> None:
    result = run_cli(env, "exec", sandbox["id"], "--", "sh", "-c", "kill -KILL $$")
    assert result.returncode == 137


def test_exec_timeout_kills_and_says_why(env: dict[str, str], sandbox: dict[str, Any]) -> None:
    result = run_cli(env, "exec", sandbox["id"], "--timeout", "1", "--", "sleep", "30")
    assert result.returncode in (143, 137)
    assert b"timeout" in result.stderr


def test_exec_errors_exit_2_with_the_servers_code(env: dict[str, str], daemon: Daemon) -> None:
    missing = run_cli(env, "exec", "sb_0000000000000000", "--", "true")
    assert missing.returncode == 2
    assert missing.stderr.decode().startswith("sandstream: not_found: ")
    wrong_key = run_cli(cli_env(daemon.url, "wrong"), "sandbox", "ls")
    assert wrong_key.returncode == 2
    assert wrong_key.stderr.decode().startswith("sandstream: unauthorized: ")


def test_interrupt_is_forwarded_to_the_command(env: dict[str, str],
                                               sandbox: dict[str, Any]) -> None:
    proc = spawn_cli(env, "exec", sandbox["id"], "--", "sh", "-c", "echo ready; exec sleep 30")
    try:
        assert proc.stdout is not None
        assert read_exactly(proc.stdout, 6) == b"ready\n"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT


def test_run_uses_a_throwaway_sandbox(env: dict[str, str], client: httpx.Client) -> None:
    before = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    result = run_cli(env, "run", "--", "sh", "-c", "echo hi; echo oops >&2; exit 5")
    assert result.returncode == 5
    assert result.stdout == b"hi\n"
    assert result.stderr == b"oops\n"
    after = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    assert after == before


def test_start_ps_logs_and_kill(env: dict[str, str], client: httpx.Client,
                                sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    started = run_cli(env, "start", sb, "--id", "talker", "--",
                      "sh", "-c", "echo one; echo warn >&2; sleep 1; echo two")
    assert started.returncode == 0, started.stderr
    assert started.stdout == b"talker\n"

    followed = run_cli(env, "logs", "-f", sb, "talker")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == b"one\ntwo\n"
    assert followed.stderr == b"warn\n"
    retained = run_cli(env, "logs", sb, "talker")
    assert retained.returncode == 0, retained.stderr
    assert retained.stdout == b"one\ntwo\n"

    listed = run_cli(env, "ps", sb, "--json")
    assert listed.returncode == 0, listed.stderr
    talker = next(p for p in json.loads(listed.stdout) if p["id"] == "talker")
    assert talker["exit_code"] == 0
    assert "talker" in run_cli(env, "ps", sb).stdout.decode()

    sleeper = run_cli(env, "start", sb, "--keep-awake", "--", "sleep", "300").stdout.decode().strip()
    assert client.get(f"/v1/sandboxes/{sb}/processes/{sleeper}").json()["keep_awake"] is True
    killed = run_cli(env, "kill", sb, sleeper)
    assert killed.returncode == 0, killed.stderr
    assert client.get(f"/v1/sandboxes/{sb}/processes/{sleeper}").json()["reason"] == "killed"

    hup = run_cli(env, "start", sb, "--", "sleep", "300").stdout.decode().strip()
    signaled = run_cli(env, "kill", sb, hup, "--signal", "HUP")
    assert signaled.returncode == 0, signaled.stderr
    waited = client.get(f"/v1/sandboxes/{sb}/processes/{hup}/wait", params={"timeout_seconds": 10})
    assert waited.json()["exit_code"] == 128 + signal.SIGHUP


def test_port_wait_expose_list_close(env: dict[str, str], daemon: Daemon, client: httpx.Client,
                                     sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    assert client.put(f"/v1/sandboxes/{sb}/files/content", params={"path": "/workspace/index.html"},
                      content=b"hello port\n").status_code == 201
    started = run_cli(env, "start", sb, "--", "python3", "-m", "http.server", "8000",
                      "--bind", "127.0.0.1")
    assert started.returncode == 0, started.stderr
    waited = run_cli(env, "port", "wait", sb, "8000", "--timeout", "20")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == b""

    exposed = run_cli(env, "port", "expose", sb, "8000")
    assert exposed.returncode == 0, exposed.stderr
    listen = daemon.url.rsplit(":", 1)[1]
    url = f"http://8000-{sb}.localhost:{listen}/"
    path_url = f"{daemon.url}/v1/sandboxes/{sb}/ports/8000/"
    assert exposed.stdout.decode().splitlines() == [f"url       {url}", f"path_url  {path_url}"]
    page = httpx.get(path_url, headers={"Authorization": f"Bearer {API_KEY}"})
    assert page.status_code == 200 and page.text == "hello port\n"
    as_json = run_cli(env, "port", "expose", sb, "8000", "--json")
    assert as_json.returncode == 0, as_json.stderr
    port = json.loads(as_json.stdout)
    assert (port["port"], port["url"], port["path_url"]) == (8000, url, path_url)

    # For a browser: a token that opens this port only, never the key.
    browser = run_cli(env, "port", "expose", sb, "8000", "--browser", "--ttl", "120", "--json")
    assert browser.returncode == 0, browser.stderr
    opened = json.loads(browser.stdout)
    assert API_KEY not in opened["browser_url"]
    assert opened["browser_url"].startswith(url + "?access_token=sst_")
    token = opened["browser_url"].split("access_token=")[1]
    page = httpx.get(path_url, params={"access_token": token})
    assert page.status_code == 200 and page.text == "hello port\n"
    other = httpx.get(f"{daemon.url}/v1/sandboxes/{sb}", params={"access_token": token})
    assert other.status_code == 403, other.text
    assert run_cli(env, "port", "expose", sb, "8000", "--ttl", "5").returncode == 2

    table = run_cli(env, "port", "list", sb)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.decode().splitlines()
    assert lines[0].split() == ["PORT", "URL", "PATH_URL", "CREATED"]
    assert lines[1].split() == ["8000", url, path_url, port["created_at"]]
    listed = run_cli(env, "port", "list", sb, "--json")
    assert json.loads(listed.stdout) == [port]

    closed = run_cli(env, "port", "close", sb, "8000")
    assert closed.returncode == 0, closed.stderr
    assert json.loads(run_cli(env, "port", "list", sb, "--json").stdout) == []
    again = run_cli(env, "port", "close", sb, "8000")
    assert again.returncode == 2
    assert again.stderr.decode().startswith("sandstream: not_found: ")

    t0 = time.monotonic()
    timed_out = run_cli(env, "port", "wait", sb, "9", "--timeout", "0.5")
    assert time.monotonic() - t0 < 10
    assert timed_out.returncode == 2
    assert timed_out.stderr.decode() == (
        f"sandstream: timeout: nothing accepted connections on port 9 of {sb} within 0.5 s\n")
    missing = run_cli(env, "port", "list", "sb_0000000000000000")
    assert missing.returncode == 2
    assert missing.stderr.decode().startswith("sandstream: not_found: ")
    for args in (["port"], ["port", "open", sb, "1"], ["port", "expose", sb],
                 ["port", "expose", sb, "0"], ["port", "expose", sb, "65536"],
                 ["port", "close", sb, "http"], ["port", "wait", sb, "1", "--timeout", "0"],
                 ["port", "list"]):
        result = run_cli(env, *args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(b"sandstream: "), args
    helped = run_cli(env, "--help")
    assert b"port expose SANDBOX PORT" in helped.stdout


LINE = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n"


def producer(size: int, pause: float = 0) -> list[str]:
    """A command that prints `size` bytes of LINE repeated as fast as it can, after `pause` s."""
    head = f"sleep {pause}; " if pause else ""
    return ["sh", "-c", f"{head}yes {LINE[:-1].decode()} | head -c {size}"]


def read_late(proc: subprocess.Popen[bytes], delay: float) -> tuple[bytes, bytes]:
    """Lets the CLI's stdout pipe fill, reads nothing for `delay` s, then reads to the end."""
    time.sleep(delay)
    try:
        return proc.communicate(timeout=120)
    finally:
        proc.kill()


def lost_bytes(stderr: bytes) -> int:
    """The bytes the CLI reported as lost (`output lost: ... (N bytes) ...`)."""
    return sum(int(m) for m in re.findall(rb"output lost: events \d+\.\.\d+ \((\d+) bytes\)",
                                          stderr))


def test_exec_holds_a_fast_command_back_for_a_slow_reader(daemon_factory: Any) -> None:
    """The CLI's own stdout is a pipe nobody reads for a while: the command waits for it and
    every byte arrives, though it printed 32 windows' worth."""
    own = daemon_factory(args=["--log-window-bytes", str(1 << 20)])
    env = cli_env(own.url)
    with httpx.Client(base_url=own.url, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        sb = create_sandbox(c)["id"]
    size = 32 << 20
    out, err = read_late(spawn_cli(env, "exec", sb, "--", *producer(size)), 2)
    assert err == b"", err
    assert len(out) == size and out == LINE * (size // len(LINE)) + LINE[:size % len(LINE)]


def test_logs_follow_waits_when_asked_and_skips_by_default(daemon_factory: Any) -> None:
    """`logs -f --flow wait` gets every byte however slowly it is read; a default follower of
    the same command is told exactly what it missed."""
    own = daemon_factory(args=["--log-window-bytes", str(1 << 20)])
    env = cli_env(own.url)
    with httpx.Client(base_url=own.url, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        sb = create_sandbox(c)["id"]
    size = 32 << 20
    for flow in (["--flow", "wait"], []):
        # The pause lets the follower attach before the first byte.
        pid = run_cli(env, "start", sb, "--", *producer(size, 0.5)).stdout.decode().strip()
        out, err = read_late(spawn_cli(env, "logs", "-f", *flow, sb, pid), 2)
        if flow:
            assert err == b"", err
            assert out == LINE * (size // len(LINE)) + LINE[:size % len(LINE)]
        else:
            assert len(out) + lost_bytes(err) == size, err


def test_kill_with_an_unknown_signal_is_the_servers_error(daemon_factory: Any) -> None:
    # A daemon of its own: this is bad input the daemon must survive.
    own = daemon_factory()
    env = cli_env(own.url)
    sb = run_cli(env, "sandbox", "create").stdout.decode().strip()
    process = run_cli(env, "start", sb, "--", "sleep", "300").stdout.decode().strip()
    bad = run_cli(env, "kill", sb, process, "--signal", "NOPE")
    assert bad.returncode == 2
    assert bad.stderr.decode().startswith("sandstream: invalid_request: ")
    assert run_cli(env, "kill", sb, process).returncode == 0
    assert own.alive()


class CuttingProxy:
    """A loopback TCP proxy that cuts its first connection once the response carries a marker."""

    def __init__(self, upstream_port: int, marker: bytes):
        self.upstream_port = upstream_port
        self.marker = marker
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            first = not self.requests
            self.requests.append(b"")
            threading.Thread(target=self._serve, args=(conn, len(self.requests) - 1, first),
                             daemon=True).start()

    def _serve(self, conn: socket.socket, index: int, cut: bool) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))

        def pump_requests() -> None:
            try:
                while data := conn.recv(65536):
                    self.requests[index] += data
                    upstream.sendall(data)
            except OSError:
                pass  # the other direction closed both sockets

        threading.Thread(target=pump_requests, daemon=True).start()
        seen = b""
        try:
            while data := upstream.recv(65536):
                conn.sendall(data)
                seen += data
                if cut and self.marker in seen:
                    break
        except OSError:
            pass
        finally:
            # shutdown, not just close: the request pump still blocks in recv on these sockets.
            for s in (conn, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        """Stops accepting."""
        self.listener.close()


def test_resume_after_a_dropped_connection(daemon: Daemon, client: httpx.Client,
                                           sandbox: dict[str, Any]) -> None:
    proxy = CuttingProxy(daemon.port, b"event: stdout")
    try:
        result = run_cli(cli_env(f"http://127.0.0.1:{proxy.port}"), "exec", sandbox["id"], "--",
                         "sh", "-c", "echo first; echo run >> runs.txt; sleep 1; echo second")
    finally:
        proxy.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"first\nsecond\n"
    assert len(proxy.requests) >= 2
    first, second = proxy.requests[0].lower(), proxy.requests[1].lower()
    key = next(line for line in first.split(b"\r\n") if line.startswith(b"idempotency-key:"))
    assert key in second.split(b"\r\n")
    assert b"\r\nlast-event-id: " in second
    ran = client.post(f"/v1/sandboxes/{sandbox['id']}/exec", json={"cmd": "cat runs.txt"}).json()
    assert ran["stdout"] == "run\n"


def test_network_options_against_a_daemon_without_egress(daemon_factory: Any) -> None:
    # Egress needs a host set up for it (test_egress.py builds one in namespaces of its own). A
    # daemon without it checks a request for egress in full, then refuses it by name.
    own = daemon_factory(args=["--egress-pool", "none"])
    env = cli_env(own.url)
    for args in (["sandbox", "create", "--allow", "pypi.org", "--allow", "*.github.com",
                  "--deny", "203.0.113.7"],
                 ["sandbox", "create", "--deny", "203.0.113.7"],
                 ["sandbox", "create", "--network", "egress"],
                 ["run", "--allow", "pypi.org", "--", "true"]):
        refused = run_cli(env, *args)
        assert refused.returncode == 2, args
        assert refused.stderr.decode().startswith("sandstream: invalid_request: "), refused.stderr
        assert "egress_pool" in refused.stderr.decode(), refused.stderr
    # The rules reach the daemon as rules: a bad one is named.
    for flag, rule, words in (("--allow", "10.0.0.1/8", "10.0.0.0/8"),
                              ("--deny", "bad name!", "bad name!")):
        bad = run_cli(env, "sandbox", "create", flag, rule)
        assert bad.returncode == 2 and words in bad.stderr.decode(), bad.stderr
    conflicting = run_cli(env, "sandbox", "create", "--network", "none", "--allow", "pypi.org")
    assert conflicting.returncode == 2
    assert conflicting.stderr.decode().startswith("sandstream: --allow and --deny mean")

    with own.client() as c:
        assert c.get("/v1/sandboxes").json()["sandboxes"] == []
        for mode in ("none", "loopback"):
            created = run_cli(env, "sandbox", "create", "--network", mode)
            assert created.returncode == 0, created.stderr
            got = c.get(f"/v1/sandboxes/{created.stdout.decode().strip()}").json()
            assert (got["network"], got["egress"]) == (mode, None)
    table = run_cli(env, "sandbox", "ls").stdout.decode().splitlines()
    assert table[0].split()[-1] == "NETWORK"
    assert [line.split()[-1] for line in table[1:]] == ["none", "loopback"]
    ran = run_cli(env, "run", "--network", "none", "--", "true")
    assert ran.returncode == 0, ran.stderr


# --- against fake servers ----------------------------------------------------------------------

Handler = Callable[[int, dict[str, str], socket.socket], None]


class FakeServer:
    """Accepts connections and hands each parsed request to `handler(n, headers, conn)`."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.count = 0
        self.request_lines: list[str] = []
        self.bodies: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                raw = b""
                while b"\r\n\r\n" not in raw:
                    raw += conn.recv(65536)
                head, body = raw.split(b"\r\n\r\n", 1)
                lines = head.decode().split("\r\n")
                headers = {k.strip().lower(): v.strip()
                           for k, v in (line.split(":", 1) for line in lines[1:])}
                while len(body) < int(headers.get("content-length", "0")):
                    body += conn.recv(65536)
                self.request_lines.append(lines[0])
                self.bodies.append(body)
                self.handler(self.count, headers, conn)
                self.count += 1

    def close(self) -> None:
        """Stops accepting."""
        self.listener.close()


@pytest.fixture
def fake_server() -> Iterator[Callable[[Handler], FakeServer]]:
    """Starts fake servers, closed afterwards."""
    servers: list[FakeServer] = []

    def start(handler: Handler) -> FakeServer:
        servers.append(FakeServer(handler))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def sse(seq: int | None, event: str, data: dict[str, Any]) -> bytes:
    """One SSE frame."""
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")
START = sse(1, "start", {"process_id": "proc_f", "sandbox_id": "sb_f", "pid": 1})


def out(seq: int, data: bytes) -> bytes:
    """A stdout frame in base64 encoding."""
    return sse(seq, "stdout", {"chunk": base64.b64encode(data).decode()})


def test_fake_resume_sends_key_and_last_event_id(fake_server: Any) -> None:
    seen: list[dict[str, str]] = []

    def handler(n: int, headers: dict[str, str], conn: socket.socket) -> None:
        seen.append(headers)
        if n == 0:
            # Two whole events and half of the third, then the connection breaks.
            conn.sendall(STREAM_HEAD + chunk(START + out(2, b"one\n") + b"id: 3\nevent: std"))
            return
        conn.sendall(STREAM_HEAD + chunk(out(3, b"two\n")) + chunk(
            sse(4, "exit", {"exit_code": 3, "signal": None, "reason": "exited",
                            "duration_ms": 5})) + b"0\r\n\r\n")

    server = fake_server(handler)
    result = run_cli(cli_env(server.url), "exec", "sb_f", "--", "anything")
    assert result.returncode == 3, result.stderr
    assert result.stdout == b"one\ntwo\n"
    assert len(seen) == 2
    assert "last-event-id" not in seen[0]
    assert seen[1]["last-event-id"] == "2"
    assert seen[1]["idempotency-key"] == seen[0]["idempotency-key"]
    assert seen[0]["authorization"] == f"Bearer {API_KEY}"
    assert [json.loads(b)["flow"] for b in server.bodies] == ["wait", "wait"]


def test_fake_follow_keeps_its_flow_and_ends_on_a_204(fake_server: Any) -> None:
    """A follow resumed at or past the exit is answered 204: the output so far, exit 0."""
    def handler(n: int, headers: dict[str, str], conn: socket.socket) -> None:
        if n == 0:
            conn.sendall(STREAM_HEAD + chunk(START + out(2, b"one\n")))
            return
        conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")

    server = fake_server(handler)
    result = run_cli(cli_env(server.url), "logs", "-f", "--flow", "wait", "sb_f", "proc_f")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"one\n" and result.stderr == b""
    assert len(server.request_lines) == 2
    assert all("&flow=wait" in line for line in server.request_lines), server.request_lines


def test_fake_stream_without_exit_is_an_error(fake_server: Any) -> None:
    def handler(n: int, headers: dict[str, str], conn: socket.socket) -> None:
        # Resumed requests get nothing new: the stream never reaches an exit.
        body = b"" if "last-event-id" in headers else chunk(START + out(2, b"partial"))
        conn.sendall(STREAM_HEAD + body + b"0\r\n\r\n")

    server = fake_server(handler)
    result = run_cli(cli_env(server.url), "exec", "sb_f", "--", "anything")
    assert result.returncode == 255
    assert result.stdout == b"partial"
    assert b"without" in result.stderr


def test_fake_error_event_is_not_an_exit(fake_server: Any) -> None:
    def handler(n: int, headers: dict[str, str], conn: socket.socket) -> None:
        conn.sendall(STREAM_HEAD + chunk(START + sse(None, "error", {
            "code": "shutting_down", "message": "sandstreamd is shutting down"})) + b"0\r\n\r\n")

    server = fake_server(handler)
    result = run_cli(cli_env(server.url), "exec", "sb_f", "--", "anything")
    assert result.returncode == 255
    assert b"sandstream: shutting_down: sandstreamd is shutting down" in result.stderr


def json_answer(conn: socket.socket, status: str, value: Any) -> None:
    """A JSON response."""
    body = json.dumps(value).encode()
    conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def fake_sandbox(sandbox_id: str, network: str, egress: dict[str, Any] | None) -> dict[str, Any]:
    """A sandbox as the daemon describes it."""
    return {"id": sandbox_id, "template": "base", "status": "running", "processes_running": 0,
            "created_at": "2025-01-01T00:00:00Z", "expires_at": None, "ttl_seconds": 0,
            "env": {}, "cwd": "/workspace", "limits": {}, "metadata": {}, "network": network,
            "egress": egress}


def test_fake_network_options_make_the_request_and_ls_shows_egress(fake_server: Any) -> None:
    listed = [
        fake_sandbox("sb_a", "loopback", None),
        fake_sandbox("sb_b", "egress", {"allow": ["pypi.org", "*.github.com"],
                                        "deny": ["203.0.113.7"], "address": "10.200.0.15",
                                        "gateway": "10.200.0.14"}),
        fake_sandbox("sb_c", "egress", {"allow": None, "deny": [], "address": "10.200.0.17",
                                        "gateway": "10.200.0.16"}),
    ]

    def handler(n: int, headers: dict[str, str], conn: socket.socket) -> None:
        if server.request_lines[-1].startswith("POST "):
            json_answer(conn, "201 Created", listed[0])
        else:
            json_answer(conn, "200 OK", {"sandboxes": listed})

    server = fake_server(handler)
    env = cli_env(server.url)
    for args in (["--allow", "pypi.org", "--allow", "*.github.com", "--deny", "203.0.113.7"],
                 ["--network", "egress", "--deny", "203.0.113.7"],
                 ["--network", "egress"], ["--network", "none"], []):
        result = run_cli(env, "sandbox", "create", *args)
        assert result.returncode == 0, result.stderr
    assert [json.loads(b).get("network") for b in server.bodies] == [
        {"egress": {"allow": ["pypi.org", "*.github.com"], "deny": ["203.0.113.7"]}},
        {"egress": {"deny": ["203.0.113.7"]}},
        "egress", "none", None]
    table = run_cli(env, "sandbox", "ls").stdout.decode().splitlines()
    network = [line[table[0].index("NETWORK"):] for line in table[1:]]
    assert network == ["loopback",
                       "egress 10.200.0.15 allow=pypi.org,*.github.com deny=203.0.113.7",
                       "egress 10.200.0.17"]


def test_unreachable_server_and_bad_usage_exit_2() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    refused = run_cli(cli_env(f"http://127.0.0.1:{port}"), "exec", "sb_x", "--", "true")
    assert refused.returncode == 2
    assert refused.stderr.startswith(b"sandstream: connect ")
    env = cli_env("http://127.0.0.1:1")
    for args in (["exec", "sb_x"], ["frobnicate"], ["sandbox", "create", "--ttl", "-1"],
                 ["exec", "sb_x", "--timeout", "0", "--", "true"], ["logs", "sb_x"],
                 ["logs", "-f", "--flow", "fast", "sb_x", "p"],
                 ["logs", "--flow", "wait", "sb_x", "p"]):
        result = run_cli(env, *args)
        assert result.returncode == 2, args
        assert result.stderr.startswith(b"sandstream: "), args
    assert run_cli(cli_env("https://127.0.0.1:1"), "sandbox", "ls").returncode == 2
    helped = run_cli(env, "--help")
    assert helped.returncode == 0
    assert b"Exit status" in helped.stdout
    assert b"--flow wait|skip" in helped.stdout
    assert b"--allow RULE" in helped.stdout and b"--deny RULE" in helped.stdout


def test_template_import_ls_snapshot_and_rm(env: dict[str, str], client: httpx.Client,
                                            tmp_path: Any) -> None:
    import images

    archive = tmp_path / "tiny.tar"
    archive.write_bytes(images.tiny_image().docker_archive())
    made = run_cli(env, "template", "import", "cli-tiny", str(archive), "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["kind"] == "image"
    listed = run_cli(env, "template", "ls")
    assert listed.returncode == 0 and re.search(rb"^cli-tiny +image +ready +2 ", listed.stdout, re.M)
    sb = create_sandbox(client, template="cli-tiny")
    try:
        snap = run_cli(env, "snapshot", sb["id"], "cli-snap")
        assert snap.returncode == 0 and snap.stdout == b"cli-snap\n", snap.stderr
        busy = run_cli(env, "template", "rm", "cli-tiny")
        assert busy.returncode == 2 and b"conflict" in busy.stderr
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
    gone = run_cli(env, "template", "rm", "cli-snap", "cli-tiny")
    assert gone.returncode == 0, gone.stderr
    assert client.get("/v1/templates/cli-tiny").status_code == 404
    missing = run_cli(env, "template", "import", "x", str(tmp_path / "nope.tar"))
    assert missing.returncode == 2 and b"not a file" in missing.stderr
    assert run_cli(env, "template").returncode == 2
