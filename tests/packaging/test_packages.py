"""The packages a user installs, built from this checkout and used outside it, against the real
daemon: the Python SDK's wheel and sdist (each in a fresh virtual environment), the TypeScript
SDK's npm tarball (in a fresh directory, its type declarations compiled against), and
`cmake --install` of the daemon and the CLI into a temporary prefix. Every one says VERSION.

Needs the network: pip and npm fetch the SDKs' dependencies as a user's install would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from conftest import REPO, VERSION
from helpers import API_KEY, Daemon

pytestmark = pytest.mark.timeout(600)

# The build `cmake --install` installs from: the dev preset's, as scripts/test builds it.
BUILD_DIR = Path(os.environ.get("SANDSTREAM_BUILD_DIR", str(REPO / "build" / "dev")))
TS_SDK = REPO / "sdk" / "typescript"

# The same steps in both SDKs: create, run a command with streaming, read its output and exit
# code, delete; then report what happened as one JSON line.
COMMAND = "echo out; sleep 0.2; echo err >&2; exit 3"

PYTHON_SMOKE = f"""
import json, sys
import sandstream
from sandstream import Sandbox

stdout, stderr = [], []
with Sandbox.create() as sb:
    code = sb.exec_stream({COMMAND!r}, on_stdout=stdout.append, on_stderr=stderr.append)
    sandbox_id = sb.id
print(json.dumps({{"version": sandstream.__version__, "file": sandstream.__file__,
                  "prefix": sys.prefix, "sandbox": sandbox_id, "exit_code": code,
                  "stdout": "".join(stdout), "stderr": "".join(stderr)}}))
"""

TYPESCRIPT_SMOKE = f"""
import {{ Sandbox, VERSION }} from "sandstream";

const stdout: string[] = [];
const stderr: string[] = [];
const sb = await Sandbox.create();
const exitCode: number = await sb.execStream({json.dumps(COMMAND)}, {{
  onStdout: (chunk) => stdout.push(chunk),
  onStderr: (chunk) => stderr.push(chunk),
}});
await sb.kill();
console.log(JSON.stringify({{
  version: VERSION, resolved: import.meta.resolve("sandstream"), sandbox: sb.id, exitCode,
  stdout: stdout.join(""), stderr: stderr.join(""),
}}));
"""


def sh(argv: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None,
       timeout: float = 300) -> str:
    """Runs a command to completion; fails the test with its output if it fails."""
    r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{argv} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


def client_env(daemon: Daemon) -> dict[str, str]:
    """The environment of a user's program: the daemon's URL and key, nothing of this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NODE_PATH", "VIRTUAL_ENV")}
    return {**env, "SANDSTREAM_URL": daemon.url, "SANDSTREAM_API_KEY": API_KEY}


def check_smoke(report: dict[str, object], daemon: Daemon) -> None:
    """The command's output arrived apart, its exit code with it, and the sandbox is gone."""
    assert report["version"] == VERSION
    assert report["stdout"] == "out\n" and report["stderr"] == "err\n", report
    assert report.get("exit_code", report.get("exitCode")) == 3, report
    with daemon.client() as c:
        assert c.get(f"/v1/sandboxes/{report['sandbox']}").status_code == 404


# ---- Python: wheel and sdist ----

@pytest.fixture(scope="module")
def python_dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`python -m build`: the sdist, then the wheel built from it."""
    out = tmp_path_factory.mktemp("python-dist")
    sh([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO / "sdk" / "python"])
    return {"wheel": only(list(out.glob("*.whl"))), "sdist": only(list(out.glob("*.tar.gz")))}


def test_wheel_and_sdist_hold_the_package_its_version_and_licence(
        python_dists: dict[str, Path]) -> None:
    wheel, sdist = python_dists["wheel"], python_dists["sdist"]
    assert wheel.name == f"sandstream-{VERSION}-py3-none-any.whl"
    assert sdist.name == f"sandstream-{VERSION}.tar.gz"
    licence = (REPO / "LICENSE").read_text()
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"sandstream-{VERSION}.dist-info"
        assert {"sandstream/__init__.py", "sandstream/py.typed", "sandstream/aio.py"} <= names
        assert z.read(f"{info}/licenses/LICENSE").decode() == licence
        metadata = z.read(f"{info}/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    with tarfile.open(sdist) as t:
        root = f"sandstream-{VERSION}"
        names = set(t.getnames())
        assert {f"{root}/pyproject.toml", f"{root}/src/sandstream/_version.py"} <= names
        member = t.extractfile(f"{root}/LICENSE")
        assert member is not None and member.read().decode() == licence


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_python_package_installs_and_streams(kind: str, python_dists: dict[str, Path],
                                             daemon: Daemon, tmp_path: Path) -> None:
    """pip installs it into a fresh virtual environment; a program there runs a command."""
    venv = tmp_path / "venv"
    sh([sys.executable, "-m", "venv", venv])
    sh([venv / "bin" / "pip", "install", "-q", "--disable-pip-version-check", python_dists[kind]])
    (tmp_path / "smoke.py").write_text(PYTHON_SMOKE)
    out = sh([venv / "bin" / "python", "smoke.py"], cwd=tmp_path, env=client_env(daemon))
    report = json.loads(out.splitlines()[-1])
    # The installed package, never the checkout's sources.
    assert Path(report["file"]).is_relative_to(venv), report["file"]
    check_smoke(report, daemon)


# ---- TypeScript: the npm tarball ----

@pytest.fixture(scope="module")
def npm_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`npm pack`, whose prepack builds dist/ afresh."""
    if not (TS_SDK / "node_modules" / ".bin" / "tsc").exists():
        sh(["npm", "ci", "--no-audit", "--no-fund"], cwd=TS_SDK)
    out = tmp_path_factory.mktemp("npm-pack")
    sh(["npm", "pack", "--pack-destination", out], cwd=TS_SDK)
    return only(list(out.glob("*.tgz")))


def test_npm_tarball_holds_the_build_its_types_and_licence(npm_tarball: Path) -> None:
    assert npm_tarball.name == f"sandstream-{VERSION}.tgz"
    with tarfile.open(npm_tarball) as t:
        names = set(t.getnames())
        package = t.extractfile("package/package.json")
        licence = t.extractfile("package/LICENSE")
        assert package is not None and licence is not None
        manifest = json.loads(package.read())
        assert licence.read().decode() == (REPO / "LICENSE").read_text()
    assert manifest["version"] == VERSION and manifest["license"] == "Apache-2.0"
    for entry in ("dist/index.js", "dist/index.d.ts", "dist/version.js", "dist/version.d.ts",
                  "README.md"):
        assert f"package/{entry}" in names, entry
    assert not [n for n in names if n.startswith(("package/test", "package/node_modules"))]


def test_npm_package_installs_type_checks_and_streams(npm_tarball: Path, daemon: Daemon,
                                                      tmp_path: Path) -> None:
    """npm installs it into a fresh directory; a TypeScript program there compiles against its
    declarations and runs a command."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "smoke", "private": True, "type": "module"}))
    sh(["npm", "install", "--no-audit", "--no-fund", npm_tarball], cwd=app)
    (app / "smoke.ts").write_text(TYPESCRIPT_SMOKE)
    # The SDK's own compiler and Node types; the package itself from the app's node_modules.
    (app / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {
            "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
            "lib": ["ES2023", "ESNext.Disposable"], "strict": True, "skipLibCheck": False,
            "types": ["node"], "typeRoots": [str(TS_SDK / "node_modules" / "@types")],
        },
        "files": ["smoke.ts"],
    }))
    sh(["node", TS_SDK / "node_modules" / "typescript" / "bin" / "tsc", "-p", app], cwd=app)
    out = sh(["node", "smoke.js"], cwd=app, env=client_env(daemon))
    report = json.loads(out.splitlines()[-1])
    assert report["resolved"].startswith((app / "node_modules" / "sandstream").as_uri()), report
    check_smoke(report, daemon)


# ---- The daemon and the CLI: cmake --install ----

@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`cmake --install` of the build into a temporary prefix."""
    if not (BUILD_DIR / "CMakeCache.txt").is_file():
        pytest.fail(f"no build in {BUILD_DIR} (cmake --preset dev; or set SANDSTREAM_BUILD_DIR)")
    root = tmp_path_factory.mktemp("install") / "usr"
    sh(["cmake", "--install", BUILD_DIR, "--prefix", root])
    return root


def test_install_lays_out_binaries_unit_console_and_notices(prefix: Path) -> None:
    for name in ("sandstreamd", "sandstream"):
        assert os.access(prefix / "bin" / name, os.X_OK), name
    unit = (prefix / "lib" / "systemd" / "system" / "sandstreamd.service").read_text()
    assert "\nExecStart=" in unit and "/sandstreamd\n" in unit and "@" not in unit
    for name in ("LICENSE", "NOTICE", "THIRD_PARTY.md", "README.md", "CHANGELOG.md"):
        installed = prefix / "share" / "doc" / "sandstream" / name
        assert installed.read_text() == (REPO / name).read_text(), name
    if (REPO / "web" / "dist" / "index.html").is_file():
        assert (prefix / "share" / "sandstream" / "web" / "index.html").is_file()


def test_installed_binaries_print_the_version(prefix: Path) -> None:
    assert sh([prefix / "bin" / "sandstreamd", "--version"]) == f"sandstreamd {VERSION}\n"
    assert sh([prefix / "bin" / "sandstream", "--version"]) == f"sandstream {VERSION}\n"


def test_installed_daemon_and_cli_run_a_command(prefix: Path, tmp_path: Path) -> None:
    """The installed sandstreamd serves (the console too, when web/ is built); the installed CLI
    runs a command through it."""
    d = Daemon(tmp_path / "data", [], {}, tmp_path / "sandstreamd.log",
               binary=str(prefix / "bin" / "sandstreamd"))
    d.start()
    try:
        assert httpx.get(f"{d.url}/healthz").json()["version"] == VERSION
        page = prefix / "share" / "sandstream" / "web" / "index.html"
        if page.is_file():
            r = httpx.get(f"{d.url}/")
            assert r.status_code == 200 and r.text == page.read_text()
        r = subprocess.run([prefix / "bin" / "sandstream", "--url", d.url, "--key", API_KEY,
                            "run", "--", "sh", "-c", COMMAND],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
        with d.client() as c:
            assert c.get("/v1/sandboxes").json()["sandboxes"] == []
    finally:
        d.stop()
