"""The synchronous client against the real daemon: sandboxes, exec, exec_stream, processes,
timeouts and the typed errors."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import sandstream
from sandstream import (
    AnsiStripper,
    CommandFailed,
    Exit,
    LineBuffer,
    Sandbox,
    SandboxInfo,
    Start,
    Stderr,
    Stdout,
)

from .conftest import Daemon

# The CRIU the daemon checkpoints sandboxes with (its `criu` default); scripts/install-criu
# builds it. Without it, a pause with mode "checkpoint" answers 501.
CRIU = Path("/var/cache/sandstream/criu-4.2.1/sbin/criu")
needs_criu = pytest.mark.skipif(
    not os.access(CRIU, os.X_OK),
    reason=f"CRIU is not installed at {CRIU} (scripts/install-criu builds it)")


@pytest.fixture
def sb(daemon: Daemon) -> Iterator[Sandbox]:
    with Sandbox.create(template="base") as sandbox:
        yield sandbox


def test_create_connect_and_delete_on_exit(daemon: Daemon) -> None:
    with Sandbox.create(template="base", env={"GREETING": "hi"}, timeout=600) as sb:
        assert sb.id.startswith("sb_")
        assert sb.info.status == "running"
        assert sb.info.ttl_seconds == 600
        assert sb.info.expires_at is not None
        assert sb.info.env.get("GREETING") == "hi"
        again = Sandbox.connect(sb.id)
        assert again.refresh().id == sb.id
        assert sb.exec("echo $GREETING").stdout == "hi\n"
        assert any(s.id == sb.id for s in Sandbox.list())
        again.close()
    with pytest.raises(sandstream.NotFound):
        Sandbox.connect(sb.id)
    sb.kill()  # idempotent


def test_pause_and_resume(daemon: Daemon) -> None:
    with Sandbox.create(template="base") as sb:
        info = sb.pause()
        assert info.status == "paused" and info.paused and info.pause_mode == "freeze"
        assert info.paused_at is not None and sb.info is info
        assert sb.pause().paused  # a paused sandbox: as it is
        assert sb.exec("echo woke").stdout == "woke\n"  # a request resumes it
        assert not sb.refresh().paused
        sb.pause()
        resumed = sb.resume()
        assert resumed.status == "running" and resumed.paused_at is None
    with Sandbox.create(template="base", auto_resume=False) as sb:
        assert sb.info.auto_resume is False
        sb.pause()
        with pytest.raises(sandstream.SandboxPaused) as refused:
            sb.exec("true")
        assert refused.value.status == 409 and "resume" in str(refused.value)
        sb.resume()
        assert sb.exec("echo ok").stdout == "ok\n"
        info = sb.set_lifecycle(auto_pause=600, on_timeout="pause", auto_resume=True)
        assert info.auto_pause_seconds == 600 and info.on_timeout == "pause" and info.auto_resume
        assert sb.set_lifecycle(auto_pause=0).auto_pause_seconds is None
    with Sandbox.create(template="base", auto_pause=1) as sb:
        assert sb.info.auto_pause_seconds == 1
        job = sb.processes.start("sleep 3", keep_awake=True)
        assert job.info.keep_awake
        time.sleep(2)
        assert sb.refresh().status == "running"  # kept awake by the job
        deadline = time.monotonic() + 6
        while sb.refresh().status != "paused" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sb.info.paused


def test_auto_pause_mode_at_create_and_in_set_lifecycle(daemon: Daemon) -> None:
    with Sandbox.create(template="base", auto_pause=600, auto_pause_mode="checkpoint") as sb:
        assert (sb.info.auto_pause_seconds, sb.info.auto_pause_mode) == (600, "checkpoint")
        info = sb.refresh()
        assert (info.auto_pause_seconds, info.auto_pause_mode) == (600, "checkpoint")
        info = sb.set_lifecycle(auto_pause=300, auto_pause_mode="freeze")
        assert (info.auto_pause_seconds, info.auto_pause_mode) == (300, "freeze")
        info = sb.set_lifecycle(auto_pause=120, auto_pause_mode="checkpoint", on_timeout="pause")
        assert (info.auto_pause_seconds, info.auto_pause_mode) == (120, "checkpoint")
        assert info.on_timeout == "pause" and sb.refresh().auto_pause_mode == "checkpoint"
        assert sb.set_lifecycle(on_timeout="kill").auto_pause_mode == "checkpoint"  # kept
        info = sb.set_lifecycle(auto_pause=60)  # no mode: the server's default
        assert (info.auto_pause_seconds, info.auto_pause_mode) == (60, "freeze")
        info = sb.set_lifecycle(auto_pause=0, auto_pause_mode="checkpoint")  # off, whatever the mode
        assert (info.auto_pause_seconds, info.auto_pause_mode) == (None, None)
        with pytest.raises(ValueError, match="auto_pause"):
            sb.set_lifecycle(auto_pause_mode="checkpoint")
        with pytest.raises(sandstream.InvalidRequest, match="mode"):
            sb.set_lifecycle(auto_pause=60, auto_pause_mode="hibernate")
    with Sandbox.create(template="base", auto_pause=600) as sb:
        assert (sb.info.auto_pause_seconds, sb.info.auto_pause_mode) == (600, "freeze")
    with Sandbox.create(template="base") as sb:
        assert (sb.info.auto_pause_seconds, sb.info.auto_pause_mode) == (None, None)
    with pytest.raises(ValueError, match="auto_pause"):
        Sandbox.create(template="base", auto_pause_mode="checkpoint")
    # A server that leaves the mode out pauses by freezing.
    assert SandboxInfo.from_json({"id": "sb_1", "auto_pause": {"idle_seconds": 5}}).auto_pause_mode == "freeze"
    assert SandboxInfo.from_json({"id": "sb_1", "auto_pause": None}).auto_pause_mode is None


@needs_criu
def test_auto_pause_checkpoints_an_idle_sandbox(daemon: Daemon) -> None:
    with Sandbox.create(template="base", auto_pause=1, auto_pause_mode="checkpoint") as sb:
        job = sb.processes.start("sleep 600")
        deadline = time.monotonic() + 15
        while sb.refresh().status != "paused" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sb.info.paused and sb.info.pause_mode == "checkpoint", sb.info
        assert sb.exec("echo awake").stdout == "awake\n"  # a request restores it
        assert sb.refresh().status == "running" and sb.info.pause_mode is None
        assert job.refresh().status == "running" and job.info.pid is not None


@needs_criu
def test_pause_with_checkpoint_and_resume_keep_a_background_process(daemon: Daemon) -> None:
    with Sandbox.create(template="base", auto_resume=False) as sb:
        job = sb.processes.start(
            "i=0; while true; do echo $i > /tmp/count; i=$((i+1)); sleep 0.1; done")
        time.sleep(0.5)
        pid = job.refresh().pid
        assert pid is not None
        info = sb.pause(mode="checkpoint")
        assert info.status == "paused" and info.paused and info.pause_mode == "checkpoint"
        assert info.paused_at is not None and sb.info is info
        assert sb.refresh().pause_mode == "checkpoint"
        assert sb.pause(mode="checkpoint").pause_mode == "checkpoint"  # as it is
        resumed = sb.resume()
        assert resumed.status == "running" and resumed.pause_mode is None
        assert resumed.paused_at is None
        after = job.refresh()
        assert after.status == "running" and after.pid == pid  # restored, same pid
        first = int(sb.exec("cat /tmp/count").stdout)
        time.sleep(0.5)
        assert int(sb.exec("cat /tmp/count").stdout) > first  # and it counts on


def test_templates_and_limits(daemon: Daemon) -> None:
    with Sandbox.create(template="code-interpreter", memory_mb=256, pids=128) as sb:
        assert sb.info.limits.memory_mb == 256
        assert sb.info.limits.pids == 128
        assert sb.exec("echo ok").stdout == "ok\n"
    with pytest.raises(sandstream.InvalidRequest, match="template"):
        Sandbox.create(template="no-such-template")
    with pytest.raises(sandstream.InvalidRequest, match="memory_mb"):
        Sandbox.create(memory_mb=10**9)


def test_exec_returns_output_and_exit_record(sb: Sandbox) -> None:
    r = sb.exec("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.reason, r.signal) == ("out\n", "err\n", 3, "exited", None)
    assert not r.ok and r.process_id and r.process_id.startswith("proc_")
    assert r.duration_ms is not None and r.duration_ms >= 0
    r = sb.exec(["printf", "%s|", "a b", "c"], env={"X": "y"})
    assert r.stdout == "a b|c|"
    r = sb.exec("cat; echo \"$X\"; pwd", stdin="from stdin\n", env={"X": "y"}, cwd="/workspace")
    assert r.stdout.startswith("from stdin\ny\n") and r.ok
    r = sb.exec("printf 'caf\\303\\251 \\377'")
    assert r.stdout == "café \ufffd" and r.stdout_bytes == b"caf\xc3\xa9 \xff"


def test_exec_check_raises_command_failed_with_the_output_tail(sb: Sandbox) -> None:
    assert sb.exec("true", check=True).exit_code == 0
    with pytest.raises(CommandFailed) as info:
        sb.exec("for i in $(seq 1 50); do echo line $i; done; echo boom >&2; exit 7", check=True)
    err = info.value
    assert err.exit_code == 7 and err.reason == "exited"
    assert "line 50" in err.output_tail and "boom" in err.output_tail
    assert "line 1\n" not in err.output_tail
    assert "exit code 7" in str(err)


def test_callbacks_fire_as_chunks_arrive_not_at_exit(sb: Sandbox) -> None:
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    code = sb.exec_stream(
        "echo first; sleep 1.5; echo second",
        on_stdout=lambda c: arrivals.append((time.monotonic() - started, c)),
    )
    ended = time.monotonic() - started
    assert code == 0
    assert "".join(c for _, c in arrivals) == "first\nsecond\n"
    assert arrivals[0][1] == "first\n"
    assert arrivals[0][0] < ended - 1.0, (arrivals, ended)


def test_stdout_and_stderr_stay_separate_and_exit_is_reported(sb: Sandbox) -> None:
    out: list[str] = []
    err: list[str] = []
    exits: list[Exit] = []
    code = sb.exec_stream(
        "echo to-out; echo to-err >&2; exit 4",
        on_stdout=out.append,
        on_stderr=err.append,
        on_exit=exits.append,
    )
    assert code == 4
    assert "".join(out) == "to-out\n" and "".join(err) == "to-err\n"
    assert exits[0].exit_code == 4 and exits[0].reason == "exited"


def test_event_iterator_yields_typed_events(sb: Sandbox) -> None:
    events = list(sb.exec_events("echo a; echo b >&2", env={"K": "v"}))
    assert isinstance(events[0], Start) and events[0].sandbox_id == sb.id
    assert events[0].process_id.startswith("proc_") and events[0].seq == 1
    assert isinstance(events[-1], Exit) and events[-1].exit_code == 0
    assert "".join(e.data for e in events if isinstance(e, Stdout)) == "a\n"
    assert "".join(e.data for e in events if isinstance(e, Stderr)) == "b\n"
    seqs = [e.seq for e in events if isinstance(e, (Start, Stdout, Stderr, Exit))]
    assert seqs == sorted(set(seqs))


def test_utf8_split_across_chunks_arrives_whole(sb: Sandbox) -> None:
    cmd = "printf '\\342\\202'; sleep 0.3; printf '\\254 and \\360\\237'; sleep 0.3; printf '\\230\\200\\n'"
    events = [e for e in sb.exec_events(cmd) if isinstance(e, Stdout)]
    assert len(events) >= 2, "the output should have come in several chunks"
    assert b"".join(e.raw for e in events) == "€ and 😀\n".encode()
    assert "".join(e.data for e in events) == "€ and 😀\n"
    chunks: list[str] = []
    assert sb.exec_stream(cmd, on_stdout=chunks.append) == 0
    assert "".join(chunks) == "€ and 😀\n"
    assert all("\ufffd" not in c for c in chunks)


def test_ansi_sequence_split_across_chunks_is_stripped_whole(sb: Sandbox) -> None:
    cmd = "printf 'ok \\033[3'; sleep 0.3; printf '1mred\\033[0m\\n'; printf '10%%\\r'; sleep 0.2; printf '100%%\\n'"
    stripper = AnsiStripper()
    raw: list[str] = []
    clean: list[str] = []

    def on_out(chunk: str) -> None:
        raw.append(chunk)
        clean.append(stripper.feed(chunk))

    assert sb.exec_stream(cmd, on_stdout=on_out) == 0
    clean.append(stripper.flush())
    assert raw[0] == "ok \x1b[3", "the command should have produced a split escape sequence"
    assert "".join(clean) == "ok red\n100%\n"


def test_line_buffer_as_callback(sb: Sandbox) -> None:
    lines: list[str] = []
    lb = LineBuffer(lines.append)
    sb.exec_stream("printf 'a'; sleep 0.2; printf 'b\\nc\\nd'", on_stdout=lb.feed)
    lb.flush()
    assert lines == ["ab", "c", "d"]


def test_exec_stream_check_raises_with_tail(sb: Sandbox) -> None:
    with pytest.raises(CommandFailed) as info:
        sb.exec_stream("echo compiling; echo 'error: missing ;' >&2; exit 2", check=True)
    assert info.value.exit_code == 2
    assert "error: missing ;" in info.value.output_tail
    assert info.value.process_id is not None
    assert sb.exec_stream("exit 0", check=True) == 0


def test_total_timeout_kills_with_reason_timeout(sb: Sandbox) -> None:
    exits: list[Exit] = []
    started = time.monotonic()
    code = sb.exec_stream("echo start; sleep 30", timeout_seconds=1, on_exit=exits.append)
    assert time.monotonic() - started < 20
    assert code != 0 and exits[0].reason == "timeout"
    with pytest.raises(CommandFailed) as info:
        sb.exec_stream("sleep 30", timeout_seconds=0.5, check=True)
    assert info.value.reason == "timeout"
    r = sb.exec("sleep 30", timeout_seconds=0.5)
    assert r.reason == "timeout" and r.exit_code != 0


def test_idle_timeout_kills_a_silent_command_but_not_a_chatty_one(sb: Sandbox) -> None:
    exits: list[Exit] = []
    code = sb.exec_stream("echo a; sleep 30", idle_timeout_seconds=1, on_exit=exits.append)
    assert code != 0 and exits[0].reason == "idle_timeout"
    exits.clear()
    code = sb.exec_stream(
        "for i in 1 2 3 4; do echo $i; sleep 0.4; done", idle_timeout_seconds=1, on_exit=exits.append
    )
    assert code == 0 and exits[0].reason == "exited"


def test_background_processes(sb: Sandbox) -> None:
    p = sb.processes.start("echo started; cat; echo done", id="catter")
    assert p.id == "catter" and p.info.running
    assert p.send_stdin("hello ") == 6
    p.send_stdin(b"world\n")
    p.close_stdin()
    info = p.wait(timeout=10)
    assert info.exit_code == 0 and info.reason == "exited" and not info.running
    text = "".join(e.data for e in p.logs(follow=True, since=0) if isinstance(e, Stdout))
    assert text == "started\nhello world\ndone\n"
    assert [x.id for x in sb.processes.list(status="exited")].count("catter") == 1
    assert sb.processes.get("catter").info.exit_code == 0
    with pytest.raises(sandstream.Conflict):
        sb.processes.start("true", id="catter")
    with pytest.raises(sandstream.Conflict):
        p.send_stdin("too late")
    with pytest.raises(sandstream.NotFound):
        sb.processes.get("nobody")


def test_signal_kill_and_wait_timeout(sb: Sandbox) -> None:
    p = sb.processes.start("sleep 60")
    assert p.id in [x.id for x in sb.processes.list(status="running")]
    with pytest.raises(sandstream.Timeout):
        p.wait(timeout=0.3)
    p.signal("TERM")
    info = p.wait(timeout=10)
    assert info.reason == "signaled" and info.signal == "SIGTERM" and info.exit_code == 143
    q = sb.processes.start("sleep 60")
    info = q.kill()
    assert info.reason == "killed" and not info.running
    events = list(q.logs(follow=True))
    assert isinstance(events[-1], Exit) and events[-1].reason == "killed"


def test_logs_disconnect_and_reattach_deliver_each_chunk_once(sb: Sandbox) -> None:
    p = sb.processes.start("for i in $(seq 1 12); do echo line $i; sleep 0.1; done")
    got: list[str] = []
    for event in p.logs(follow=True):
        if isinstance(event, Stdout):
            got.append(event.data)
            if "line 3\n" in "".join(got):
                p.disconnect()
    assert "line 12" not in "".join(got)
    time.sleep(0.5)
    again = sb.processes.get(p.id)
    tail = list(again.logs(follow=True, since=p.last_event_id))
    got += [e.data for e in tail if isinstance(e, Stdout)]
    assert isinstance(tail[-1], Exit)
    assert "".join(got) == "".join(f"line {i}\n" for i in range(1, 13))
    # The same handle reattaches after what it saw: nothing left but nothing repeated.
    rest = list(p.reattach())
    assert "".join(e.data for e in rest if isinstance(e, Stdout)) == "".join(
        e.data for e in tail if isinstance(e, Stdout)
    )


def test_logs_without_follow_and_tail(sb: Sandbox) -> None:
    p = sb.processes.start("for i in 1 2 3 4 5; do echo $i; done")
    p.wait(timeout=10)
    events = list(p.logs(follow=False))
    assert "".join(e.data for e in events if isinstance(e, Stdout)) == "1\n2\n3\n4\n5\n"
    fresh = sb.processes.get(p.id)
    tail = [e for e in fresh.logs(follow=False, tail=1) if isinstance(e, Stdout)]
    assert tail and tail[-1].data.endswith("5\n") and len(tail) == 1


def test_errors_carry_the_servers_message(daemon: Daemon, sb: Sandbox) -> None:
    with pytest.raises(sandstream.Unauthorized) as unauthorized:
        Sandbox.create(api_key="wrong-key")
    assert unauthorized.value.status == 401 and unauthorized.value.message
    with pytest.raises(sandstream.NotFound) as not_found:
        Sandbox.connect("sb_0000000000000000")
    assert not_found.value.message
    with pytest.raises(sandstream.InvalidRequest, match="timeout_seconds"):
        sb.exec("true", timeout_seconds=-1)
    with pytest.raises(sandstream.PayloadTooLarge):
        sb.exec("echo " + "x" * (2 << 20))
    api = sb._api
    with pytest.raises(sandstream.InvalidJson):
        api.request("POST", "/v1/sandboxes", content=b"{nope", headers={"Content-Type": "application/json"})
    with pytest.raises(sandstream.UnsupportedMediaType):
        api.request("POST", "/v1/sandboxes", content=b"x", headers={"Content-Type": "text/plain"})
    with pytest.raises(sandstream.MethodNotAllowed):
        api.request("PUT", sb._path)
    with pytest.raises(sandstream.NotFound):
        api.request("GET", "/v1/no-such-route")


def test_shutting_down_ends_a_stream_with_an_error_not_a_fake_exit(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from .conftest import API_KEY, start_daemon

    d = start_daemon(tmp_path_factory.mktemp("shutdown") / "data")
    try:
        sb = Sandbox.create(base_url=d.url, api_key=API_KEY)
        events = sb.exec_events("echo up; sleep 60")
        for event in events:
            if isinstance(event, Stdout):
                break
        d.process.terminate()
        rest = list(events)
        last = rest[-1]
        # Either the daemon killed the process first (a truthful exit, reason killed) or the
        # stream ends with an error event; never a stream that just stops, never exit 0.
        if isinstance(last, Exit):
            assert last.reason == "killed" and last.exit_code != 0, last
        else:
            assert last == sandstream.Error("shutting_down", "sandstreamd is shutting down"), rest
    except (sandstream.StreamLost, httpx.HTTPError) as exc:
        pytest.fail(f"the stream broke instead of ending with an error or exit event: {exc}")
    finally:
        d.stop()
