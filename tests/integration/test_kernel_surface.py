"""A hostile sandbox against the kernel and its own PID 1: refused system calls, masked /proc,
signals from inside, a tmpfs filled past the memory limit, and the operator's grants (nested
user namespaces, the host id range)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx

from helpers import API_KEY, BIN, assert_error, create_sandbox, run


def perl_syscall(nr: int) -> str:
    """A command printing `<return> <errno>` of syscall `nr` with zero arguments."""
    return f"perl -e '$r = syscall({nr}, 0, 0, 0, 0, 0); print $r, \" \", $!+0'"


def test_nested_user_namespaces_are_the_operators_grant(client: httpx.Client,
                                                        daemon_factory: Any) -> None:
    r = client.post("/v1/sandboxes", json={"allow_nested_userns": True})
    err = assert_error(r, 400, "invalid_request")
    assert "allow_nested_userns" in err["message"] and "configuration" in err["message"], err

    d = daemon_factory(args=["--allow-nested-userns", "true"])
    with d.client() as c:
        granted = create_sandbox(c, allow_nested_userns=True)
        assert run(c, granted["id"], cmd="unshare -U true")["exit_code"] == 0
        plain = create_sandbox(c)
        refused = run(c, plain["id"], cmd="unshare -U true")
        assert refused["exit_code"] != 0, refused


def test_kernel_surface_is_refused(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    for name, nr in (("io_uring_setup", 425), ("io_uring_enter", 426), ("modify_ldt", 154),
                     ("pidfd_getfd", 438), ("kcmp", 312), ("process_madvise", 440)):
        result = run(client, sb, cmd=perl_syscall(nr))
        assert result["stdout"] == "-1 1", (name, result)
    aslr_off = run(client, sb, cmd="setarch $(uname -m) -R true")
    assert aslr_off["exit_code"] != 0, aslr_off
    masked = run(client, sb, user="root",
                 cmd="for f in kallsyms kcore keys timer_list sched_debug sysrq-trigger; do "
                     "[ -e /proc/$f ] && head -c 1 /proc/$f | wc -c; done | sort -u")
    assert masked["stdout"] == "0\n", masked
    sysctl = run(client, sb, user="root", cmd="echo 1 > /proc/sys/net/ipv4/ip_forward")
    assert "Read-only file system" in sysctl["stderr"], sysctl


def test_pid1_ignores_signals_from_inside(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    sb = sandbox["id"]
    for sig in ("TERM", "KILL", "INT", "HUP", "QUIT"):
        sent = run(client, sb, user="root", cmd=f"kill -{sig} 1; sleep 0.3; echo sent")
        assert sent["stdout"] == "sent\n", (sig, sent)
        assert client.get(f"/v1/sandboxes/{sb}").json()["status"] == "running"
        assert run(client, sb, cmd="echo alive")["stdout"] == "alive\n", sig


def test_filling_tmpfs_past_memory_leaves_the_sandbox_usable(client: httpx.Client) -> None:
    sb = create_sandbox(client, limits={"memory_mb": 64, "disk_mb": 1024})["id"]
    try:
        fill = run(client, sb, cmd="head -c 200M /dev/zero > /tmp/fill; df -m /tmp | tail -1")
        assert "No space left on device" in fill["stderr"], fill
        assert fill["stdout"].split()[1] == "32", fill
        assert run(client, sb, cmd="echo alive")["stdout"] == "alive\n"
        assert client.get(f"/v1/sandboxes/{sb}").json()["status"] == "running"
    finally:
        client.delete(f"/v1/sandboxes/{sb}")


def daemon_start_error(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs sandstreamd with `args`, expecting it to refuse to start."""
    return subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
                           *args], capture_output=True, text=True, timeout=30,
                          env={"SANDSTREAM_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"})


def test_host_ids_past_2_32_stop_the_daemon_at_start(tmp_path: Path) -> None:
    wrapped = daemon_start_error(tmp_path, "--host-id-base", "4294000000")
    assert wrapped.returncode != 0, wrapped
    assert "host_id_base 4294000000" in wrapped.stderr, wrapped.stderr
    assert "end past 4294967294" in wrapped.stderr, wrapped.stderr
    too_many = daemon_start_error(tmp_path, "--max-sandboxes", "70000")
    assert too_many.returncode == 2, too_many
    assert "max_sandboxes must be at most 65535" in too_many.stderr, too_many.stderr
