"""Per-sandbox resource metrics: `GET /v1/sandboxes/{id}/metrics` (CPU, memory and disk samples
taken every `metrics_interval_seconds`), its `start`/`end` window, E2B's metrics routes, and the
per-sandbox gauges of `/metrics` behind `metrics_per_sandbox`. The daemons here sample every
0.2 s; E2B's SDK reads the same samples in test_e2b.py."""

from __future__ import annotations

import re
import secrets
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import API_KEY, BIN, Daemon, assert_error, create_sandbox, wait_until

INTERVAL = {"SANDSTREAM_METRICS_INTERVAL_SECONDS": "0.2"}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SAMPLE_KEYS = {"timestamp", "cpu_used_pct", "memory_used_bytes", "memory_cache_bytes",
               "disk_used_bytes"}
E2B_KEYS = {"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal",
            "memCache", "diskUsed", "diskTotal"}
MB = 1 << 20
GAUGES = ("sandstream_sandbox_cpu_used_percent", "sandstream_sandbox_memory_used_bytes",
          "sandstream_sandbox_disk_used_bytes")


@pytest.fixture(scope="module")
def sampling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon that samples every 0.2 s (`metrics_per_sandbox` off)."""
    root = tmp_path_factory.mktemp("sampling")
    d = Daemon(root / "data", [], INTERVAL, root / "sandstreamd.log")
    d.start()
    yield d
    d.stop()
    d.stop_leftover_lxcfs()


@pytest.fixture(scope="module")
def sc(sampling: Daemon) -> Iterator[httpx.Client]:
    with sampling.client() as c:
        yield c


@pytest.fixture
def sb(sc: httpx.Client) -> Iterator[dict[str, Any]]:
    """A fresh sandbox on the sampling daemon, deleted afterwards."""
    sandbox = create_sandbox(sc)
    yield sandbox
    sc.delete(f"/v1/sandboxes/{sandbox['id']}")


def metrics(c: httpx.Client, sid: str, **params: Any) -> dict[str, Any]:
    r = c.get(f"/v1/sandboxes/{sid}/metrics", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def at(sample: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(sample["timestamp"].replace("Z", "+00:00"))


def rfc3339(t: datetime) -> str:
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def start_process(c: httpx.Client, sid: str, cmd: str) -> dict[str, Any]:
    r = c.post(f"/v1/sandboxes/{sid}/processes", json={"cmd": cmd})
    assert r.status_code == 201, r.text
    proc: dict[str, Any] = r.json()
    return proc


def wait_process(c: httpx.Client, sid: str, pid: str, seconds: float = 20) -> dict[str, Any]:
    r = c.get(f"/v1/sandboxes/{sid}/processes/{pid}/wait", params={"timeout_seconds": seconds},
              timeout=seconds + 10)
    assert r.status_code == 200, r.text
    proc: dict[str, Any] = r.json()
    return proc


def wait_for_sample(c: httpx.Client, sid: str, predicate: Callable[[dict[str, Any]], bool],
                    within: float) -> list[dict[str, Any]]:
    """Polls until some sample satisfies `predicate`; returns every sample then."""
    seen: list[dict[str, Any]] = []

    def found() -> bool:
        seen[:] = metrics(c, sid)["samples"]
        return any(predicate(s) for s in seen)

    assert wait_until(found, within, 0.2), seen[-10:]
    return seen


def scrape(c: httpx.Client) -> str:
    r = c.get("/metrics")
    assert r.status_code == 200, r.text
    return r.text


def test_the_answer_and_a_busy_then_idle_cpu(sc: httpx.Client, sb: dict[str, Any]) -> None:
    sid = sb["id"]
    busy = start_process(sc, sid, "timeout 3 sh -c 'while :; do :; done'")
    ended = wait_process(sc, sid, busy["id"])
    assert ended["exit_code"] == 124, ended
    time.sleep(1.5)  # idle samples after it
    m = metrics(sc, sid)
    assert set(m) == {"sandbox_id", "interval_seconds", "cpu_count", "memory_total_bytes",
                      "disk_total_bytes", "samples"}, m.keys()
    assert m["sandbox_id"] == sid and m["interval_seconds"] == 0.2
    assert m["cpu_count"] == sb["limits"]["cpu_percent"] / 100
    assert m["memory_total_bytes"] == sb["limits"]["memory_mb"] * MB
    assert isinstance(m["disk_total_bytes"], int) and m["disk_total_bytes"] > 0, m
    samples = m["samples"]
    assert len(samples) >= 15, len(samples)
    for s in samples:
        assert set(s) == SAMPLE_KEYS, s
        assert TIMESTAMP.match(s["timestamp"]), s
        assert 0 <= s["cpu_used_pct"] <= 100, s
        assert s["memory_used_bytes"] > 0 and s["memory_cache_bytes"] >= 0, s
        assert 0 < s["disk_used_bytes"] <= m["disk_total_bytes"], s
    times = [at(s) for s in samples]
    assert times == sorted(times)
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    assert 0.1 < statistics.median(gaps) < 0.6, gaps

    assert max(s["cpu_used_pct"] for s in samples) > 40, samples
    ended_at = datetime.fromisoformat(ended["ended_at"].replace("Z", "+00:00"))
    idle = [s for s in samples if at(s) > ended_at + timedelta(seconds=0.5)]
    assert len(idle) >= 3, (ended_at, samples[-10:])
    assert all(s["cpu_used_pct"] < 20 for s in idle), idle


def test_memory_shows_an_allocation(sc: httpx.Client, sb: dict[str, Any]) -> None:
    sid = sb["id"]
    before = wait_for_sample(sc, sid, lambda s: True, 5)[-1]["memory_used_bytes"]
    assert before < 80 * MB, before
    hog = start_process(sc, sid, 'python3 -c "b = bytearray(100<<20); import time; time.sleep(5)"')
    samples = wait_for_sample(sc, sid, lambda s: s["memory_used_bytes"] > 80 * MB, 10)
    assert max(s["memory_used_bytes"] for s in samples) <= sb["limits"]["memory_mb"] * MB
    # Its end gives the memory back.
    wait_process(sc, sid, hog["id"])
    wait_for_sample(sc, sid, lambda s: s["memory_used_bytes"] < 80 * MB
                    and s["timestamp"] > samples[-1]["timestamp"], 5)


def test_disk_shows_a_written_file(sc: httpx.Client, sb: dict[str, Any]) -> None:
    sid = sb["id"]
    baseline = wait_for_sample(sc, sid, lambda s: True, 5)[-1]["disk_used_bytes"]
    r = sc.put(f"/v1/sandboxes/{sid}/files/content", params={"path": "/workspace/big.bin"},
               content=secrets.token_bytes(20 * MB), timeout=60)
    assert r.status_code in (200, 201), r.text
    written = time.time()
    samples = wait_for_sample(
        sc, sid, lambda s: s["disk_used_bytes"] >= baseline + 15 * MB
        and at(s).timestamp() > written, 5)
    assert samples[-1]["disk_used_bytes"] >= baseline + 15 * MB, (baseline, samples[-3:])


@pytest.fixture
def series(sc: httpx.Client, sb: dict[str, Any]) -> list[dict[str, Any]]:
    """The samples of `sb` once it has a few (1.2 s of them)."""
    wait_for_sample(sc, sb["id"], lambda s: True, 5)
    time.sleep(1.2)
    full: list[dict[str, Any]] = metrics(sc, sb["id"])["samples"]
    assert len(full) >= 5, full
    return full


def test_the_window(sc: httpx.Client, sb: dict[str, Any], series: list[dict[str, Any]]) -> None:
    sid = sb["id"]
    created = datetime.fromisoformat(sb["created_at"].replace("Z", "+00:00"))
    assert at(series[0]) >= created - timedelta(seconds=1), (created, series[0])

    # Before its creation: nothing, in either form.
    before = created - timedelta(minutes=1)
    assert metrics(sc, sid, end=int(before.timestamp()))["samples"] == []
    assert metrics(sc, sid, end=rfc3339(before))["samples"] == []
    # After now: nothing.
    assert metrics(sc, sid, start=int(time.time()) + 3600)["samples"] == []
    assert metrics(sc, sid, start=rfc3339(datetime.now(timezone.utc) + timedelta(hours=1)))[
        "samples"] == []

    # `start` at a sample's own time: from that sample on.
    lo = series[1]
    assert metrics(sc, sid, start=lo["timestamp"])["samples"][:len(series) - 1] == series[1:]
    # Unix seconds: a second's window, [second, second + 1].
    second = int(at(series[0]).timestamp()) + 1
    while time.time() < second + 1.5:
        time.sleep(0.1)
    expected = [s for s in metrics(sc, sid)["samples"]
                if second <= at(s).timestamp() <= second + 1]
    assert len(expected) >= 3, expected
    assert metrics(sc, sid, start=second, end=second + 1)["samples"] == expected
    assert metrics(sc, sid, start=second)["samples"][:len(expected)] == expected


def test_the_window_includes_a_sample_at_either_bound(sc: httpx.Client, sb: dict[str, Any],
                                                      series: list[dict[str, Any]]) -> None:
    """start <= timestamp <= end, with the timestamps as the answer gives them."""
    sid = sb["id"]
    lo, hi = series[1], series[-2]
    assert metrics(sc, sid, start=lo["timestamp"], end=hi["timestamp"])["samples"] == series[1:-1]
    assert metrics(sc, sid, start=lo["timestamp"], end=lo["timestamp"])["samples"] == [lo]
    assert metrics(sc, sid, end=series[0]["timestamp"])["samples"] == [series[0]]


def test_other_rfc3339_forms_mean_their_time_or_are_refused(
        sc: httpx.Client, sb: dict[str, Any], series: list[dict[str, Any]]) -> None:
    """A time with fewer or more fractional digits, or with an offset, is the time it says (the
    samples are those from the same instant in the daemon's own form), or a 400: never another."""
    sid = sb["id"]
    # Half past a second the series covers whole, so samples lie on both sides of it.
    second = int(at(series[0]).timestamp()) + 1
    while time.time() < second + 1.3:
        time.sleep(0.1)
    middle = datetime.fromtimestamp(second + 0.5, timezone.utc)
    same = metrics(sc, sid, start=rfc3339(middle))["samples"]
    assert same and at(same[0]) >= middle
    local = middle.astimezone(timezone(timedelta(hours=2)))
    for given in (middle.strftime("%Y-%m-%dT%H:%M:%S.5Z"),
                  middle.strftime("%Y-%m-%dT%H:%M:%S.500000Z"),
                  local.strftime("%Y-%m-%dT%H:%M:%S.500+02:00")):
        r = sc.get(f"/v1/sandboxes/{sid}/metrics", params={"start": given})
        if r.status_code == 400:
            continue
        assert r.status_code == 200, r.text
        got = r.json()["samples"]
        assert got[:1] == same[:1], (given, rfc3339(middle), [s["timestamp"] for s in got[:3]],
                                     [s["timestamp"] for s in same[:3]])


@pytest.mark.parametrize("value", ["yesterday", "12abc", "2026-01-02 03:04:05",
                                   "2026-01-02T03:04:05.000Zjunk", "2026-13-45T99:99:99.000Z"])
def test_a_time_that_is_not_one_is_invalid_request(sc: httpx.Client, sb: dict[str, Any],
                                                   value: str) -> None:
    for name in ("start", "end"):
        err = assert_error(sc.get(f"/v1/sandboxes/{sb['id']}/metrics", params={name: value}),
                           400, "invalid_request")
        assert name in err["message"], err


def test_unknown_sandbox_credentials_and_scopes(sampling: Daemon, sc: httpx.Client,
                                                sb: dict[str, Any]) -> None:
    assert_error(sc.get("/v1/sandboxes/sb_0000000000000000/metrics"), 404, "not_found")
    with sampling.client(key=None) as anon:
        assert_error(anon.get(f"/v1/sandboxes/{sb['id']}/metrics"), 401, "unauthorized")
    tokens = {}
    for scope in ("read", "exec"):
        r = sc.post(f"/v1/sandboxes/{sb['id']}/tokens", json={"scopes": [scope]})
        assert r.status_code == 201, r.text
        tokens[scope] = r.json()["token"]
    with sampling.client(key=tokens["read"]) as reader:
        assert metrics(reader, sb["id"])["sandbox_id"] == sb["id"]
    with sampling.client(key=tokens["exec"]) as runner:
        assert_error(runner.get(f"/v1/sandboxes/{sb['id']}/metrics"), 403, "forbidden")


def test_a_paused_sandbox_stays_paused(sc: httpx.Client, sb: dict[str, Any]) -> None:
    sid = sb["id"]
    wait_for_sample(sc, sid, lambda s: True, 5)
    r = sc.post(f"/v1/sandboxes/{sid}/pause", json={"mode": "freeze"})
    assert r.status_code == 200 and r.json()["status"] == "paused", r.text
    time.sleep(0.5)
    assert metrics(sc, sid)["samples"]
    r = sc.get(f"/sandboxes/{sid}/metrics", headers={"X-API-KEY": API_KEY})
    assert r.status_code == 200 and r.json(), r.text
    assert sc.get(f"/v1/sandboxes/{sid}").json()["status"] == "paused"


def test_before_the_first_sample_and_the_default_interval(client: httpx.Client) -> None:
    """The session daemon samples every 5 s (the default): right after its creation a sandbox
    has its limits and, until its first sample, no samples and no disk size."""
    sandbox = create_sandbox(client)
    try:
        m = metrics(client, sandbox["id"])
        assert m["interval_seconds"] == 5.0
        assert m["cpu_count"] == sandbox["limits"]["cpu_percent"] / 100
        assert m["memory_total_bytes"] == sandbox["limits"]["memory_mb"] * MB
        if not m["samples"]:  # else the daemon's round came just after the create
            assert m["disk_total_bytes"] is None, m
    finally:
        client.delete(f"/v1/sandboxes/{sandbox['id']}")


def test_e2b_routes(sampling: Daemon, sc: httpx.Client) -> None:
    key = {"X-API-KEY": API_KEY}
    a, b = create_sandbox(sc), create_sandbox(sc)
    try:
        for sandbox in (a, b):
            wait_for_sample(sc, sandbox["id"], lambda s: True, 5)
        time.sleep(0.5)
        with sampling.client(key=None) as c:
            r = c.get(f"/sandboxes/{a['id']}/metrics", headers=key)
            assert r.status_code == 200, r.text
            items = r.json()
            assert isinstance(items, list) and len(items) >= 3, items
            v1 = metrics(sc, a["id"])
            for item in items:
                assert set(item) == E2B_KEYS, item
                assert TIMESTAMP.match(item["timestamp"]), item
                assert item["timestampUnix"] == int(at(item).timestamp())
                assert item["cpuCount"] == 1 and 0 <= item["cpuUsedPct"] <= 100
                assert item["memTotal"] == a["limits"]["memory_mb"] * MB
                assert item["diskTotal"] == v1["disk_total_bytes"]
                assert 0 < item["memUsed"] <= item["memTotal"] and item["memCache"] >= 0
                assert 0 < item["diskUsed"] <= item["diskTotal"]
            assert [i["timestamp"] for i in items] == [s["timestamp"] for s in v1["samples"]][
                :len(items)]
            # The window, in Unix seconds (what the SDKs send).
            first = items[0]["timestampUnix"]
            assert c.get(f"/sandboxes/{a['id']}/metrics", params={"end": first - 60},
                         headers=key).json() == []
            # Samples 0.2 s apart may all share one Unix second: wait for the next one.
            later: list[dict[str, Any]] = []

            def sampled_after_first() -> bool:
                later[:] = c.get(f"/sandboxes/{a['id']}/metrics", params={"start": first + 1},
                                 headers=key).json()
                return bool(later)

            assert wait_until(sampled_after_first, 5, 0.2), later
            assert all(i["timestampUnix"] >= first + 1 for i in later), later
            r = c.get(f"/sandboxes/{a['id']}/metrics", params={"start": "yesterday"}, headers=key)
            assert r.status_code == 400 and r.json()["code"] == 400, r.text
            r = c.get("/sandboxes/sb_0000000000000000/metrics", headers=key)
            assert r.status_code == 404 and r.json()["code"] == 404, r.text
            assert c.get(f"/sandboxes/{a['id']}/metrics").status_code == 401

            # Several at once: each one's latest sample; ids it does not know are left out.
            ids = f"{a['id']},{b['id']},sb_0000000000000000"
            r = c.get("/sandboxes/metrics", params={"sandbox_ids": ids}, headers=key)
            assert r.status_code == 200, r.text
            latest = r.json()["sandboxes"]
            assert set(latest) == {a["id"], b["id"]}, latest
            for sid, item in latest.items():
                assert set(item) == E2B_KEYS, item
                newest = metrics(sc, sid)["samples"][-1]
                assert at(item) <= at(newest)
                assert (at(newest) - at(item)).total_seconds() < 2
    finally:
        for sandbox in (a, b):
            sc.delete(f"/v1/sandboxes/{sandbox['id']}")


def test_prometheus_without_metrics_per_sandbox(sc: httpx.Client, sb: dict[str, Any]) -> None:
    wait_for_sample(sc, sb["id"], lambda s: True, 5)
    text = scrape(sc)
    assert "sandstream_sandboxes" in text
    assert "sandstream_sandbox_" not in text, [
        line for line in text.splitlines() if "sandstream_sandbox_" in line]


def test_prometheus_with_metrics_per_sandbox(daemon_factory: Any) -> None:
    d = daemon_factory(env={**INTERVAL, "SANDSTREAM_METRICS_PER_SANDBOX": "true"})
    with d.client() as c:
        a, b = create_sandbox(c), create_sandbox(c)
        for sandbox in (a, b):
            wait_for_sample(c, sandbox["id"], lambda s: True, 5)
        text = scrape(c)
        for name in GAUGES:
            assert f"# TYPE {name} gauge" in text, text
            for sandbox in (a, b):
                line = re.search(rf'^{name}{{sandbox="{sandbox["id"]}"}} (\S+)$', text, re.M)
                assert line, (name, sandbox["id"], text)
                assert float(line.group(1)) >= 0
        memory = float(re.search(rf'^sandstream_sandbox_memory_used_bytes{{sandbox="{a["id"]}"}} '
                                 rf'(\S+)$', text, re.M).group(1))  # type: ignore[union-attr]
        assert 0 < memory <= a["limits"]["memory_mb"] * MB
        # A deleted sandbox's series go with it.
        assert c.delete(f"/v1/sandboxes/{a['id']}").status_code == 204
        assert wait_until(lambda: a["id"] not in scrape(c), 3, 0.2)
        assert b["id"] in scrape(c)
        c.delete(f"/v1/sandboxes/{b['id']}")


def test_series_start_afresh_after_a_restart(daemon_factory: Any) -> None:
    keep = ["--teardown-on-exit", "false"]
    first = daemon_factory(args=keep, env=INTERVAL)
    with first.client() as c:
        sandbox = create_sandbox(c)
        wait_for_sample(c, sandbox["id"], lambda s: True, 5)
        time.sleep(0.6)
        assert len(metrics(c, sandbox["id"])["samples"]) >= 3
    first.stop()
    restarted_at = datetime.now(timezone.utc)
    second = daemon_factory(args=keep, env=INTERVAL, data_dir=first.data_dir)
    with second.client() as c:
        try:
            samples = wait_for_sample(c, sandbox["id"], lambda s: True, 10)
            assert all(at(s) >= restarted_at - timedelta(milliseconds=50) for s in samples), (
                restarted_at, samples[:3])
            assert all(0 <= s["cpu_used_pct"] <= 100 for s in samples), samples
        finally:
            c.delete(f"/v1/sandboxes/{sandbox['id']}")


@pytest.mark.parametrize("args, env", [(["--metrics-interval-seconds", "0.05"], {}),
                                       (["--metrics-interval-seconds", "3601"], {}),
                                       ([], {"SANDSTREAM_METRICS_INTERVAL_SECONDS": "0"})])
def test_an_interval_out_of_range_stops_the_daemon_at_start(tmp_path: Path, args: list[str],
                                                            env: dict[str, str]) -> None:
    r = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
                        *args], capture_output=True, text=True, timeout=30,
                       env={"SANDSTREAM_API_KEY": API_KEY, "PATH": "/usr/bin:/bin", **env})
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "metrics_interval_seconds must be between 0.1 and 3600" in r.stderr, r.stderr
