"""E2B's own Python SDK (the real `e2b` package, pinned in tests/requirements.txt, unpatched)
against the daemon: the calls of its README and docs, with `E2B_API_URL` and `E2B_SANDBOX_URL`
the daemon's URL and `E2B_API_KEY` its key. Effects are checked through sandstream's own /v1
API or through another command, not only through the call under test. The JS SDK's flows run
in tests/compat/e2b. Fork and snapshots are shown with the code interpreter's `Sandbox` (the
`e2b-code-interpreter` package, whose class is `e2b`'s with `run_code`) where a variable kept
says more than a file."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import (
    E2B,
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)
from e2b_code_interpreter import Sandbox as CodeInterpreter

from helpers import API_KEY, Daemon, pgrep, wait_no_process, wait_until

HOME = "/home/user"


@pytest.fixture
def e2b_env(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """The environment a user sets to point the SDK at sandstream (this test only)."""
    monkeypatch.setenv("E2B_API_URL", daemon.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", daemon.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return daemon


@pytest.fixture
def sbx(e2b_env: Daemon) -> Iterator[Sandbox]:
    """A sandbox made with `Sandbox.create()`, killed afterwards."""
    sandbox = Sandbox.create()
    yield sandbox
    sandbox.kill()


def v1_read(client: httpx.Client, sandbox_id: str, path: str) -> bytes:
    """A file's bytes through sandstream's own API."""
    r = client.get(f"/v1/sandboxes/{sandbox_id}/files/content", params={"path": path})
    assert r.status_code == 200, r.text
    return r.content


def v1_write(client: httpx.Client, sandbox_id: str, path: str, data: bytes) -> None:
    """Writes a file through sandstream's own API."""
    r = client.put(f"/v1/sandboxes/{sandbox_id}/files/content", params={"path": path}, content=data)
    assert r.status_code in (200, 201), r.text


def v1_stat(client: httpx.Client, sandbox_id: str, path: str) -> httpx.Response:
    """GET .../files/stat through sandstream's own API."""
    return client.get(f"/v1/sandboxes/{sandbox_id}/files/stat", params={"path": path})


def v1_sh(client: httpx.Client, sandbox_id: str, cmd: str) -> dict[str, Any]:
    """Runs `cmd` through sandstream's own exec; asserts it exits 0."""
    r = client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd})
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    assert result["exit_code"] == 0, result
    return result


def merged(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive chunks of one stream joined (a write may arrive split or joined)."""
    out: list[tuple[str, str]] = []
    for stream, text in events:
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + text)
        else:
            out.append((stream, text))
    return out


def wait_in_thread(wait: Any, result: list[Any]) -> threading.Thread:
    """Runs a handle's `wait` in a thread of its own; its result (or exception) goes to
    `result`, for an assertion of the test's."""
    def run() -> None:
        try:
            result.append(wait())
        except Exception as e:  # noqa: BLE001 - reported by the test's assertion
            result.append(e)

    waiter = threading.Thread(target=run, daemon=True)
    waiter.start()
    return waiter


def pids(sandbox: Sandbox) -> set[int]:
    """The pids `commands.list()` reports."""
    return {p.pid for p in sandbox.commands.list()}


# --- commands -------------------------------------------------------------------------------


def test_readme_example(e2b_env: Daemon, client: httpx.Client) -> None:
    """The README's first example runs as written, and leaving the `with` kills the sandbox."""
    with Sandbox.create() as sandbox:
        result = sandbox.commands.run('echo "Hello from E2B!"')
        sandbox_id = sandbox.sandbox_id
        assert client.get(f"/v1/sandboxes/{sandbox_id}").status_code == 200
    assert result.stdout == "Hello from E2B!\n"
    assert result.stderr == "" and result.exit_code == 0 and result.error is None
    assert sandbox_id.startswith("sb_")
    assert client.get(f"/v1/sandboxes/{sandbox_id}").status_code == 404


def test_client_bound_configuration(daemon: Daemon, monkeypatch: pytest.MonkeyPatch,
                                    client: httpx.Client) -> None:
    """README §4: an `E2B(...)` client carries the URLs and key itself, with no environment."""
    for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DEBUG", "E2B_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    e2b = E2B(api_key=API_KEY, api_url=daemon.url, sandbox_url=daemon.url)
    sandbox = e2b.Sandbox.create()
    try:
        assert sandbox.commands.run("echo bound").stdout == "bound\n"
        assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").status_code == 200
    finally:
        assert sandbox.kill() is True
    assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").status_code == 404


def test_callbacks_get_the_chunks_in_order(sbx: Sandbox) -> None:
    """on_stdout and on_stderr are called with the real output, live and in order."""
    events: list[tuple[str, str]] = []
    result = sbx.commands.run(
        "for i in 1 2 3; do echo out$i; sleep 0.1; echo err$i >&2; sleep 0.1; done",
        on_stdout=lambda s: events.append(("out", s)),
        on_stderr=lambda s: events.append(("err", s)))
    assert merged(events) == [("out", "out1\n"), ("err", "err1\n"), ("out", "out2\n"),
                              ("err", "err2\n"), ("out", "out3\n"), ("err", "err3\n")]
    assert result.stdout == "out1\nout2\nout3\n" and result.stderr == "err1\nerr2\nerr3\n"
    assert result.exit_code == 0


def test_output_is_live_not_buffered(sbx: Sandbox) -> None:
    """The first line reaches on_stdout while the command still runs."""
    seen: list[tuple[float, str]] = []
    start = time.monotonic()
    sbx.commands.run("echo first; sleep 1.5; echo second",
                     on_stdout=lambda s: seen.append((time.monotonic() - start, s)))
    text = "".join(s for _, s in seen)
    assert text == "first\nsecond\n", seen
    assert seen[0][1].startswith("first") and seen[0][0] < 1.2, seen
    assert seen[-1][0] >= 1.4, seen


def test_output_is_whole_and_byte_exact(sbx: Sandbox) -> None:
    """Large output arrives whole; a character split across two writes is joined."""
    r = sbx.commands.run("seq 1 100000")
    assert r.stdout == "".join(f"{i}\n" for i in range(1, 100001))
    r = sbx.commands.run(r"printf '\303'; sleep 0.2; printf '\251\n'; printf '\342\202' >&2; "
                         r"sleep 0.2; printf '\254' >&2")
    assert r.stdout == "\u00e9\n" and r.stderr == "\u20ac"


def test_stdin_is_closed_unless_asked(sbx: Sandbox) -> None:
    """Without stdin=True a command reads end of file at once (it does not hang)."""
    start = time.monotonic()
    assert sbx.commands.run("cat; echo after").stdout == "after\n"
    assert time.monotonic() - start < 5


def test_envs_cwd_and_user(sbx: Sandbox) -> None:
    """envs= adds variables; cwd= and user= take effect; the default is /home/user as `user`."""
    r = sbx.commands.run('echo "$FOO|$BAR"', envs={"FOO": "a value with spaces", "BAR": "b=c"})
    assert r.stdout == "a value with spaces|b=c\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run('pwd; echo "$HOME"').stdout == f"{HOME}\n{HOME}\n"
    assert sbx.commands.run("whoami; id -u").stdout == "user\n1000\n"
    assert sbx.commands.run("whoami; id -u", user="root").stdout == "root\n0\n"
    sbx.commands.run("touch /tmp/by-root", user="root")
    sbx.commands.run("touch /tmp/by-user")
    owners = sbx.commands.run("stat -c %U /tmp/by-root /tmp/by-user").stdout
    assert owners == "root\nuser\n"
    assert sbx.commands.run(f"stat -c '%U %u' {HOME}").stdout == "user 1000\n"


def test_nonzero_exit_raises_command_exit_exception(sbx: Sandbox) -> None:
    """A nonzero exit is CommandExitException with the real code and output."""
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; echo went wrong >&2; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stdout == "partial\n" and e.value.stderr == "went wrong\n"
    assert e.value.error == "exit status 3"
    assert "went wrong" in str(e.value)


def test_signal_death_is_exit_code_minus_one(sbx: Sandbox) -> None:
    """A command killed by a signal reports -1, as E2B does."""
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo before; kill -KILL $$")
    assert e.value.exit_code == -1
    assert e.value.stdout == "before\n"
    assert e.value.error == "signal: killed"


def test_timeout_kills_the_command(sbx: Sandbox, marker: str) -> None:
    """timeout= bounds the command: the sleep is killed when it passes, not left running."""
    start = time.monotonic()
    with pytest.raises((TimeoutException, CommandExitException)) as e:
        sbx.commands.run(f"sleep {marker}", timeout=2)
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed < 6, elapsed
    if isinstance(e.value, CommandExitException):
        assert e.value.exit_code == -1
    assert wait_no_process(f"sleep {marker}", within=3) == []
    # Its end is recorded moments after the kernel reaped it.
    assert wait_until(lambda: all(marker not in " ".join(p.args) for p in sbx.commands.list()), 3)


# --- background processes ---------------------------------------------------------------------


def test_background_list_connect_and_kill(sbx: Sandbox, marker: str) -> None:
    """A background command is listed, can be joined from another Sandbox object, and a kill
    really ends it (then it is no longer listed, and a second kill finds nothing)."""
    handle = sbx.commands.run(f"sleep {marker}", background=True)
    pid = handle.pid
    assert isinstance(pid, int) and pid > 0
    listed = [p for p in sbx.commands.list() if p.pid == pid]
    assert len(listed) == 1, sbx.commands.list()
    assert listed[0].cmd == "/bin/bash" and listed[0].args == ["-l", "-c", f"sleep {marker}"]
    assert wait_until(lambda: pgrep(f"sleep {marker}") != [], 5)
    other = Sandbox.connect(sbx.sandbox_id)
    assert other.sandbox_id == sbx.sandbox_id
    joined = other.commands.connect(pid)
    assert joined.pid == pid
    assert other.commands.kill(pid) is True
    with pytest.raises(CommandExitException) as e:
        joined.wait()
    assert e.value.exit_code == -1
    with pytest.raises(CommandExitException) as e:
        handle.wait()
    assert e.value.exit_code == -1
    assert wait_no_process(f"sleep {marker}", within=3) == []
    assert pid not in pids(sbx)
    assert sbx.commands.kill(pid) is False


def test_handle_kill_and_unknown_pid(sbx: Sandbox, marker: str) -> None:
    """handle.kill() is True and ends the process; killing a pid that is not there is False."""
    handle = sbx.commands.run(f"sleep {marker}", background=True)
    assert handle.pid in pids(sbx)
    assert wait_until(lambda: pgrep(f"sleep {marker}") != [], 5)
    assert handle.kill() is True
    with pytest.raises(CommandExitException) as e:
        handle.wait()
    assert e.value.exit_code == -1 and e.value.error == "signal: killed"
    assert wait_no_process(f"sleep {marker}", within=3) == []
    assert handle.pid not in pids(sbx)
    assert handle.kill() is False
    assert sbx.commands.kill(4_000_000) is False


def test_connect_follows_live_output(sbx: Sandbox) -> None:
    """commands.connect from another Sandbox object streams the output and the exit code."""
    handle = sbx.commands.run("sleep 1; for i in 1 2 3; do echo line$i; sleep 0.2; done; exit 4",
                              background=True)
    other = Sandbox.connect(sbx.sandbox_id)
    joined = other.commands.connect(handle.pid)
    seen: list[str] = []
    with pytest.raises(CommandExitException) as e:
        joined.wait(on_stdout=seen.append)
    assert "".join(seen) == "line1\nline2\nline3\n"
    assert e.value.exit_code == 4 and e.value.stdout == "line1\nline2\nline3\n"
    with pytest.raises(CommandExitException) as e:
        handle.wait()
    assert e.value.exit_code == 4 and e.value.stdout == "line1\nline2\nline3\n"


def test_connect_to_unknown_pid_is_not_found(sbx: Sandbox) -> None:
    """commands.connect to a pid that does not exist is the SDK's NotFoundException."""
    with pytest.raises(NotFoundException) as e:
        sbx.commands.connect(4_000_000)
    assert "4000000" in str(e.value)


def test_send_stdin_reaches_the_process(sbx: Sandbox) -> None:
    """send_stdin to `cat` started with stdin=True comes back on stdout, line by line."""
    handle = sbx.commands.run("cat", background=True, stdin=True)
    out: list[str] = []
    result: list[Any] = []
    waiter = wait_in_thread(lambda: handle.wait(on_stdout=out.append), result)
    handle.send_stdin("hello stdin\n")
    assert wait_until(lambda: "".join(out) == "hello stdin\n", 5), out
    sbx.commands.send_stdin(handle.pid, b"second \xc3\xa9\n")
    assert wait_until(lambda: "".join(out) == "hello stdin\nsecond \u00e9\n", 5), out
    handle.close_stdin()
    waiter.join(5)
    assert not waiter.is_alive()
    assert len(result) == 1 and not isinstance(result[0], Exception), result
    assert result[0].exit_code == 0 and result[0].stdout == "hello stdin\nsecond \u00e9\n"


def test_stream_input_writes_chunks_in_order(sbx: Sandbox) -> None:
    """commands.stream_input sends an iterable's chunks to stdin, in order, byte-exact."""
    handle = sbx.commands.run("sha256sum", background=True, stdin=True)
    chunks = [f"chunk {i}\n".encode() for i in range(200)] + [b"\x00\xff", "\u00e9 end\n"]
    sbx.commands.stream_input(handle.pid, iter(chunks))
    handle.close_stdin()
    result = handle.wait()
    sent = b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks)
    assert result.stdout == f"{hashlib.sha256(sent).hexdigest()}  -\n"
    with pytest.raises(NotFoundException):
        sbx.commands.stream_input(4_000_000, iter([b"x"]))


def test_pty_create_input_and_resize(sbx: Sandbox) -> None:
    """pty.create starts a shell on a terminal of the size asked; send_stdin types into it;
    resize changes what the terminal reports; exit ends it with code 0."""
    handle = sbx.pty.create(PtySize(rows=24, cols=80))
    out = bytearray()
    result: list[Any] = []
    waiter = wait_in_thread(lambda: handle.wait(on_pty=out.extend), result)
    sbx.pty.send_stdin(handle.pid, b"echo size=$(stty size) tty=$(tty)\n")
    assert wait_until(lambda: b"size=24 80 tty=/dev/" in out, 5), bytes(out)
    sbx.pty.resize(handle.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(handle.pid, b"echo size=$(stty size)\n")
    assert wait_until(lambda: b"size=30 100" in out, 5), bytes(out)
    sbx.pty.send_stdin(handle.pid, b"exit\n")
    waiter.join(5)
    assert not waiter.is_alive()
    assert len(result) == 1 and not isinstance(result[0], Exception), result
    assert result[0].exit_code == 0


# --- files ------------------------------------------------------------------------------------


def test_write_text_bytes_and_many(sbx: Sandbox, client: httpx.Client) -> None:
    """files.write (str, bytes) and write_files land byte-exact, owned by `user`, parents made."""
    info = sbx.files.write(f"{HOME}/hello.txt", "héllo e2b\n")
    assert info.path == f"{HOME}/hello.txt" and info.name == "hello.txt"
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/hello.txt") == "héllo e2b\n".encode()
    binary = bytes(range(256)) * 64 + b"\x00\x00\xff\x00"
    info = sbx.files.write(f"{HOME}/deep/er/blob.bin", binary)
    assert info.path == f"{HOME}/deep/er/blob.bin"
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/deep/er/blob.bin") == binary
    digest = sbx.commands.run(f"sha256sum < {HOME}/deep/er/blob.bin").stdout.split()[0]
    assert digest == hashlib.sha256(binary).hexdigest()
    infos = sbx.files.write_files([{"path": f"{HOME}/many/a.txt", "data": "first"},
                                   {"path": f"{HOME}/many/b.bin", "data": b"\x00second\x00"}])
    assert sorted(i.path for i in infos) == [f"{HOME}/many/a.txt", f"{HOME}/many/b.bin"]
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/many/a.txt") == b"first"
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/many/b.bin") == b"\x00second\x00"
    sbx.files.write(f"{HOME}/hello.txt", "short")
    assert sbx.commands.run(f"cat {HOME}/hello.txt").stdout == "short"
    owners = sbx.commands.run(f"stat -c %U {HOME}/hello.txt {HOME}/deep/er {HOME}/many/a.txt")
    assert owners.stdout == "user\nuser\nuser\n"


def test_read_text_and_bytes(sbx: Sandbox, client: httpx.Client) -> None:
    """files.read gives what another writer put there: text, and bytes byte-exact."""
    v1_write(client, sbx.sandbox_id, f"{HOME}/t.txt", "ünïcode line\nsecond\n".encode())
    assert sbx.files.read(f"{HOME}/t.txt") == "ünïcode line\nsecond\n"
    binary = b"\x00\x01\x02\xfe\xff" * 1000 + b"\x00"
    v1_write(client, sbx.sandbox_id, f"{HOME}/b.bin", binary)
    got = sbx.files.read(f"{HOME}/b.bin", format="bytes")
    assert bytes(got) == binary
    sbx.commands.run(f": > {HOME}/empty")
    assert sbx.files.read(f"{HOME}/empty") == ""
    assert bytes(sbx.files.read(f"{HOME}/empty", format="bytes")) == b""


def test_read_missing_file_is_file_not_found(sbx: Sandbox) -> None:
    """Reading a file that is not there raises the SDK's FileNotFoundException naming it."""
    with pytest.raises(FileNotFoundException) as e:
        sbx.files.read(f"{HOME}/no-such-file.txt")
    assert "no-such-file.txt" in str(e.value)
    with pytest.raises(FileNotFoundException):
        sbx.files.list(f"{HOME}/no-such-dir")


def test_list_exists_and_get_info(sbx: Sandbox, client: httpx.Client) -> None:
    """files.list (names, types, depth), exists and get_info describe what is really there."""
    v1_sh(client, sbx.sandbox_id,
          f"mkdir -p {HOME}/tree/sub/subsub && printf abc > {HOME}/tree/a.txt && "
          f"echo b > {HOME}/tree/sub/b.txt && echo c > {HOME}/tree/sub/subsub/c.txt && "
          f"chmod 640 {HOME}/tree/a.txt && ln -s {HOME}/tree/a.txt {HOME}/tree/link && "
          f"chown -R 1000:1000 {HOME}/tree")
    top = {e.name: e for e in sbx.files.list(f"{HOME}/tree")}
    assert set(top) == {"a.txt", "sub", "link"}
    assert top["a.txt"].type == FileType.FILE and top["sub"].type == FileType.DIR
    assert top["a.txt"].path == f"{HOME}/tree/a.txt" and top["sub"].path == f"{HOME}/tree/sub"
    assert top["link"].type == FileType.SYMLINK
    assert top["link"].symlink_target == f"{HOME}/tree/a.txt"
    two = {e.path for e in sbx.files.list(f"{HOME}/tree", depth=2)}
    assert two == {f"{HOME}/tree/{p}" for p in ("a.txt", "sub", "link", "sub/b.txt", "sub/subsub")}
    three = {e.path for e in sbx.files.list(f"{HOME}/tree", depth=3)}
    assert three == two | {f"{HOME}/tree/sub/subsub/c.txt"}

    assert sbx.files.exists(f"{HOME}/tree/a.txt") is True
    assert sbx.files.exists(f"{HOME}/tree/sub") is True
    assert sbx.files.exists(f"{HOME}/tree/nothing") is False

    info = sbx.files.get_info(f"{HOME}/tree/a.txt")
    assert (info.name, info.path, info.type, info.size) == ("a.txt", f"{HOME}/tree/a.txt",
                                                            FileType.FILE, 3)
    assert info.mode == 0o640 and info.permissions == "-rw-r-----"
    assert info.owner == "user" and info.group == "user"
    now = datetime.now(timezone.utc)
    assert now - timedelta(seconds=60) < info.modified_time <= now + timedelta(seconds=5)
    d = sbx.files.get_info(f"{HOME}/tree/sub")
    assert d.type == FileType.DIR and d.name == "sub"
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info(f"{HOME}/tree/nothing")


def test_make_dir_rename_remove(sbx: Sandbox, client: httpx.Client) -> None:
    """make_dir is True then False; rename and remove really move and delete."""
    sid = sbx.sandbox_id
    assert sbx.files.make_dir(f"{HOME}/newdir") is True
    assert v1_stat(client, sid, f"{HOME}/newdir").json()["type"] == "directory"
    assert sbx.files.make_dir(f"{HOME}/newdir") is False
    assert sbx.files.make_dir(f"{HOME}/p/q/r") is True
    assert v1_stat(client, sid, f"{HOME}/p/q/r").json()["type"] == "directory"
    assert sbx.commands.run(f"stat -c %U {HOME}/newdir {HOME}/p/q/r").stdout == "user\nuser\n"

    v1_write(client, sid, f"{HOME}/old.txt", b"moved content")
    entry = sbx.files.rename(f"{HOME}/old.txt", f"{HOME}/newdir/new.txt")
    assert entry.path == f"{HOME}/newdir/new.txt" and entry.name == "new.txt"
    assert entry.type == FileType.FILE
    assert v1_stat(client, sid, f"{HOME}/old.txt").status_code == 404
    assert v1_read(client, sid, f"{HOME}/newdir/new.txt") == b"moved content"
    with pytest.raises(FileNotFoundException):
        sbx.files.rename(f"{HOME}/old.txt", f"{HOME}/again.txt")

    sbx.files.remove(f"{HOME}/newdir/new.txt")
    assert v1_stat(client, sid, f"{HOME}/newdir/new.txt").status_code == 404
    assert sbx.files.exists(f"{HOME}/newdir/new.txt") is False
    v1_write(client, sid, f"{HOME}/p/q/r/file", b"x")
    sbx.files.remove(f"{HOME}/p")
    assert v1_stat(client, sid, f"{HOME}/p").status_code == 404
    sbx.files.remove(f"{HOME}/p")  # already gone: no error, as envd's os.RemoveAll


def test_gzip_and_streamed_transfers_are_byte_exact(sbx: Sandbox, client: httpx.Client) -> None:
    """gzip=True and file-like data go as one octet-stream body each (gzip inflated by the
    daemon); a read with format="stream" gives the bytes in pieces; all byte-exact."""
    import io

    data = secrets.token_bytes(3 << 20) + b"\x00" * (1 << 20)  # random, then compressible
    info = sbx.files.write(f"{HOME}/gz.bin", data, gzip=True)
    assert info.path == f"{HOME}/gz.bin"
    assert hashlib.sha256(v1_read(client, sbx.sandbox_id, f"{HOME}/gz.bin")).digest() == \
        hashlib.sha256(data).digest()
    sbx.files.write(f"{HOME}/io.bin", io.BytesIO(data[: 1 << 20]))
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/io.bin") == data[: 1 << 20]
    pieces = list(sbx.files.read(f"{HOME}/gz.bin", format="stream"))
    assert b"".join(pieces) == data


def test_users_and_refusals(sbx: Sandbox, client: httpx.Client) -> None:
    """user="root" reaches root's files; `user` is refused them with a clear error, and a full
    disk is NotEnoughSpaceException, nothing half-written left behind."""
    from e2b import NotEnoughSpaceException

    sbx.files.write("/root/secret", "root only\n", user="root")
    sbx.commands.run("chmod 600 /root/secret", user="root")
    assert sbx.files.read("/root/secret", user="root") == "root only\n"
    assert sbx.commands.run("stat -c %U /root/secret", user="root").stdout == "root\n"
    with pytest.raises(SandboxException) as e:
        sbx.files.read("/root/secret")
    assert "EACCES" in str(e.value) or "ermission" in str(e.value), e.value
    with pytest.raises(SandboxException):
        sbx.files.write("/root/other", "x")
    # A relative path is the user's home's.
    sbx.files.write("rel.txt", "relative")
    assert v1_read(client, sbx.sandbox_id, f"{HOME}/rel.txt") == b"relative"
    sbx.commands.run(f"dd if=/dev/zero of={HOME}/fill bs=1M 2>/dev/null || true")
    with pytest.raises(NotEnoughSpaceException):
        sbx.files.write(f"{HOME}/huge.bin", b"\x01" * (2 << 20))
    assert v1_stat(client, sbx.sandbox_id, f"{HOME}/huge.bin").status_code == 404
    sbx.files.remove(f"{HOME}/fill")
    sbx.files.write(f"{HOME}/huge.bin", b"\x01" * (2 << 20))


def test_signed_urls_open_one_file_without_headers(e2b_env: Daemon, client: httpx.Client) -> None:
    """download_url and upload_url work with no header at all (a browser's link); each opens its
    path and operation only, of its sandbox only, and an expired one is refused."""
    first, second = Sandbox.create(), Sandbox.create()
    try:
        v1_write(client, first.sandbox_id, f"{HOME}/shared.txt", b"first's file")
        v1_write(client, second.sandbox_id, f"{HOME}/shared.txt", b"second's file")
        bare = httpx.Client(timeout=30)
        r = bare.get(first.download_url(f"{HOME}/shared.txt"))
        assert r.status_code == 200 and r.content == b"first's file", r.text
        r = bare.get(second.download_url(f"{HOME}/shared.txt", use_signature_expiration=60))
        assert r.status_code == 200 and r.content == b"second's file", r.text

        up = first.upload_url(f"{HOME}/up.bin")
        r = bare.post(up, files={"file": ("up.bin", b"\x00uploaded\xff")})
        assert r.status_code == 200, r.text
        assert r.json()[0]["path"] == f"{HOME}/up.bin"
        assert v1_read(client, first.sandbox_id, f"{HOME}/up.bin") == b"\x00uploaded\xff"

        # A read URL does not write, nor open another path; an altered or expired one is refused.
        assert bare.post(first.download_url(f"{HOME}/up.bin"),
                         files={"file": ("x", b"x")}).status_code == 401
        other = first.download_url(f"{HOME}/shared.txt").replace("shared.txt", "up.bin")
        assert bare.get(other).status_code == 401
        expired = first.download_url(f"{HOME}/shared.txt", use_signature_expiration=-10)
        r = bare.get(expired)
        assert r.status_code == 401 and "expired" in r.json()["message"], r.text
        # Its sandbox gone, the URL opens nothing.
        url = first.download_url(f"{HOME}/shared.txt")
        first.kill()
        assert bare.get(url).status_code == 401
    finally:
        first.kill()
        second.kill()


def test_signed_url_lookups_without_a_sandbox_are_rate_limited(sbx: Sandbox,
                                                               client: httpx.Client) -> None:
    """A signed URL without E2b-Sandbox-Id is checked against every sandbox, for anyone: one
    address gets a burst of such lookups, then 429 in E2B's shape until its bucket fills again;
    one that names its sandbox costs one check and is not counted."""
    v1_write(client, sbx.sandbox_id, f"{HOME}/rate.txt", b"rated")
    url = sbx.download_url(f"{HOME}/rate.txt")
    bare = httpx.Client(timeout=30)
    forged = url.replace("signature=", "signature=0")
    statuses = [bare.get(forged).status_code for _ in range(40)]
    assert statuses[0] == 401 and 429 in statuses, statuses
    r = bare.get(url)
    assert r.status_code == 429, r.text
    assert r.json()["code"] == 429 and "E2b-Sandbox-Id" in r.json()["message"], r.text
    r = bare.get(url, headers={"E2b-Sandbox-Id": sbx.sandbox_id})
    assert r.status_code == 200 and r.content == b"rated", r.text
    time.sleep(2.5)  # full again, for the tests after this one
    r = bare.get(url)
    assert r.status_code == 200 and r.content == b"rated", r.text


# --- watching ---------------------------------------------------------------------------------


def test_watch_dir_sync_sees_a_real_write(sbx: Sandbox) -> None:
    """The sync watcher's get_new_events reports a file made by a command: CREATE, WRITE."""
    assert sbx.files.make_dir(f"{HOME}/watched") is True
    watcher = sbx.files.watch_dir(f"{HOME}/watched")
    sbx.commands.run(f"echo data > {HOME}/watched/new.txt")
    events: list[FilesystemEvent] = []

    def saw_write() -> bool:
        events.extend(watcher.get_new_events())
        return any(e.type == FilesystemEventType.WRITE for e in events)

    assert wait_until(saw_write, 5, 0.1), events
    names_types = [(e.name, e.type) for e in events]
    assert ("new.txt", FilesystemEventType.CREATE) in names_types, names_types
    assert ("new.txt", FilesystemEventType.WRITE) in names_types, names_types
    assert names_types.index(("new.txt", FilesystemEventType.CREATE)) < \
        names_types.index(("new.txt", FilesystemEventType.WRITE))
    # Drained: what was returned is not returned again.
    again = [(e.name, e.type) for e in watcher.get_new_events()]
    assert ("new.txt", FilesystemEventType.CREATE) not in again, again
    sbx.commands.run(f"rm {HOME}/watched/new.txt")
    assert wait_until(lambda: any(e.type == FilesystemEventType.REMOVE and e.name == "new.txt"
                                  for e in watcher.get_new_events()), 5, 0.1)
    watcher.stop()


def test_watch_dir_async_sees_a_real_write(e2b_env: Daemon) -> None:
    """AsyncSandbox: `await files.watch_dir(path, on_event)` calls back for a write."""

    async def flow() -> None:
        sandbox = await AsyncSandbox.create()
        try:
            assert await sandbox.files.make_dir(f"{HOME}/w") is True
            got: list[FilesystemEvent] = []
            handle = await sandbox.files.watch_dir(f"{HOME}/w", got.append)
            out: list[str] = []
            r = await sandbox.commands.run(f"echo async > {HOME}/w/new.txt; echo done",
                                           on_stdout=out.append)
            assert r.stdout == "done\n" and "".join(out) == "done\n"
            for _ in range(50):
                if any(e.type == FilesystemEventType.WRITE for e in got):
                    break
                await asyncio.sleep(0.1)
            await handle.stop()
            names_types = [(e.name, e.type) for e in got]
            assert ("new.txt", FilesystemEventType.CREATE) in names_types, names_types
            assert ("new.txt", FilesystemEventType.WRITE) in names_types, names_types
            assert await sandbox.files.read(f"{HOME}/w/new.txt") == "async\n"
        finally:
            await sandbox.kill()

    asyncio.run(flow())


# --- control plane ----------------------------------------------------------------------------


def test_create_options_list_and_get_info(e2b_env: Daemon, client: httpx.Client) -> None:
    """metadata and envs given to create are seen by get_info, the listing, commands and /v1."""
    tag = f"e2b-{secrets.token_hex(4)}"
    metadata = {"suite": tag, "owner": "ci"}
    sandbox = Sandbox.create(metadata=metadata, envs={"GREETING": "hi there"}, timeout=120)
    try:
        sid = sandbox.sandbox_id
        v1 = client.get(f"/v1/sandboxes/{sid}").json()
        assert v1["metadata"] == metadata and v1["cwd"] == HOME
        assert sandbox.commands.run('echo "$GREETING"').stdout == "hi there\n"

        info = sandbox.get_info()
        assert info.sandbox_id == sid and info.template_id == v1["template"]
        assert info.metadata == metadata and info.state == SandboxState.RUNNING
        assert info.started_at < info.end_at
        assert abs((info.end_at - info.started_at).total_seconds() - 120) < 3
        now = datetime.now(timezone.utc)
        assert now - timedelta(seconds=30) < info.started_at <= now + timedelta(seconds=2)

        found: list[Any] = []
        paginator = Sandbox.list()
        while paginator.has_next:
            found.extend(s for s in paginator.next_items() if s.sandbox_id == sid)
        assert len(found) == 1
        assert found[0].metadata == metadata and found[0].state == SandboxState.RUNNING
        assert found[0].template_id == v1["template"]

        filtered = Sandbox.list(query=SandboxQuery(metadata={"suite": tag})).next_items()
        assert [s.sandbox_id for s in filtered] == [sid]
    finally:
        sandbox.kill()


def test_pause_keeps_memory_and_connect_resumes(e2b_env: Daemon, client: httpx.Client) -> None:
    """E2B's pause() (memory kept) and connect(): a process's state survives, the state shows in
    get_info() and list(query=state), and a second pause says it was paused already."""
    sandbox = Sandbox.create(timeout=120)
    try:
        sid = sandbox.sandbox_id
        counter = sandbox.commands.run(
            "python3 -c 'import time\nn = 0\nwhile True:\n    print(n, flush=True)\n"
            "    n += 1\n    time.sleep(0.05)' > /tmp/n.txt", background=True)
        def count(sb: Sandbox) -> int:
            try:
                return len(sb.files.read("/tmp/n.txt").split())
            except FileNotFoundException:
                return 0

        assert wait_until(lambda: count(sandbox) > 3, 10)
        assert sandbox.pause() is True
        assert sandbox.pause() is False
        assert client.get(f"/v1/sandboxes/{sid}").json()["status"] == "paused"
        assert Sandbox.get_info(sid).state == SandboxState.PAUSED
        paused = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sid in [s.sandbox_id for s in paused]
        running = Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
        assert sid not in [s.sandbox_id for s in running]
        time.sleep(1)
        again = Sandbox.connect(sid)
        assert again.get_info().state == SandboxState.RUNNING
        before = count(again)
        assert wait_until(lambda: count(again) > before + 3, 10)
        numbers = [int(n) for n in again.files.read("/tmp/n.txt").split()]
        assert numbers == list(range(len(numbers))), "the counter did not go on where it was"
        counter.kill()
    finally:
        sandbox.kill()


def test_lifecycle_on_timeout_pause(e2b_env: Daemon, client: httpx.Client) -> None:
    sandbox = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    try:
        assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["on_timeout"] == "pause"
        assert wait_until(lambda: Sandbox.get_info(sandbox.sandbox_id).state ==
                          SandboxState.PAUSED, 8, 0.2)
        again = Sandbox.connect(sandbox.sandbox_id, timeout=60)
        assert again.commands.run("echo back").stdout == "back\n"
    finally:
        sandbox.kill()


def test_a_paused_sandbox_wakes_for_an_envd_call(e2b_env: Daemon, client: httpx.Client) -> None:
    sandbox = Sandbox.create(timeout=120)
    try:
        sandbox.commands.run("echo kept > /tmp/k")
        assert sandbox.pause() is True
        assert sandbox.commands.run("cat /tmp/k").stdout == "kept\n"
        assert client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["status"] == "running"
    finally:
        sandbox.kill()


def test_default_timeout_is_five_minutes(sbx: Sandbox, client: httpx.Client) -> None:
    """A create without timeout gets E2B's default of 300 s, on the daemon too."""
    info = sbx.get_info()
    assert abs((info.end_at - info.started_at).total_seconds() - 300) < 3
    v1 = client.get(f"/v1/sandboxes/{sbx.sandbox_id}").json()
    expires = datetime.fromisoformat(v1["expires_at"].replace("Z", "+00:00"))
    assert abs((expires - info.end_at).total_seconds()) < 2


def test_set_timeout_moves_the_end(sbx: Sandbox, client: httpx.Client) -> None:
    """set_timeout moves the end both ways: later, and then so soon the sandbox ends."""
    sbx.set_timeout(600)
    info = sbx.get_info()
    left = (info.end_at - datetime.now(timezone.utc)).total_seconds()
    assert 590 < left <= 601, left
    v1 = client.get(f"/v1/sandboxes/{sbx.sandbox_id}").json()
    expires = datetime.fromisoformat(v1["expires_at"].replace("Z", "+00:00"))
    assert abs((expires - info.end_at).total_seconds()) < 2
    sbx.set_timeout(1)
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sbx.sandbox_id}").status_code == 404, 8,
                      0.2)
    assert sbx.is_running() is False


def test_kill_and_is_running(sbx: Sandbox, client: httpx.Client, marker: str) -> None:
    """is_running is True, kill() ends the sandbox and its processes, then is_running is False."""
    sbx.commands.run(f"sleep {marker}", background=True)
    assert sbx.is_running() is True
    assert sbx.kill() is True
    assert client.get(f"/v1/sandboxes/{sbx.sandbox_id}").status_code == 404
    assert wait_no_process(f"sleep {marker}", within=3) == []
    assert sbx.is_running() is False
    assert Sandbox.kill(sbx.sandbox_id) is False


def test_get_host(sbx: Sandbox, daemon: Daemon) -> None:
    """get_host names the daemon's preview host for the port."""
    assert sbx.get_host(8000) == f"8000-{sbx.sandbox_id}.localhost:{daemon.port}"


def test_get_metrics(daemon_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """get_metrics() (and Sandbox.get_metrics(id)) reads the samples of a daemon that samples
    every 0.2 s: a busy CPU shows, each entry has its CPU count, memory and disk totals, and
    start/end filter. A killed sandbox's metrics are SandboxNotFoundException."""
    d = daemon_factory(env={"SANDSTREAM_METRICS_INTERVAL_SECONDS": "0.2"})
    monkeypatch.setenv("E2B_API_URL", d.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", d.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    sandbox = Sandbox.create(timeout=120)
    try:
        created = datetime.now(timezone.utc)
        sandbox.commands.run("timeout 2 sh -c 'while :; do :; done' || true")
        # Samples after the busy second too, for the window below.
        time.sleep(1.6)
        metrics = sandbox.get_metrics()
        with d.client() as c:
            v1 = c.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()
        assert len(metrics) >= 5, metrics
        for m in metrics:
            assert m.cpu_count == v1["limits"]["cpu_percent"] // 100
            assert m.mem_total == v1["limits"]["memory_mb"] << 20
            assert 0 < m.mem_used <= m.mem_total and m.mem_cache >= 0
            assert m.disk_total > 0 and 0 < m.disk_used <= m.disk_total
            assert 0 <= m.cpu_used_pct <= 100
            assert created - timedelta(seconds=5) < m.timestamp <= datetime.now(timezone.utc)
        assert [m.timestamp for m in metrics] == sorted(m.timestamp for m in metrics)
        # A core's worth of spinning; other work on a loaded machine may take part of it.
        assert max(m.cpu_used_pct for m in metrics) > 25, metrics
        assert len(Sandbox.get_metrics(sandbox.sandbox_id)) >= len(metrics)

        assert sandbox.get_metrics(end=created - timedelta(minutes=1)) == []
        assert sandbox.get_metrics(start=datetime.now(timezone.utc) + timedelta(hours=1)) == []
        middle = metrics[len(metrics) // 2].timestamp.replace(microsecond=0) + timedelta(seconds=1)
        later = sandbox.get_metrics(start=middle)
        assert later and all(m.timestamp >= middle for m in later), later
    finally:
        sandbox.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_metrics(sandbox.sandbox_id)


# --- errors -----------------------------------------------------------------------------------


def test_wrong_api_key_is_authentication_exception(e2b_env: Daemon,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong key is the SDK's AuthenticationException, carrying sandstream's reason."""
    monkeypatch.setenv("E2B_API_KEY", "not-the-key")
    with pytest.raises(AuthenticationException) as e:
        Sandbox.create()
    assert "401" in str(e.value) and "wrong API key" in str(e.value)
    with pytest.raises(AuthenticationException):
        Sandbox.list().next_items()


def test_unknown_template_names_it(e2b_env: Daemon, client: httpx.Client) -> None:
    """Create with a template the daemon does not have fails naming it, and makes nothing."""
    def ids() -> set[str]:
        return {sb["id"] for sb in client.get("/v1/sandboxes").json()["sandboxes"]}

    before = ids()
    with pytest.raises(SandboxException) as e:
        Sandbox.create("no-such-template-e2b")
    assert "no-such-template-e2b" in str(e.value)
    assert ids() <= before


def test_connect_to_unknown_sandbox(e2b_env: Daemon) -> None:
    """Sandbox.connect to an id the daemon does not know is SandboxNotFoundException."""
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect("sb_0000000000000000")


def test_killed_sandbox_is_not_running(sbx: Sandbox) -> None:
    """After kill, commands and files raise SandboxNotRunningException (E2B's "not found")."""
    assert sbx.kill() is True
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")
    with pytest.raises(SandboxNotRunningException):
        sbx.files.read(f"{HOME}/anything")
    with pytest.raises(SandboxNotRunningException):
        sbx.files.list(HOME)


# --- fork and snapshots -----------------------------------------------------------------------
# E2B's fork() and create_snapshot() take the sandbox's memory: CRIU checkpoints it. Where CRIU
# is not installed these tests are skipped, each on its own (the rest of this module still runs).

CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")
needs_criu = pytest.mark.skipif(
    not os.access(CRIU, os.X_OK),
    reason=f"CRIU is not installed at {CRIU} (scripts/install-criu builds it); fork and "
           "snapshots with memory cannot be tested")
COUNTER = "n=0; while :; do n=$((n+1)); echo $n > /tmp/n; sleep 0.1; done"


def listed_ids() -> set[str]:
    """The ids of every sandbox `Sandbox.list()` gives, all pages."""
    ids: set[str] = set()
    paginator = Sandbox.list()
    while paginator.has_next:
        ids.update(s.sandbox_id for s in paginator.next_items())
    return ids


def snapshot_ids(paginator: Any) -> list[str]:
    """The snapshot ids of a `list_snapshots()` paginator, all pages."""
    ids: list[str] = []
    while paginator.has_next:
        ids.extend(s.snapshot_id for s in paginator.next_items())
    return ids


def counted(sandbox: Sandbox) -> int:
    """The last number COUNTER wrote in the sandbox (0 before its first)."""
    try:
        text = sandbox.files.read("/tmp/n").strip()
    except FileNotFoundException:
        return 0
    return int(text) if text else 0


@needs_criu
def test_fork_with_count_keeps_the_interpreters_variables_and_the_forks_diverge(
        e2b_env: Daemon, client: httpx.Client) -> None:
    """The code interpreter's `sandbox.fork(count=3, timeout=60)`: three running sandboxes of
    its class, each with the interpreter's variable, each going its own way (its variable, its
    files, its hostname its own id), listed by Sandbox.list and /v1 with the timeout asked; the
    source runs on untouched; killed, they are gone from both."""
    sandbox = CodeInterpreter.create(timeout=300)
    forks: list[Any] = []
    try:
        assert sandbox.run_code("x = 41").error is None
        sandbox.files.write(f"{HOME}/state.txt", "before the fork")
        forks = sandbox.fork(count=3, timeout=60)
        assert len(forks) == 3 and all(isinstance(f, CodeInterpreter) for f in forks), forks
        ids = [f.sandbox_id for f in forks]
        assert len(set(ids)) == 3 and sandbox.sandbox_id not in ids, ids
        for i, fork in enumerate(forks):
            done = fork.run_code(f"x += {i}\nx")
            assert done.error is None and done.text == str(41 + i), (done.error, done.text)
            assert fork.commands.run("hostname").stdout == f"{fork.sandbox_id}\n"
            assert fork.files.read(f"{HOME}/state.txt") == "before the fork"
            fork.files.write(f"{HOME}/state.txt", f"fork {i}")
        # Each kept its own, the source its own.
        assert [f.run_code("x").text for f in forks] == ["41", "42", "43"]
        assert [v1_read(client, i, f"{HOME}/state.txt") for i in ids] == [b"fork 0", b"fork 1",
                                                                          b"fork 2"]
        assert sandbox.run_code("x").text == "41"
        assert sandbox.files.read(f"{HOME}/state.txt") == "before the fork"
        assert sandbox.commands.run("hostname").stdout == f"{sandbox.sandbox_id}\n"
        assert sandbox.is_running() is True

        assert {sandbox.sandbox_id, *ids} <= listed_ids()
        for fork in forks:
            v1 = client.get(f"/v1/sandboxes/{fork.sandbox_id}").json()
            assert v1["status"] == "running", v1
            info = fork.get_info()
            assert info.state == SandboxState.RUNNING
            assert abs((info.end_at - datetime.now(timezone.utc)).total_seconds() - 60) < 5, info

        assert all(fork.kill() is True for fork in forks)
        for i in ids:
            assert client.get(f"/v1/sandboxes/{i}").status_code == 404
        assert not set(ids) & listed_ids()
        assert sandbox.run_code("x").text == "41"
    finally:
        for fork in forks:
            if isinstance(fork, CodeInterpreter):
                fork.kill()
        sandbox.kill()


@needs_criu
def test_fork_by_id_takes_the_running_processes_which_then_go_their_own_way(
        e2b_env: Daemon, client: httpx.Client) -> None:
    """`Sandbox.fork(sandbox_id)` (count left to the API: one): the fork's commands.list() has
    the source's background command, which counts on from where it was in the fork; killing it
    there leaves the source's counting. A killed sandbox's fork is SandboxNotFoundException."""
    source = Sandbox.create(timeout=120)
    forks: list[Any] = []
    try:
        counter = source.commands.run(COUNTER, background=True)
        assert wait_until(lambda: counted(source) > 3, 10)
        forks = Sandbox.fork(source.sandbox_id)
        assert len(forks) == 1 and isinstance(forks[0], Sandbox), forks
        fork = forks[0]
        listed = [p for p in fork.commands.list() if p.pid == counter.pid]
        assert len(listed) == 1 and listed[0].args == ["-l", "-c", COUNTER], fork.commands.list()
        at_fork = counted(fork)
        assert at_fork > 3, "the fork's counter started again"
        assert wait_until(lambda: counted(fork) > at_fork + 3, 10)
        assert fork.commands.kill(counter.pid) is True
        assert wait_until(lambda: counter.pid not in pids(fork), 5)
        stopped = counted(fork)
        before = counted(source)
        assert wait_until(lambda: counted(source) > before + 3, 10)
        assert counted(fork) == stopped
        assert counter.pid in pids(source)
        r = client.post(f"/v1/sandboxes/{fork.sandbox_id}/exec", json={"cmd": "cat /tmp/n"})
        assert r.status_code == 200 and int(r.json()["stdout"]) == stopped, r.text
    finally:
        for fork in forks:
            if isinstance(fork, Sandbox):
                fork.kill()
        source.kill()
    with pytest.raises(SandboxNotFoundException):
        source.fork()


@needs_criu
def test_snapshot_list_create_from_it_and_delete(e2b_env: Daemon, client: httpx.Client) -> None:
    """The code interpreter's create_snapshot() holds the interpreter as it was: list_snapshots
    (of the sandbox, by name, the instance's own) names it; two sandboxes made with
    Sandbox.create(snapshot_id) start with its variable and each goes its own way, the source
    too; delete_snapshot is True, then False, and the snapshot is gone from the lists, /v1 and
    create."""
    sandbox = CodeInterpreter.create(timeout=300)
    made: list[Any] = []
    snapshot_id = ""
    try:
        assert sandbox.run_code("x = 41").error is None
        snap = sandbox.create_snapshot()
        snapshot_id = snap.snapshot_id
        assert snapshot_id and snap.names == [snapshot_id], snap
        assert sandbox.run_code("x = 0").error is None  # after the snapshot: not in it
        assert sandbox.is_running() is True

        assert snapshot_ids(Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id)) == [snapshot_id]
        assert snapshot_ids(sandbox.list_snapshots()) == [snapshot_id]
        assert snapshot_ids(Sandbox.list_snapshots(name=snapshot_id)) == [snapshot_id]
        assert snapshot_id in snapshot_ids(Sandbox.list_snapshots())
        assert client.get(f"/v1/templates/{snapshot_id}").status_code == 200

        made = [CodeInterpreter.create(snapshot_id, timeout=120) for _ in range(2)]
        first, second = made
        assert first.run_code("x + 1").text == "42"
        assert first.run_code("x += 10\nx").text == "51"
        assert second.run_code("x").text == "41"
        assert sandbox.run_code("x").text == "0"
        for new in made:
            assert new.get_info().template_id == snapshot_id
            assert client.get(f"/v1/sandboxes/{new.sandbox_id}").json()["template"] == snapshot_id
            assert new.commands.run("hostname").stdout == f"{new.sandbox_id}\n"
        for new in made:
            assert new.kill() is True
        made = []

        assert Sandbox.delete_snapshot(snapshot_id) is True
        assert client.get(f"/v1/templates/{snapshot_id}").status_code == 404
        assert snapshot_ids(Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id)) == []
        assert snapshot_id not in snapshot_ids(Sandbox.list_snapshots())
        assert Sandbox.delete_snapshot(snapshot_id) is False
        with pytest.raises(SandboxException) as e:
            CodeInterpreter.create(snapshot_id)
        assert snapshot_id in str(e.value)
    finally:
        for new in made:
            new.kill()
        sandbox.kill()
        if snapshot_id:
            Sandbox.delete_snapshot(snapshot_id)


@needs_criu
def test_a_snapshot_in_use_is_not_deleted_and_the_error_names_its_sandbox(
        e2b_env: Daemon, client: httpx.Client) -> None:
    """`Sandbox.create_snapshot(sandbox_id, name=...)` takes the name as its id; while a sandbox
    made from it runs, delete_snapshot raises (409, naming the snapshot and that sandbox), not a
    quiet False, and the snapshot stays; once that sandbox is gone it is deleted. Snapshots
    outlive their source."""
    name = f"e2b-snap-{secrets.token_hex(4)}"
    source = Sandbox.create(timeout=120)
    user = None
    try:
        source.files.write(f"{HOME}/kept.txt", "in the snapshot")
        snap = Sandbox.create_snapshot(source.sandbox_id, name=name)
        assert snap.snapshot_id == name and snap.names == [name], snap
        source_id = source.sandbox_id
        assert source.kill() is True
        assert snapshot_ids(Sandbox.list_snapshots(sandbox_id=source_id)) == [name]

        user = Sandbox.create(name, timeout=120)
        assert user.files.read(f"{HOME}/kept.txt") == "in the snapshot"
        with pytest.raises(SandboxException) as e:
            Sandbox.delete_snapshot(name)
        assert e.value.status_code == 409, e.value
        assert name in str(e.value) and user.sandbox_id in str(e.value), e.value
        assert client.get(f"/v1/templates/{name}").status_code == 200
        assert snapshot_ids(Sandbox.list_snapshots(name=name)) == [name]
        assert user.is_running() is True
        assert user.kill() is True
        assert Sandbox.delete_snapshot(name) is True
        assert client.get(f"/v1/templates/{name}").status_code == 404
    finally:
        if user is not None:
            user.kill()
        source.kill()
        Sandbox.delete_snapshot(name)


@needs_criu
def test_async_fork_and_snapshots(e2b_env: Daemon, client: httpx.Client) -> None:
    """AsyncSandbox: `await fork(count=2)`, `await create_snapshot()`, `list_snapshots()` (the
    instance's and the class's), `await AsyncSandbox.create(snapshot_id)` with the source's
    background command running, `await AsyncSandbox.delete_snapshot` True then False."""

    async def flow() -> None:
        source = await AsyncSandbox.create(timeout=120)
        forks: list[Any] = []
        made = None
        snapshot_id = ""
        try:
            counter = await source.commands.run(COUNTER, background=True)
            forks = await source.fork(count=2)
            assert len(forks) == 2 and all(isinstance(f, AsyncSandbox) for f in forks), forks
            for fork in forks:
                assert (await fork.commands.run("hostname")).stdout == f"{fork.sandbox_id}\n"
                assert counter.pid in {p.pid for p in await fork.commands.list()}
            snap = await source.create_snapshot()
            snapshot_id = snap.snapshot_id
            assert [s.snapshot_id for s in await source.list_snapshots().next_items()] == \
                [snapshot_id]
            listed = await AsyncSandbox.list_snapshots(sandbox_id=source.sandbox_id).next_items()
            assert [s.snapshot_id for s in listed] == [snapshot_id]
            made = await AsyncSandbox.create(snapshot_id, timeout=60)
            assert counter.pid in {p.pid for p in await made.commands.list()}
            assert client.get(f"/v1/sandboxes/{made.sandbox_id}").json()["template"] == snapshot_id
            assert await made.kill() is True
            assert await AsyncSandbox.delete_snapshot(snapshot_id) is True
            assert await AsyncSandbox.delete_snapshot(snapshot_id) is False
        finally:
            for fork in forks:
                if isinstance(fork, AsyncSandbox):
                    await fork.kill()
            if made is not None:
                await made.kill()
            await source.kill()
            if snapshot_id:
                await AsyncSandbox.delete_snapshot(snapshot_id)

    asyncio.run(flow())


def sandbox_ids(client: httpx.Client) -> set[str]:
    """The ids of the daemon's sandboxes, through /v1."""
    return {sb["id"] for sb in client.get("/v1/sandboxes").json()["sandboxes"]}


def refuses_memory(sandbox: Sandbox, client: httpx.Client, why: str) -> None:
    """fork() and create_snapshot() of `sandbox` raise the daemon's 501 with `why` in it; no
    sandbox nor snapshot is made, and the sandbox runs on."""
    before = sandbox_ids(client)
    with pytest.raises(SandboxException) as e:
        sandbox.fork(count=2)
    assert e.value.status_code == 501 and why in str(e.value), e.value
    assert not isinstance(e.value, SandboxNotFoundException)
    with pytest.raises(SandboxException) as e:
        sandbox.create_snapshot()
    assert e.value.status_code == 501 and why in str(e.value), e.value
    assert sandbox_ids(client) == before
    assert snapshot_ids(sandbox.list_snapshots()) == []
    assert sandbox.commands.run("echo still here").stdout == "still here\n"


@needs_criu
def test_fork_and_snapshot_of_a_sandbox_with_a_volume_say_why_not(
        e2b_env: Daemon, client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox with a volume mounted (`volume_mounts=`) is not checkpointed: fork and
    create_snapshot raise a 501 that says so, and nothing is made."""
    from e2b import Volume

    monkeypatch.setenv("E2B_VOLUME_API_URL", e2b_env.url)
    volume = Volume.create(f"e2b-fork-{secrets.token_hex(4)}")
    try:
        sandbox = Sandbox.create(volume_mounts={"/mnt/data": volume}, timeout=60)
        try:
            refuses_memory(sandbox, client, "volumes")
        finally:
            sandbox.kill()
    finally:
        Volume.destroy(volume.volume_id)


@needs_criu
@pytest.mark.timeout(90)
def test_fork_and_snapshot_of_a_sandbox_with_internet_access_say_why_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`allow_internet_access=True` (network "egress"): fork and create_snapshot raise a 501
    that says so. The suites' daemons have no egress, so this is a daemon of test_egress.py's
    lab (a network namespace of its own), reached through a relay."""
    try:
        from test_egress import EgressLab, TcpRelay
    except ImportError as e:  # pragma: no cover - the lab is in this directory
        pytest.skip(f"no egress lab: {e}")
    lab = EgressLab(tmp_path)
    relay = None
    try:
        lab.up()
        d = lab.start_daemon(tmp_path / "data")
        assert d.uds is not None
        relay = TcpRelay(d.uds)
        url = f"http://127.0.0.1:{relay.port}"
        monkeypatch.setenv("E2B_API_URL", url)
        monkeypatch.setenv("E2B_SANDBOX_URL", url)
        monkeypatch.setenv("E2B_API_KEY", API_KEY)
        for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        sandbox = Sandbox.create(allow_internet_access=True, timeout=60)
        try:
            with d.client() as c:
                assert c.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()["network"] == "egress"
                refuses_memory(sandbox, c, "egress")
        finally:
            sandbox.kill()
    finally:
        if relay is not None:
            relay.close()
        lab.down()
