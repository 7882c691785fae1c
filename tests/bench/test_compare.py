"""bench/compare: its aggregation and report from hand-made rows, the choice between a binary and a
revision and the build it would run, the runs against a stand-in bench, and one real comparison
of the dev build's daemon with itself (root and the dev build's binaries, else skipped)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "compare"


def load_script() -> ModuleType:
    """bench/compare as a module (it has no .py suffix, so no plain import finds it)."""
    loader = importlib.machinery.SourceFileLoader("bench_compare", str(SCRIPT))
    spec = importlib.util.spec_from_loader("bench_compare", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compare"] = module  # dataclasses look their module up here
    loader.exec_module(module)
    return module


compare = load_script()


def row(figure: str, ratio: float | None, value: str = "1.00 ms (1.20 ms)") -> dict[str, Any]:
    return {"figure": figure, "value": value, "baseline": "the baseline", "baseline_value": "1 ms",
            "ratio_text": "-" if ratio is None else f"{ratio:.2f}x", "ratio": ratio, "target": "-"}


def one(a: list[float | None], b: list[float | None], figure: str = "1. exec",
        value: str = "1.00 ms (1.20 ms)") -> Any:
    """The comparison of one figure whose rounds had these ratios on each side."""
    [c] = compare.compare([[row(figure, r, value)] for r in a],
                          [[row(figure, r, value)] for r in b])
    return c


# --- aggregation --------------------------------------------------------------------------------


def test_median_spread_and_change() -> None:
    c = one([1.2, 1.0, 1.1, 5.0, 1.15], [1.3, 1.25, 1.4, 1.35, 1.3])
    assert compare.ratio_cell(c.a, 5) == "1.15x (1.00-5.00)"
    assert compare.ratio_cell(c.b, 5) == "1.30x (1.25-1.40)"
    assert compare.change_percent(1.15, 1.30) == pytest.approx(13.04, abs=0.01)
    assert compare.change_percent(0.0, 1.0) is None
    assert compare.verdict(c) == "noise"  # A's 5.00 round reaches over B's whole range


def test_ranges_that_touch_are_noise() -> None:
    assert compare.verdict(one([1.0, 1.2], [1.2, 1.4])) == "noise"


def test_latency_rows_are_faster_or_slower() -> None:
    assert compare.verdict(one([1.0, 1.1], [1.2, 1.3])) == "slower"
    assert compare.verdict(one([1.2, 1.3], [1.0, 1.1])) == "faster"
    assert compare.verdict(one([1.2], [1.0], value="250.0 us (300.1 us)")) == "faster"


def test_throughput_rows_are_better_when_higher() -> None:
    gibps = "0.92 GiB/s (0.85)"
    assert compare.verdict(one([0.70, 0.72], [0.80, 0.85], value=gibps)) == "better"
    assert compare.verdict(one([0.80, 0.85], [0.70, 0.72], value=gibps)) == "worse"
    rate = "5123 cmd/s (4900)"
    assert compare.verdict(one([1.1], [1.3], value=rate)) == "better"
    # The label alone can say it.
    label = "3. stream throughput"
    assert compare.verdict(one([1.1], [1.3], figure=label, value="0.9")) == "better"


def test_other_rows_are_better_when_lower() -> None:
    kib = "12.5 KiB (daemon)"
    assert compare.verdict(one([1.5, 1.6], [1.2, 1.3], figure="5e. rss", value=kib)) == "better"
    assert compare.verdict(one([1.2, 1.3], [1.5, 1.6], figure="5e. rss", value=kib)) == "worse"
    assert compare.verdict(one([1.0], [1.1], figure="12. soak: descriptors", value="14")) == "worse"


def test_kinds_read_from_the_value_cell() -> None:
    assert compare.main_value("1.59 ms (1.80 ms)") == "1.59 ms"
    assert compare.is_latency("1.59 ms (1.80 ms)")
    assert compare.is_latency("2.31 s")
    assert not compare.is_latency("12.5 KiB (daemon)")
    assert not compare.higher_is_better("1. exec", "1.59 ms (1.80 ms)")
    assert compare.higher_is_better("8a. port", "0.50 GiB/s (0.40)")


def test_rounds_without_a_ratio_are_counted() -> None:
    c = one([1.0, None, 1.2], [1.1, 1.1, 1.1])
    assert c.numeric
    assert compare.ratio_cell(c.a, 3) == "1.10x (1.00-1.20) [2 of 3]"


def test_order_follows_the_bench_across_sides() -> None:
    a = [[row("1", 1.0), row("2", 1.0), row("4", 1.0)]]
    b = [[row("1", 1.0), row("3", 1.0), row("4", 1.0)]]
    assert [c.figure for c in compare.compare(a, b)] == ["1", "2", "3", "4"]


def test_report() -> None:
    a = [[row("1. exec", 1.50), row("3a. stream", 0.80, "0.90 GiB/s (0.80)"),
          row("11c. placement", None, "2.0% off even"), row("5c. gone", 2.0, "1.0 KiB")],
         [row("1. exec", 1.60), row("3a. stream", 0.82, "0.91 GiB/s (0.80)"),
          row("11c. placement", None, "3.0% off even"), row("5c. gone", 2.1, "1.0 KiB")]]
    b = [[row("1. exec", 1.20), row("3a. stream", 0.81, "0.90 GiB/s (0.80)"),
          row("11c. placement", None, "1.0% off even"), row("13. new", 0.5)],
         [row("1. exec", 1.25), row("3a. stream", 0.83, "0.92 GiB/s (0.80)"),
          row("11c. placement", None, "4.0% off even"), row("13. new", 0.6)]]
    text = compare.report(compare.compare(a, b), 2)
    lines = text.splitlines()
    assert lines[0].split(" | ") == ["figure    ", "A ratio          ", "B ratio          ",
                                     "B vs A", "verdict"]
    assert lines[2] == "1. exec    | 1.55x (1.50-1.60) | 1.23x (1.20-1.25) | -21.0% | faster"
    assert lines[3] == "3a. stream | 0.81x (0.80-0.82) | 0.82x (0.81-0.83) | +1.2%  | noise"
    assert "  11c. placement" in lines
    assert "    A: 2.0% off even [-], 3.0% off even [-]" in lines
    assert "    B: 1.0% off even [-], 4.0% off even [-]" in lines
    assert "only in A (value [ratio] per round):" in lines
    assert "  5c. gone: 1.0 KiB [2.00x], 1.0 KiB [2.10x]" in lines
    assert "only in B (value [ratio] per round):" in lines
    assert "  13. new: 1.00 ms (1.20 ms) [0.50x], 1.00 ms (1.20 ms) [0.60x]" in lines
    # A ratio on one side only is not compared, but listed.
    text = compare.report(compare.compare([[row("9c. dns", None)]], [[row("9c. dns", 1.1)]]), 1)
    assert text.splitlines()[:3] == ["", "without a ratio on one side or both (value [ratio] per "
                                     "round):", "  9c. dns"]


# --- the two sides ------------------------------------------------------------------------------


SHA = "0123456789abcdef0123456789abcdef01234567"


def test_a_file_is_a_binary(tmp_path: Path) -> None:
    daemon = tmp_path / "sandstreamd"
    daemon.write_text("")
    side = compare.plan_side(str(daemon), tmp_path, resolve=lambda rev: pytest.fail("asked git"))
    assert (side.daemon, side.sha, side.build) == (daemon, None, [])


def test_a_revision_is_built_in_its_worktree(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    side = compare.plan_side("main", tmp_path, resolve={"main": SHA}.get, jobs=2)
    worktree = tmp_path / "build" / "compare" / SHA
    assert side.sha == SHA
    assert side.daemon == worktree / "build" / "bin" / "sandstreamd"
    assert [(c.argv, c.cwd) for c in side.build] == [
        (["git", "worktree", "add", "--detach", str(worktree), SHA], tmp_path),
        (["cmake", "--preset", "release", "-DSANDSTREAM_TESTS=OFF", "-DSANDSTREAM_BENCH=OFF"],
         worktree),
        (["cmake", "--build", "build/release", "--target", "sandstreamd", "-j2"], worktree)]
    assert side.describe() == f"main ({SHA[:12]}, {side.daemon})"
    monkeypatch.chdir(tmp_path)
    assert side.describe() == f"main ({SHA[:12]}, build/compare/{SHA}/build/bin/sandstreamd)"


def test_a_revision_keeps_its_worktree_and_build(tmp_path: Path) -> None:
    worktree = tmp_path / "build" / "compare" / SHA
    worktree.mkdir(parents=True)
    side = compare.plan_side("main", tmp_path, resolve={"main": SHA}.get, jobs=2)
    assert [c.argv[:2] for c in side.build] == [["cmake", "--preset"], ["cmake", "--build"]]
    (worktree / "build" / "bin").mkdir(parents=True)
    (worktree / "build" / "bin" / "sandstreamd").write_text("")
    assert compare.plan_side("main", tmp_path, resolve={"main": SHA}.get).build == []


def test_neither_file_nor_revision(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="neither a file nor a git revision"):
        compare.plan_side(str(tmp_path / "missing"), tmp_path, resolve=lambda rev: None)


def test_rev_parse_in_this_repository() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    head = compare.rev_parse(REPO, "HEAD")
    assert head is not None and len(head) == 40
    assert compare.rev_parse(REPO, "no-such-revision-of-sandstream") is None


def test_arguments() -> None:
    args = compare.parse_args(["--only", "1,4", "--quick", "a", "b"])
    assert (args.rounds, args.only, args.quick, args.a, args.b) == (5, "1,4", True, "a", "b")
    for bad in (["--only", "1;4", "a", "b"], ["--rounds", "0", "a", "b"], ["a"]):
        with pytest.raises(SystemExit):
            compare.parse_args(bad)
    assert compare.bench_argv(Path("/b"), Path("/d"), Path("/j"), "1", True) == [
        "/b", "--daemon", "/d", "--json", "/j", "--only", "1", "--quick"]


# --- runs ---------------------------------------------------------------------------------------


# Writes one row whose ratio is read from the daemon "binary" (a text file), as --json does; a
# daemon file that says "fail" makes it fail as the bench does.
FAKE_BENCH = """#!/usr/bin/env python3
import json, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
text = open(args["--daemon"]).read().strip()
if text == "fail":
    sys.stderr.write("measuring: 1. exec warm\\nFAILED 1. exec warm: the daemon died\\n")
    sys.exit(1)
with open(args["--json"], "w") as f:
    f.write(json.dumps({"figure": "1. exec", "value": "1.00 ms (1.10 ms)", "baseline": "b",
                        "baseline_value": "0.5 ms", "ratio_text": text + "x",
                        "ratio": float(text), "target": "-"}) + "\\n")
"""


def fake(tmp_path: Path, a: str, b: str) -> list[str]:
    bench = tmp_path / "bench"
    bench.write_text(FAKE_BENCH)
    bench.chmod(0o755)
    for name, text in (("a", a), ("b", b)):
        (tmp_path / name).write_text(text)
    return ["--bench", str(bench), str(tmp_path / "a"), str(tmp_path / "b")]


def test_runs_alternate_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["--rounds", "2", *fake(tmp_path, "2.00", "1.00")]) == 0
    out, err = capsys.readouterr()
    assert [line.split(" ... ")[0] for line in err.splitlines()] == [
        "bench/compare: run 1/4: A, round 1 of 2", "bench/compare: run 2/4: B, round 1 of 2",
        "bench/compare: run 3/4: A, round 2 of 2", "bench/compare: run 4/4: B, round 2 of 2"]
    assert "1. exec | 2.00x (2.00-2.00) | 1.00x (1.00-1.00) | -50.0% | faster" in out


def test_a_failed_run_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["--rounds", "3", *fake(tmp_path, "1.00", "fail")]) == 1
    out, err = capsys.readouterr()
    assert "run 2/6: B, round 1 of 3 ... failed after" in err
    assert "failed, exit status 1: " in err
    assert "  FAILED 1. exec warm: the daemon died" in err
    assert "run 3/6" not in err
    assert "1. exec |" not in out


# --- the real bench -----------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_dev_build_against_itself() -> None:
    """One quick round of figure 1 with the dev build's daemon on both sides."""
    daemon = Path(os.environ.get("SANDSTREAM_BIN", REPO / "build/dev/bin/sandstreamd"))
    bench = REPO / "build/dev/bin/sandstream-bench"
    if os.geteuid() != 0:
        pytest.skip("the bench's namespace runtime needs root")
    if not daemon.is_file() or not bench.is_file():
        pytest.skip(f"needs {daemon} and {bench} (cmake --build --preset dev)")
    p = subprocess.run([str(SCRIPT), "--rounds", "1", "--quick", "--only", "1", "--bench",
                        str(bench), str(daemon), str(daemon)],
                       capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr
    assert "run 2/2: B, round 1 of 1" in p.stderr
    [line] = [line for line in p.stdout.splitlines() if line.startswith("1. exec")]
    cells = [cell.strip() for cell in line.split(" | ")]
    assert len(cells) == 5 and cells[1].endswith(")") and cells[3].endswith("%")
    assert cells[4] in ("noise", "faster", "slower")
