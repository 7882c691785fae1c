"""A sandbox sees its own limits: its cgroups under /sys/fs/cgroup (read-only, from inside its
cgroup namespace), as many CPUs as its cpu limit rounds up to, and /proc/meminfo and friends
answered from its limits, so that free, nproc, Node and Java size themselves to the sandbox.

Every sandbox here has memory_mb 512 and cpu_percent 50 (half of one CPU).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import create_sandbox, run, wait_until

MIB = 1024 * 1024
LIMITS = {"memory_mb": 512, "cpu_percent": 50}


@pytest.fixture
def limited(client: httpx.Client) -> Iterator[str]:
    """A sandbox of 512 MiB and half a CPU, deleted afterwards."""
    sb = create_sandbox(client, limits=LIMITS)
    yield sb["id"]
    client.delete(f"/v1/sandboxes/{sb['id']}")


def sh(c: httpx.Client, sandbox_id: str, cmd: str, timeout: int = 60) -> dict[str, Any]:
    """Runs `cmd` and asserts it exited 0."""
    res = run(c, sandbox_id, cmd=cmd, timeout_seconds=timeout)
    assert res["exit_code"] == 0, (res["exit_code"], res["stdout"][-2000:], res["stderr"][-2000:])
    return res


def has(c: httpx.Client, sandbox_id: str, program: str) -> bool:
    return run(c, sandbox_id, cmd=f"command -v {program}")["exit_code"] == 0


def test_cgroupfs_shows_the_limits_read_only(client: httpx.Client, limited: str) -> None:
    """/sys/fs/cgroup is the sandbox's own cgroup: memory, CPU and pids limits, and no write."""
    v2 = run(client, limited, cmd="test -f /sys/fs/cgroup/cgroup.controllers")["exit_code"] == 0
    if v2:
        memory = sh(client, limited, "cat /sys/fs/cgroup/memory.max")["stdout"]
        cpu = sh(client, limited, "cat /sys/fs/cgroup/cpu.max")["stdout"].split()
        assert (int(cpu[0]), int(cpu[1])) == (50000, 100000), cpu
        target = "/sys/fs/cgroup/memory.max"
    else:
        memory = sh(client, limited, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")["stdout"]
        quota = sh(client, limited, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
                                    "/sys/fs/cgroup/cpu/cpu.cfs_period_us")["stdout"].split()
        assert quota == ["50000", "100000"], quota
        target = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    assert int(memory) == 512 * MIB
    pids = sh(client, limited, "cat /sys/fs/cgroup/pids.max 2>/dev/null || "
                               "cat /sys/fs/cgroup/pids/pids.max")["stdout"]
    assert int(pids) > 0
    # Only the sandbox's own cgroup: the namespace's root, nothing of the host's above it.
    cgroup = sh(client, limited, "cat /proc/self/cgroup")["stdout"]
    for line in cgroup.splitlines():
        if any(c in line.split(":")[1].split(",") for c in ("memory", "pids", "cpu")):
            assert line.endswith(":/"), cgroup
    mounts = sh(client, limited, "grep ' /sys/fs/cgroup' /proc/self/mountinfo")["stdout"]
    assert all(" ro," in line for line in mounts.splitlines() if " - cgroup" in line), mounts
    # Neither root nor user can write, nor make it writable.
    for user in ("user", "root"):
        res = run(client, limited, cmd=f"echo 1073741824 > {target}", user=user)
        assert res["exit_code"] != 0, res
        assert "Read-only file system" in res["stderr"], res
        res = run(client, limited, cmd="mount -o remount,rw /sys/fs/cgroup; "
                                       "mount -o remount,rw /sys; touch /sys/x", user=user)
        assert res["exit_code"] != 0, res
    assert int(sh(client, limited, f"cat {target}")["stdout"]) == 512 * MIB


def test_nproc_follows_the_cpu_limit(client: httpx.Client, limited: str) -> None:
    """Half a CPU is one CPU to nproc (its CPU affinity), and to /sys/devices/system/cpu."""
    assert sh(client, limited, "nproc")["stdout"].strip() == "1"
    online = sh(client, limited, "cat /sys/devices/system/cpu/online")["stdout"].strip()
    assert online == "0", online


def test_node_sizes_its_heap_to_the_sandbox(client: httpx.Client, limited: str) -> None:
    """V8's heap limit follows the memory limit, far below the host's default of ~4 GiB."""
    if not has(client, limited, "node"):
        pytest.skip("node is not on the host's /usr, so not in the base template")
    heap = sh(client, limited, "node -e 'console.log(require(\"v8\")"
                               ".getHeapStatistics().heap_size_limit)'")["stdout"]
    assert int(heap) < 512 * MIB, heap
    total = sh(client, limited, "node -e 'console.log(require(\"os\").totalmem())'")["stdout"]
    assert int(total) == 512 * MIB, total


def test_java_sizes_its_heap_to_the_sandbox(client: httpx.Client, limited: str) -> None:
    """The JVM's MaxHeapSize is a quarter of 512 MiB, and an allocating loop is collected, not
    killed."""
    if not has(client, limited, "java"):
        pytest.skip("java is not on the host's /usr, so not in the base template")
    flags = sh(client, limited, "java -XX:+PrintFlagsFinal -version 2>/dev/null | "
                                "grep -w MaxHeapSize")["stdout"]
    max_heap = int(flags.split()[3])
    assert 100 * MIB <= max_heap <= 140 * MIB, flags
    # Compiled on the host: the sandbox's javac cannot find its resources (the JDK's conf
    # links to /etc/java-*, which the base template does not bind).
    program = (
        "public class Churn { public static void main(String[] a) {"
        " long sum = 0; for (int i = 0; i < 4000; i++) { byte[] b = new byte[1 << 20];"
        " b[i % b.length] = 1; sum += b.length; } System.out.println(sum >> 20); } }"
    )
    if shutil.which("javac") is None:
        pytest.skip("no javac on the host to compile the allocating program")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Churn.java").write_text(program)
        subprocess.run(["javac", "-d", tmp, str(Path(tmp) / "Churn.java")], check=True)
        compiled = (Path(tmp) / "Churn.class").read_bytes()
    r = client.put(f"/v1/sandboxes/{limited}/files/content", params={"path": "/tmp/Churn.class"},
                   content=compiled)
    assert r.status_code < 300, r.text
    res = sh(client, limited, "cd /tmp && java Churn", timeout=120)
    assert res["stdout"].strip() == "4000", res


def test_free_shows_the_memory_limit(client: httpx.Client, limited: str) -> None:
    """free -m and /proc/meminfo total the sandbox's 512 MiB."""
    free = sh(client, limited, "free -m")["stdout"].splitlines()
    total = int(free[1].split()[1])
    assert total == 512, free


def test_the_sandbox_json_says_the_view_is_on(client: httpx.Client, limited: str) -> None:
    """`limits_view` is true where lxcfs answers the sandbox's /proc files."""
    assert client.get(f"/v1/sandboxes/{limited}").json()["limits_view"] is True


def lxcfs_pid(data_dir: Path) -> int:
    return int((data_dir / "lxcfs.pid").read_text().strip())


def alive(pid: int) -> bool:
    """Running (a zombie its parent has not reaped yet is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


KEEP = ["--teardown-on-exit", "false"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_view_lives_through_a_daemon_restart(daemon_factory: Any, sig: int) -> None:
    """lxcfs outlives a daemon whose sandboxes do, the next daemon takes it over, the adopted
    sandbox's /proc/meminfo still answers, and the daemon that ends the last sandbox stops it."""
    d = daemon_factory(args=KEEP)
    with d.client() as c:
        sb = create_sandbox(c, limits=LIMITS)["id"]
        assert sh(c, sb, "head -1 /proc/meminfo")["stdout"].split()[1] == str(512 * 1024)
    pid = lxcfs_pid(d.data_dir)
    if sig == signal.SIGKILL:
        d.kill()
    else:
        assert d.stop(sig) == 0, d.log_tail()
    assert alive(pid), "lxcfs lives on for the sandbox"

    d2 = daemon_factory(data_dir=d.data_dir)  # tears down at its end
    with d2.client() as c:
        got = c.get(f"/v1/sandboxes/{sb}").json()
        assert got["status"] == "running" and got["limits_view"] is True, got
        assert sh(c, sb, "head -1 /proc/meminfo")["stdout"].split()[1] == str(512 * 1024)
        other = create_sandbox(c, limits={"memory_mb": 256})["id"]
        assert sh(c, other, "free -m")["stdout"].splitlines()[1].split()[1] == "256"
        assert lxcfs_pid(d.data_dir) == pid, "taken over, not started again"
    assert d2.stop() == 0, d2.log_tail()
    assert wait_until(lambda: not alive(pid), 5), "lxcfs ends with the last sandbox"
    assert f" {d.data_dir}/lxcfs " not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.xfail(strict=False, reason=(
    "known bug: in the full suite the first sandbox after lxcfs was SIGKILLed and restarted "
    "sometimes reads 'free: Unable to create meminfo structure', though the daemon's own read "
    "of the new mount's meminfo already answered (LimitsView::StartAndWait); the sandbox's read "
    "is answered for its cgroup, which the new lxcfs may not resolve yet"))
def test_a_dead_lxcfs_is_replaced(daemon_factory: Any) -> None:
    """lxcfs killed from the host: the next sandbox gets a new one, and its view."""
    d = daemon_factory()
    with d.client() as c:
        create_sandbox(c, limits=LIMITS)
        pid = lxcfs_pid(d.data_dir)
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: not alive(pid), 5)
        sb = create_sandbox(c, limits=LIMITS)
        assert sb["limits_view"] is True, sb
        assert sh(c, sb["id"], "free -m")["stdout"].splitlines()[1].split()[1] == "512"
        assert lxcfs_pid(d.data_dir) != pid


def test_without_lxcfs_sandboxes_still_work(daemon_factory: Any) -> None:
    """No lxcfs: sandboxes are made as before, with the host's /proc/meminfo and
    limits_view false; their cgroup still shows their limits."""
    d = daemon_factory(env={"SANDSTREAM_LXCFS": "/nonexistent/lxcfs"})
    with d.client() as c:
        sb = create_sandbox(c, limits=LIMITS)
        assert sb["limits_view"] is False, sb
        total_kib = int(sh(c, sb["id"], "head -1 /proc/meminfo")["stdout"].split()[1])
        assert total_kib > 512 * 1024
        assert sh(c, sb["id"], "nproc")["stdout"].strip() == "1"
    assert "lxcfs" in d.log_tail(200)
