"""E2B's code interpreter protocol against sandstream's own code contexts, in one sitting.

Starts its own sandstreamd (a free loopback port, a fresh temp data dir, egress off, teardown on
exit, a random API key), makes one sandbox with the unmodified `e2b_code_interpreter.Sandbox`
(E2B_API_URL / E2B_SANDBOX_URL pointing at the daemon) and attaches sandstream's own Python SDK
(sdk/python) to the same sandbox, then measures, the variants interleaved run by run so that
drift on a shared machine hits them alike:

  CI1  run_code("1+1") through the E2B SDK (POST /execute, JSON lines) beside the same cell through
       sandstream's SDK in the same context, `default-python` (POST .../contexts/default-python/run,
       SSE); GET /healthz on each side's own HTTP transport is the bare round trip.
  CI2  the time to the first `chart` result of `plt.plot([1,2,3]); plt.show()` through the E2B SDK,
       beside the same figure rendered to a PNG in memory by a cell that returns nothing.

Prints a table like sandstream-bench's: every figure beside a baseline of the same run and the
difference. Exits non-zero only when a figure could not be measured, never for a missed target.

  .venv/bin/python bench/code_interpreter.py --daemon build/bin/sandstreamd [--runs N] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
# The venv of `scripts/install-deps test`: E2B's packages as tests/requirements.txt pins them,
# sandstream's SDK installed from sdk/python (editable).
from e2b.api.client_sync import get_transport
from e2b_code_interpreter import Result, Sandbox
from e2b_code_interpreter.charts import LineChart

import sandstream

READY_RE = re.compile(r"listening on (http://127\.0\.0\.1:(\d+))")
START_SECONDS = 60.0
E2B_ENV_CLEARED = ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN", "E2B_HTTP_VERSION")
WIRE_TARGET_MS = 0.3
SLOW_CELL_S = 300  # the first import of matplotlib in a sandbox, on a loaded machine

CHART_CELL = "import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()"
# What the interpreter does to a figure left open at a cell's end, less sending it: the figure's
# own savefig with the same arguments (format png, bbox_inches="tight"), into memory; the cell
# returns nothing. Not pyplot's plt.savefig(): that one calls canvas.draw_idle() after saving,
# which on the Agg backend draws the figure a second time at once (about 1.5x the render).
PNG_CELL = ("plt.plot([1,2,3]); "
            "plt.gcf().savefig(io.BytesIO(), format='png', bbox_inches='tight'); plt.close('all')")
# The same PNG sent back as a result without a chart: the object's _repr_png_ (detail line).
PNG_RESULT_CELL = ("_b = io.BytesIO(); plt.plot([1,2,3]); "
                   "plt.gcf().savefig(_b, format='png', bbox_inches='tight'); plt.close('all'); "
                   "display(_BenchPng(_b.getvalue()))")
WARM_CELL = ("import io\nimport matplotlib.pyplot as plt\n"
             "class _BenchPng:\n"
             "    def __init__(self, data): self.data = data\n"
             "    def _repr_png_(self): return self.data\n"
             "    def __repr__(self): return '<png>'\n")


class Failed(Exception):
    """A figure could not be measured."""


# --- samples ----------------------------------------------------------------------------------


class Samples:
    """Latencies in ms; nearest-rank percentiles, as bench/stats.h computes them."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, ms: float) -> None:
        self.values.append(ms)

    def p(self, q: float) -> float:
        if not self.values:
            return float("nan")
        v = sorted(self.values)
        return v[min(int(q * (len(v) - 1) + 0.5), len(v) - 1)]

    def dist(self) -> str:
        return (f"p10 {self.p(0.1):.3f} p50 {self.p(0.5):.3f} p90 {self.p(0.9):.3f} "
                f"p99 {self.p(0.99):.3f} ms (n={len(self.values)})")


def tcp_active_opens() -> int:
    """The kernel's count of TCP connections this network namespace has opened (connect()):
    Tcp ActiveOpens of /proc/net/snmp. Machine-wide, so another program's would count too."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()
             if line.startswith("Tcp:")]
    return int(lines[1][lines[0].index("ActiveOpens")])


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e6


def paired_median(a: Samples, b: Samples) -> float:
    """The median of the run-by-run differences a - b (the pairs ran back to back)."""
    d = Samples()
    for x, y in zip(a.values, b.values):
        d.add(x - y)
    return d.p(0.5)


def differences(a: Samples, b: Samples) -> str:
    """The table's difference: of the p50s, and the median of the run-by-run differences."""
    return f"{a.p(0.5) - b.p(0.5):+.3f} ms (run by run {paired_median(a, b):+.3f})"


def orders(n: int) -> Iterator[list[int]]:
    """The order of the n variants in each run: a new random permutation every run (a fixed
    seed), so that each variant follows each other one alike and none always gets the tail of
    the same predecessor's work."""
    rng = random.Random(20261207)
    while True:
        order = list(range(n))
        rng.shuffle(order)
        yield order


# --- the daemon -------------------------------------------------------------------------------


class Daemon:
    """sandstreamd on 127.0.0.1:0 with a temp data dir, egress off and teardown on exit."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.key = "bench-" + secrets.token_hex(16)
        self.root = Path(tempfile.mkdtemp(prefix="sandstream-bench-ci."))
        self.log_path = self.root / "sandstreamd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.stdout: list[str] = []

    def start(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise Failed(f"no sandstreamd at {self.binary}")
        env = {**os.environ, "SANDSTREAM_API_KEY": self.key, "SANDSTREAM_EGRESS_POOL": "none"}
        cmd = [self.binary, "--listen", "127.0.0.1:0", "--data-dir", str(self.root / "data"),
               "--teardown-on-exit", "true", "--log-level", "warn"]
        with open(self.log_path, "ab") as log:
            # A session of its own: a group signal of the daemon's must not reach the bench.
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env,
                                         start_new_session=True)
        ready = threading.Event()

        def drain() -> None:  # keeps reading stdout so the daemon never blocks on the pipe
            assert self.proc is not None and self.proc.stdout is not None
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.stdout.append(line)
                m = READY_RE.search(line)
                if m and not ready.is_set():
                    self.url = m.group(1)
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + START_SECONDS
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Failed(f"sandstreamd did not start ({' '.join(cmd)}): stdout "
                             f"{self.stdout!r}; its log ends:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_ns(self) -> int:
        """The daemon's CPU time so far, in ns: the sum over its threads of the time on CPU
        that /proc/<pid>/task/<tid>/schedstat gives (exact, where /proc/<pid>/stat counts
        clock ticks). Its sandboxes' processes are not in it."""
        total = 0
        task_dir = f"/proc/{self.pid}/task"
        for tid in os.listdir(task_dir):
            try:
                with open(f"{task_dir}/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
        return total

    def sandbox_cpu_ns(self, sandbox_id: str) -> int | None:
        """The CPU time of a sandbox's processes so far, in ns, from its cgroup (cpuacct.usage
        on cgroup v1, cpu.stat's usage_usec on v2), which the daemon makes under its own as
        sandstream-<FNV-1a of its data dir>/<sandbox id>; None when there is none to read."""
        h = 2166136261
        for b in str(self.root / "data").encode():
            h = ((h ^ b) * 16777619) & 0xFFFFFFFF
        name = f"sandstream-{h:08x}"
        for line in Path(f"/proc/{self.pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            path = path.removesuffix(f"/{name}.daemon").lstrip("/")
            try:
                if controllers == "":
                    stat = (Path("/sys/fs/cgroup") / path / name / sandbox_id / "cpu.stat")
                    for entry in stat.read_text().splitlines():
                        if entry.startswith("usage_usec "):
                            return int(entry.split()[1]) * 1000
                elif "cpuacct" in controllers.split(","):
                    usage = (Path("/sys/fs/cgroup") / controllers / path / name / sandbox_id /
                             "cpuacct.usage")
                    return int(usage.read_text())
            except (OSError, ValueError):
                continue
        return None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # A daemon that could not stop gracefully leaves its lxcfs mounted in the data dir.
        lxcfs = self.root / "data" / "lxcfs"
        if str(lxcfs) in Path("/proc/self/mountinfo").read_text():
            subprocess.run(["umount", "-l", str(lxcfs)], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def e2b_environment(d: Daemon) -> Iterator[None]:
    """The three variables a user sets to point E2B's SDK at sandstream, nothing else."""
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY",
                                            *E2B_ENV_CLEARED)}
    os.environ.update({"E2B_API_URL": d.url, "E2B_SANDBOX_URL": d.url, "E2B_API_KEY": d.key})
    for k in E2B_ENV_CLEARED:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- the figures ------------------------------------------------------------------------------


class Report:
    def __init__(self) -> None:
        self.rows: list[list[str]] = []
        self.details: list[str] = []

    def row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def detail(self, text: str) -> None:
        self.details.append(text)

    def print(self) -> None:
        header = ["figure", "measured p50 (p90)", "baseline", "baseline p50 (p90)",
                  "difference", "target"]
        width = [max(len(r[i]) for r in [header, *self.rows]) for i in range(len(header))]

        def line(cells: list[str]) -> str:
            return " | ".join(c.ljust(w) for c, w in zip(cells, width)).rstrip()

        print(line(header))
        print("-+-".join("-" * w for w in width))
        for r in self.rows:
            print(line(r))
        print("\ndifference = measured p50 - baseline p50 (latency: lower is better); run by run: "
              "the median of the differences of the runs made back to back, steadier on a loaded "
              "machine.\n")
        for d in self.details:
            print(d)


def ms(s: Samples) -> str:
    return f"{s.p(0.5):.3f} ms ({s.p(0.9):.3f})"


def check_two(execution: Any, what: str) -> None:
    if execution.error is not None or execution.text != "2":
        raise Failed(f"{what}: run_code('1+1') gave text {execution.text!r}, "
                     f"error {execution.error!r}")


def run_code_figure(d: Daemon, e2b: Sandbox, ss: sandstream.Sandbox, runs: int, warmup: int,
                    report: Report) -> None:
    """CI1: run_code("1+1") through each SDK, and /healthz on each one's transport."""
    sid = e2b.sandbox_id
    e2b_http = httpx.Client(transport=get_transport(e2b.connection_config, http_version="1.1"))
    # An httpx client on httpx's own transport (httpcore), as sandstream's SDK makes it, but its
    # own: the SDK's pool is left to the SDK (whose run_code ends its connection, below).
    plain_http = httpx.Client(timeout=30)
    token = e2b._envd_access_token or ""
    execute_headers = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
                       "X-Access-Token": token, "E2B-Traffic-Access-Token": token}
    run_url = f"{d.url}/v1/sandboxes/{sid}/contexts/default-python/run"
    auth = {"Authorization": f"Bearer {d.key}"}

    def e2b_cell() -> None:
        check_two(e2b.run_code("1+1"), "E2B SDK")

    def ss_cell() -> None:
        check_two(ss.run_code("1+1", context="default-python"), "sandstream SDK")

    def healthz(client: httpx.Client) -> Callable[[], None]:
        def go() -> None:
            r = client.get(f"{d.url}/healthz")
            if r.status_code != 200:
                raise Failed(f"GET /healthz: {r.status_code} {r.text[:200]}")
        return go

    # The two wires without either SDK's parsing, on the same transport (httpx's own).
    def raw_execute() -> None:
        with plain_http.stream("POST", f"{d.url}/execute", json={"code": "1+1"},
                               headers=execute_headers) as r:
            body = r.read()
        if r.status_code != 200 or b'"text":"2"' not in body.replace(b" ", b""):
            raise Failed(f"POST /execute: {r.status_code} {body[:300]!r}")

    def raw_run() -> None:
        with plain_http.stream("POST", run_url, json={"code": "1+1"}, headers=auth) as r:
            body = r.read()
        if r.status_code != 200 or b"event: exit" not in body \
                or b'"text/plain":"2"' not in body.replace(b" ", b""):
            raise Failed(f"POST .../contexts/default-python/run: {r.status_code} {body[:300]!r}")

    labels = {"e2b": "E2B SDK run_code", "ss": "sandstream SDK run_code",
              "healthz_e2b": "GET /healthz, E2B SDK's transport",
              "healthz_ss": "GET /healthz, httpx (sandstream SDK's transport)",
              "raw_execute": "POST /execute, no SDK", "raw_run": "POST .../run (SSE), no SDK"}
    variants: list[tuple[str, Callable[[], None]]] = [
        ("e2b", e2b_cell), ("ss", ss_cell),
        ("healthz_e2b", healthz(e2b_http)), ("healthz_ss", healthz(plain_http)),
        ("raw_execute", raw_execute), ("raw_run", raw_run),
    ]
    for _ in range(warmup):
        for _, fn in variants:
            fn()
    samples = {name: Samples() for name, _ in variants}
    order = orders(len(variants))
    for _ in range(runs):
        for i in next(order):
            name, fn = variants[i]
            samples[name].add(timed(fn))
    # Then each variant alone, `alone` calls in a row: the daemon's CPU time per call (its
    # threads' schedstat; interleaved, a call's window would hold the tail of the previous
    # call's work) and the TCP connections each call opens (one per call puts a handshake and
    # the daemon's accept into its time).
    alone = max(20, runs // 5)
    cpu_ms: dict[str, float] = {}
    opens: dict[str, float] = {}
    for name, fn in variants:
        fn()
        opened, cpu = tcp_active_opens(), d.cpu_ns()
        for _ in range(alone):
            fn()
        cpu_ms[name] = (d.cpu_ns() - cpu) / alone / 1e6
        opens[name] = (tcp_active_opens() - opened) / alone
    e2b_http.close()
    plain_http.close()

    e2b_s, ss_s = samples["e2b"], samples["ss"]
    diff = e2b_s.p(0.5) - ss_s.p(0.5)
    met = "met" if diff <= WIRE_TARGET_MS else "missed"
    report.row("CI1 run_code(\"1+1\"), E2B SDK (/execute, JSON lines)", ms(e2b_s),
               "sandstream SDK run_code, same context (SSE)", ms(ss_s),
               differences(e2b_s, ss_s), f"<= +{WIRE_TARGET_MS} ms: {met}")
    hz_e, hz_s = samples["healthz_e2b"], samples["healthz_ss"]
    report.row("CI1b GET /healthz, E2B SDK's transport (pyqwest)", ms(hz_e),
               "GET /healthz, httpx as sandstream's SDK (httpcore)", ms(hz_s),
               differences(hz_e, hz_s), "-")
    rx, rr = samples["raw_execute"], samples["raw_run"]
    report.row("CI1c POST /execute \"1+1\", no SDK (httpcore)", ms(rx),
               "POST .../contexts/default-python/run, no SDK", ms(rr),
               differences(rx, rr), "-")

    report.detail(f"CI1: one sandbox (template code-interpreter via E2B's code-interpreter-v1), "
                  f"context default-python; {runs} runs of each of six variants after {warmup} "
                  "warm-ups, interleaved: one of each per run, in a new random order every run")
    for key, label in labels.items():
        report.detail(f"CI1: {label}: {samples[key].dist()}")
    # Where the SDKs' difference goes: the transport (as /healthz shows it), the daemon's two
    # wires (the raw requests on one transport), and the rest (each SDK's own client work).
    transport = hz_e.p(0.5) - hz_s.p(0.5)
    wire = rx.p(0.5) - rr.p(0.5)
    report.detail(
        f"CI1: the {diff:+.3f} ms split by p50s: transport {transport:+.3f} ms (CI1b), the "
        f"daemon's two wires {wire:+.3f} ms (CI1c), the SDKs' own client work "
        f"{diff - transport - wire:+.3f} ms (the rest)")
    report.detail(f"CI1: cell time less its transport's bare round trip (/healthz), p50: E2B SDK "
                  f"{e2b_s.p(0.5) - hz_e.p(0.5):.3f} ms, sandstream SDK "
                  f"{ss_s.p(0.5) - hz_s.p(0.5):.3f} ms")
    cpu_text = "; ".join(f"{label} {cpu_ms[key]:.3f} ms" for key, label in labels.items())
    report.detail(f"CI1: the daemon's CPU time per call ({alone} calls of each alone, its threads' "
                  f"schedstat; the sandbox's interpreter not in it): {cpu_text}")
    opened_text = "; ".join(f"{label} {opens[key]:.2f}" for key, label in labels.items())
    report.detail(f"CI1: TCP connections opened per call (the kernel's Tcp ActiveOpens over the "
                  f"same {alone} calls; 1: a handshake and the daemon's accept in every call): "
                  f"{opened_text}")


def chart_figure(d: Daemon, e2b: Sandbox, runs: int, warmup: int, report: Report) -> None:
    """CI2: time to the first chart result after plt.show(), beside rendering the PNG only."""
    t0 = [0]
    chart_at: list[float] = []
    png_at: list[float] = []

    def on_chart(r: Result) -> None:
        if r.chart is not None and not chart_at:
            chart_at.append((time.perf_counter_ns() - t0[0]) / 1e6)

    def on_png(r: Result) -> None:
        if r.png and not png_at:
            png_at.append((time.perf_counter_ns() - t0[0]) / 1e6)

    png_chars: list[int] = []

    def chart() -> tuple[float, float]:
        chart_at.clear()
        t0[0] = time.perf_counter_ns()
        ex = e2b.run_code(CHART_CELL, on_result=on_chart, timeout=SLOW_CELL_S)
        end = (time.perf_counter_ns() - t0[0]) / 1e6
        charts = [r for r in ex.results if r.chart is not None]
        if ex.error is not None or not chart_at or len(charts) != 1 \
                or not isinstance(charts[0].chart, LineChart) or not charts[0].png:
            raise Failed(f"chart cell: error {ex.error!r}, results "
                         f"{[r.formats() for r in ex.results]}")
        png_chars[:] = [len(charts[0].png)]
        return chart_at[0], end

    def png_only() -> float:
        start = time.perf_counter_ns()
        ex = e2b.run_code(PNG_CELL, timeout=SLOW_CELL_S)
        took = (time.perf_counter_ns() - start) / 1e6
        if ex.error is not None or ex.results:
            raise Failed(f"PNG cell: error {ex.error!r}, results "
                         f"{[r.formats() for r in ex.results]}")
        return took

    def png_result() -> float:
        png_at.clear()
        t0[0] = time.perf_counter_ns()
        ex = e2b.run_code(PNG_RESULT_CELL, on_result=on_png, timeout=SLOW_CELL_S)
        if ex.error is not None or not png_at or any(r.chart is not None for r in ex.results):
            raise Failed(f"PNG result cell: error {ex.error!r}, results "
                         f"{[r.formats() for r in ex.results]}")
        return png_at[0]

    warm = timed(lambda: e2b.run_code(WARM_CELL, timeout=SLOW_CELL_S))
    for _ in range(warmup):
        chart()
        png_only()
        png_result()
    first_chart, chart_end, png, png_res = Samples(), Samples(), Samples(), Samples()
    # The sandbox's CPU time per cell (its interpreter's, all of it done when run_code returns):
    # what the chart costs the sandbox, steadier than wall time on a loaded machine.
    cpu = [Samples(), Samples(), Samples()]
    sid = e2b.sandbox_id
    order = orders(3)
    for _ in range(runs):
        for v in next(order):
            before = d.sandbox_cpu_ns(sid)
            if v == 0:
                at, end = chart()
                first_chart.add(at)
                chart_end.add(end)
            elif v == 1:
                png.add(png_only())
            else:
                png_res.add(png_result())
            after = d.sandbox_cpu_ns(sid)
            if before is not None and after is not None:
                cpu[v].add((after - before) / 1e6)

    extra = first_chart.p(0.5) - png.p(0.5)
    paired = paired_median(first_chart, png)
    share = paired / first_chart.p(0.5) * 100 if first_chart.p(0.5) > 0 else float("nan")
    report.row("CI2 first chart result after plt.show(), E2B SDK", ms(first_chart),
               "the same plot to an in-memory PNG, nothing returned", ms(png),
               f"{differences(first_chart, png)}: {share:.1f} % of the chart's", "-")
    report.detail(f"CI2: cell {CHART_CELL!r} timed to on_result with a chart, against "
                  f"{PNG_CELL!r}; the interpreter renders a figure left open at the cell's end "
                  "with the same savefig, then extracts the chart (the chart's share is what it "
                  "adds to the render: base64, chart extraction, sending both)")
    report.detail(f"CI2: {runs} runs of each of three cells after {warmup} warm-ups, "
                  f"interleaved; the warm-up cell importing matplotlib took {warm:.0f} ms; the "
                  f"chart's PNG is {png_chars[0] if png_chars else 0} characters of base64")
    report.detail(f"CI2: first chart: {first_chart.dist()}")
    report.detail(f"CI2: the chart cell's run_code returning: {chart_end.dist()}")
    report.detail(f"CI2: PNG rendered, nothing returned: {png.dist()}")
    report.detail(f"CI2: the same PNG returned as a result without a chart (display of an "
                  f"object's _repr_png_), to on_result: {png_res.dist()}; so of the chart's "
                  f"{extra:+.3f} ms (run by run {paired:+.3f}), sending the PNG "
                  f"{png_res.p(0.5) - png.p(0.5):+.3f} ms (run by run "
                  f"{paired_median(png_res, png):+.3f}), the chart itself "
                  f"{first_chart.p(0.5) - png_res.p(0.5):+.3f} ms (run by run "
                  f"{paired_median(first_chart, png_res):+.3f})")
    if cpu[0].values:
        c_chart, c_png, c_res = (c.p(0.5) for c in cpu)
        report.detail(
            f"CI2: the sandbox's CPU time per cell (its cgroup's), p50: chart {c_chart:.3f} ms, "
            f"PNG only {c_png:.3f} ms, PNG result {c_res:.3f} ms; the chart's extra "
            f"{c_chart - c_png:+.3f} ms (run by run {paired_median(cpu[0], cpu[1]):+.3f}), "
            f"{(c_chart - c_png) / c_chart * 100:.1f} % of the chart cell's CPU")
    else:
        report.detail("CI2: the sandbox's CPU time per cell: no cgroup of it to read")


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    assert __doc__ is not None
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--daemon", required=True, help="the sandstreamd binary")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs of each variant of both figures "
                         "(default: 1000 for CI1, 100 for CI2)")
    ap.add_argument("--smoke", action="store_true",
                    help="3 runs of each after 3 (CI1) and 1 (CI2) warm-ups: a check that "
                         "everything can be measured")
    args = ap.parse_args()
    if args.runs is not None and args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.smoke:
        runs1 = runs2 = 3
        warm1, warm2 = 3, 1
    else:
        runs1 = args.runs or 1000
        runs2 = args.runs or 100
        warm1, warm2 = 20, 3

    binary = os.path.abspath(args.daemon)
    if not os.access(binary, os.X_OK):
        print(f"code_interpreter bench: no executable sandstreamd at {binary}", file=sys.stderr)
        return 1
    print(f"code_interpreter bench{' --smoke' if args.smoke else ''}: {binary} "
          f"({time.strftime('%Y-%m-%d %H:%M', time.localtime(os.path.getmtime(binary)))}), "
          f"{os.cpu_count()} cores, kernel {platform.release()}, e2b-code-interpreter "
          f"{_version('e2b-code-interpreter')}, e2b {_version('e2b')}, Python "
          f"{platform.python_version()}", flush=True)
    d = Daemon(binary)
    report = Report()
    failed = False
    try:
        d.start()
        with e2b_environment(d):
            print("measuring: creating the sandbox", file=sys.stderr, flush=True)
            e2b = Sandbox.create(timeout=3600)
            ss = sandstream.Sandbox.connect(e2b.sandbox_id, base_url=d.url, api_key=d.key)
            figures: list[tuple[str, Callable[[], None]]] = [
                ("CI1 run_code", lambda: run_code_figure(d, e2b, ss, runs1, warm1, report)),
                ("CI2 chart", lambda: chart_figure(d, e2b, runs2, warm2, report)),
            ]
            try:
                for label, figure in figures:
                    print(f"measuring: {label}", file=sys.stderr, flush=True)
                    try:
                        figure()
                    except Exception as e:  # reported; the other figure still runs
                        failed = True
                        print(f"FAILED {label}: {type(e).__name__}: {e}", file=sys.stderr)
                        report.detail(f"{label}: FAILED: {type(e).__name__}: {e}")
                        if not d.alive():
                            raise Failed("sandstreamd exited; its log ends:\n" + d.log_tail())
            finally:
                ss.close()
                if d.alive():
                    e2b.kill()
    except Exception as e:  # the sandbox or the daemon: nothing more to measure
        failed = True
        print(f"code_interpreter bench: {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        d.stop()
    print(f"\nruns: CI1 {runs1} of each variant, CI2 {runs2} of each cell\n")
    report.print()
    return 1 if failed else 0


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
