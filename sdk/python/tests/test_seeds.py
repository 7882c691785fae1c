"""The Python examples of the seed documents, run as written against sandstream.

Each snippet is cut from `shared/seeds/` at test time; the only edits are the import line and
the commands that need the internet (`git clone` of a GitHub repo, `pip install` from PyPI),
which point at local equivalents made here. Each snippet runs in its own Python process with
only SANDSTREAM_URL and SANDSTREAM_API_KEY telling it where the server is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandstream import Sandbox

from .conftest import API_KEY, REPO, Daemon, daemon_binary, start_daemon

SEEDS = REPO.parent / "shared" / "seeds"


def seed_text(prefix: str) -> str:
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        pytest.skip(f"the seed documents are not beside the repository ({SEEDS})")
    return found[0].read_text()


def cut(text: str, start: str, end: str) -> str:
    """The snippet from `start` up to (not including) the first `end` after it."""
    i = text.index(start)
    return text[i : text.index(end, i)].strip() + "\n"


def edit(snippet: str, old: str, new: str) -> str:
    assert snippet.count(old) == 1, f"expected exactly one {old!r} in the snippet"
    return snippet.replace(old, new)


def as_sandstream(snippet: str) -> str:
    return edit(snippet, "from pandastack import Sandbox", "from sandstream import Sandbox")


def run_snippet(code: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDSTREAM_")}
    env.update(SANDSTREAM_URL=url, SANDSTREAM_API_KEY=API_KEY)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def wheel_bytes(name: str, version: str) -> bytes:
    """A minimal pure-Python wheel: the offline stand-in for a package from PyPI."""
    files = {
        f"{name}/__init__.py": f'"""Local stand-in for {name}."""\n__version__ = "{version}"\n'.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandstream-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files[f"{name}-{version}.dist-info/RECORD"] = (record + f"{name}-{version}.dist-info/RECORD,,\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return out.getvalue()


def git_repo_tarball(directory: Path) -> bytes:
    """A local stand-in for github.com/acme/api, as a bare repository in a tar.gz: a Node
    project whose `npm ci && npm run build` needs no network."""
    work = directory / "api-src"
    work.mkdir()
    (work / "package.json").write_text(
        '{"name": "api", "version": "1.0.0", "private": true, "scripts": {"build": "node build.js"}}\n'
    )
    (work / "package-lock.json").write_text(
        '{"name": "api", "version": "1.0.0", "lockfileVersion": 3, "requires": true,'
        ' "packages": {"": {"name": "api", "version": "1.0.0"}}}\n'
    )
    (work / ".npmrc").write_text("offline=true\naudit=false\nfund=false\nupdate-notifier=false\ncache=.npm-cache\n")
    (work / "build.js").write_text('console.log("built acme/api");\n')
    git = ["git", "-c", "user.name=sandstream", "-c", "user.email=tests@sandstream.invalid"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "api"], check=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(directory / "api.git")], check=True)
    shutil.rmtree(directory / "api.git" / "hooks")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        tar.add(directory / "api.git", arcname="api.git")
    return out.getvalue()


def unpack_command(data: bytes, then: str) -> str:
    """A shell command that recreates `data` in the sandbox's working directory, then runs `then`.

    The stand-ins travel inside the command because the sandbox may not see the host's files.
    """
    return f"echo {base64.b64encode(data).decode()} | base64 -d {then}"


@pytest.fixture
def private_work_daemon(
    daemon: Daemon, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A server on which `/work` inside a sandbox is empty, as seed 001 assumes.

    Without namespace isolation a sandbox sees the host's `/work`; then a second daemon runs
    in a private mount namespace with an empty tmpfs on `/work` (and a copy of its binary,
    which may itself live under `/work`).
    """
    with Sandbox.create() as probe:
        host_work_visible = probe.exec('[ -n "$(ls -A /work 2>/dev/null)" ]').exit_code == 0
    if not host_work_visible:
        yield daemon.url
        return
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("sandboxes see the host's /work and no private mount namespace can be made")
    exe = daemon_binary()
    assert exe is not None
    base = tmp_path_factory.mktemp("private-work")
    copy = base / "sandstreamd"
    shutil.copy2(exe, copy)
    prefix = [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", 'mount -t tmpfs tmpfs /work && exec "$@"', "sh",
    ]
    d = start_daemon(base / "data", argv_prefix=prefix, binary=copy)
    try:
        yield d.url
    finally:
        d.stop()


def test_seed_001_callbacks_example(private_work_daemon: str, tmp_path: Path) -> None:
    text = seed_text("001")
    snippet = as_sandstream(cut(text, "from pandastack import Sandbox", "Two things to notice."))
    local_clone = unpack_command(
        git_repo_tarball(tmp_path), '| tar -xz && git clone --depth 1 file://$PWD/api.git /work'
    )
    snippet = edit(snippet, "git clone --depth 1 https://github.com/acme/api /work", local_clone)
    result = run_snippet(snippet, private_work_daemon, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "built acme/api" in result.stdout


def test_seed_001_chunks_are_not_lines(daemon: Daemon, tmp_path: Path) -> None:
    snippet = cut(seed_text("001"), 'buffer = ""', "The same rule applies")
    code = (
        "from sandstream import Sandbox\n"
        "lines = []\n"
        "def handle_line(line):\n"
        "    lines.append(line)\n"
        + snippet
        + "with Sandbox.create() as sb:\n"
        "    sb.exec_stream(\"printf 'hel'; sleep 0.2; printf 'lo\\\\nwor'; sleep 0.2; printf 'ld\\\\n'\", on_stdout=on_out)\n"
        "assert lines == ['hello', 'world'], lines\n"
        "print('lines ok')\n"
    )
    result = run_snippet(code, daemon.url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lines ok" in result.stdout


def test_seed_003_build_example(daemon: Daemon, tmp_path: Path) -> None:
    text = seed_text("003")
    snippet = as_sandstream(cut(text, "import shlex", 'import { Sandbox } from "@pandastack/sdk";'))
    wheel = "rich-13.7.1-py3-none-any.whl"
    local_install = unpack_command(
        wheel_bytes("rich", "13.7.1"),
        f"> {wheel} && pip install --quiet --no-cache-dir --no-index --target .deps ./{wheel}",
    )
    snippet = edit(snippet, "pip install --quiet rich", local_install)
    result = run_snippet(snippet, daemon.url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("== installing ==\n== building ==\nstep 1/5\n"), result.stdout
    assert "step 5/5\n== done ==\n" in result.stdout
    assert result.stdout.endswith("\nbuild exited with code 0\n")


def test_seed_003_build_example_reports_failure(daemon: Daemon, tmp_path: Path) -> None:
    text = seed_text("003")
    snippet = as_sandstream(cut(text, "import shlex", 'import { Sandbox } from "@pandastack/sdk";'))
    # The same example when the install step fails: `set -e` stops it and the code is non-zero.
    snippet = edit(snippet, "pip install --quiet rich", "pip install --quiet --no-index rich-not-here")
    result = run_snippet(snippet, daemon.url, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "build exited with code 1" in result.stdout
    assert "== building ==" not in result.stdout


def test_seed_003_capturing_while_streaming(daemon: Daemon, tmp_path: Path) -> None:
    snippet = cut(seed_text("003"), "buf = []", "const buf")
    task = "import time\nfor i in range(3):\n    print(f'epoch {i}')\n    time.sleep(0.2)\n"
    code = (
        "from sandstream import Sandbox\n"
        # The seed's `python` is python3 here; a relative PATH entry finds ./bin/python in the
        # sandbox's working directory, whichever runtime the daemon uses.
        "sandbox = Sandbox.create(template='code-interpreter', env={'PATH': 'bin:/usr/local/bin:/usr/bin:/bin'})\n"
        "sandbox.exec('mkdir -p bin && ln -sf \"$(command -v python3)\" bin/python', check=True)\n"
        f"sandbox.exec('cat > long_task.py', stdin={task!r}, check=True)\n"
        + snippet
        + "sandbox.kill()\n"
        "assert full_output == 'epoch 0\\nepoch 1\\nepoch 2\\n', repr(full_output)\n"
        "assert exit_code == 0\n"
    )
    result = run_snippet(code, daemon.url, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "epoch 0\nepoch 1\nepoch 2\n"
