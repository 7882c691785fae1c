"""Buffered exec: exit codes, signals, result fields, output caps and the command request."""

from __future__ import annotations

import base64
from typing import Any

import httpx

from helpers import assert_error, create_sandbox, run


def test_exit_code(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """`exit 3` is exit_code 3, reason exited, no signal."""
    res = run(client, sandbox["id"], cmd="exit 3")
    assert (res["exit_code"], res["signal"], res["reason"]) == (3, None, "exited"), res


def test_signal_from_inside(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """`kill -9 $$` is SIGKILL, exit_code 137, reason signaled."""
    res = run(client, sandbox["id"], cmd="echo x; kill -9 $$")
    assert (res["exit_code"], res["signal"], res["reason"]) == (137, "SIGKILL", "signaled"), res
    assert res["stdout"] == "x\n"


def test_result_fields(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """The buffered result has every field of the spec with the right values."""
    res = run(client, sandbox["id"], cmd="echo hello; echo oops >&2; sleep 0.2")
    assert res["process_id"].startswith("proc_")
    assert res["stdout"] == "hello\n" and res["stderr"] == "oops\n"
    assert res["exit_code"] == 0 and res["signal"] is None and res["reason"] == "exited"
    assert isinstance(res["duration_ms"], int) and 200 <= res["duration_ms"] < 5000, res
    assert res["truncated"] is False


def test_truncated(daemon_factory: Any) -> None:
    """Output over exec_output_limit_bytes is cut, `truncated` set, the process runs to its end."""
    d = daemon_factory(args=["--exec-output-limit-bytes", "1000"])
    with d.client() as c:
        sb = create_sandbox(c)["id"]
        res = run(c, sb, cmd="head -c 5000 /dev/zero | tr '\\0' x; echo end >&2; exit 4")
        assert res["truncated"] is True, res
        assert res["stdout"] == "x" * 1000
        assert res["stderr"] == "end\n"
        assert res["exit_code"] == 4 and res["reason"] == "exited"
        small = run(c, sb, cmd="printf 12345")
        assert small["truncated"] is False and small["stdout"] == "12345"


def test_merge_stderr_keeps_order(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """merge_stderr puts both streams in stdout in the order written."""
    cmd = "echo a; echo b >&2; echo c; echo d >&2"
    res = run(client, sandbox["id"], cmd=cmd, merge_stderr=True)
    assert res["stdout"] == "a\nb\nc\nd\n" and res["stderr"] == "", res
    res = run(client, sandbox["id"], cmd=cmd)
    assert res["stdout"] == "a\nc\n" and res["stderr"] == "b\nd\n", res


def test_stdin_field(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """`stdin` is written then closed; without it stdin is at EOF at once."""
    res = run(client, sandbox["id"], cmd="cat; echo end", stdin="hello\nworld")
    assert res["stdout"] == "hello\nworldend\n"
    res = run(client, sandbox["id"], cmd="cat; echo end", timeout_seconds=5)
    assert res["stdout"] == "end\n" and res["reason"] == "exited", res


def test_argv_form(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """argv runs without a shell: no expansion, arguments kept whole."""
    res = run(client, sandbox["id"], argv=["printf", "%s|", "a b", "$HOME", "*"])
    assert res["stdout"] == "a b|$HOME|*|", res


def test_env(client: httpx.Client) -> None:
    """The request's env is added to the sandbox's env, for this command only."""
    sb = create_sandbox(client, env={"SB_VAR": "from-sandbox", "BOTH": "sandbox"})
    try:
        res = run(client, sb["id"], cmd='echo "$SB_VAR|$REQ_VAR|$BOTH"',
                  env={"REQ_VAR": "a b", "BOTH": "request"})
        assert res["stdout"] == "from-sandbox|a b|request\n"
        res = run(client, sb["id"], cmd='echo "$SB_VAR|$REQ_VAR|$BOTH"')
        assert res["stdout"] == "from-sandbox||sandbox\n"
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")


def test_cwd(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """`cwd` sets the working directory; the default is the sandbox's cwd."""
    run(client, sandbox["id"], cmd="mkdir -p sub/dir && echo hi > sub/dir/marker")
    res = run(client, sandbox["id"], cmd="cat marker; pwd", cwd=sandbox["cwd"] + "/sub/dir")
    out = res["stdout"].splitlines()
    assert out[0] == "hi" and out[1].endswith("/sub/dir"), res
    res = run(client, sandbox["id"], cmd="cat sub/dir/marker")
    assert res["stdout"] == "hi\n"


def test_no_daemon_fds_inherited(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A command sees only stdin, stdout and stderr: no daemon socket or pipe leaks into it."""
    res = run(client, sandbox["id"], argv=["ls", "-l", "/proc/self/fd"])
    fds = {line.split()[-3]: line.split()[-1] for line in res["stdout"].splitlines()[1:]}
    # ls itself holds one descriptor open: the directory it is listing.
    extra = {fd: target for fd, target in fds.items() if fd not in ("0", "1", "2")}
    assert len(extra) <= 1 and all("/proc/" in t for t in extra.values()), fds


def test_buffered_base64(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """encoding base64 makes both strings base64 of the exact bytes."""
    res = run(client, sandbox["id"], cmd="printf '\\377\\000a'; printf '\\342' >&2",
              encoding="base64")
    assert base64.b64decode(res["stdout"]) == b"\xff\x00a"
    assert base64.b64decode(res["stderr"]) == b"\xe2"


def test_command_request_validation(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Both or neither of cmd/argv, an empty argv, a bad encoding: 400 invalid_request."""
    url = f"/v1/sandboxes/{sandbox['id']}/exec"
    bodies: list[dict[str, Any]] = [
        {"cmd": "true", "argv": ["true"]}, {}, {"argv": []}, {"cmd": "true", "encoding": "latin1"},
        {"cmd": "true", "timeout_seconds": 0}, {"cmd": "true", "idle_timeout_seconds": -1}]
    for body in bodies:
        assert_error(client.post(url, json=body), 400, "invalid_request")
