"""/metrics serves the Prometheus names of the spec with values that move."""

from __future__ import annotations

import re
from typing import Any

import httpx

from helpers import run

NAMES = {
    "sandstream_sandboxes": "gauge",
    "sandstream_processes_running": "gauge",
    "sandstream_processes_started_total": "counter",
    "sandstream_streams_open": "gauge",
    "sandstream_stream_bytes_total": "counter",
    "sandstream_gaps_total": "counter",
    "sandstream_http_requests_total": "counter",
    "sandstream_exec_duration_seconds": "histogram",
}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(c: httpx.Client) -> tuple[dict[str, str], dict[str, float]]:
    """Returns (TYPE of each family, value of each sample keyed by name+labels)."""
    r = c.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    types: dict[str, str] = {}
    samples: dict[str, float] = {}
    for line in r.text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return types, samples


def test_metrics_names_and_values(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Every spec metric has a TYPE and samples; counters grow with work."""
    _, before = scrape(client)
    run(client, sandbox["id"], cmd="echo metrics")
    with client.stream("POST", f"/v1/sandboxes/{sandbox['id']}/exec/stream",
                       json={"cmd": "echo streamed"}) as r:
        r.read()
    types, after = scrape(client)
    for name, kind in NAMES.items():
        assert types.get(name) == kind, (name, types.get(name))
    assert after["sandstream_sandboxes"] >= 1
    assert after["sandstream_processes_started_total"] >= before[
        "sandstream_processes_started_total"] + 2
    assert after["sandstream_stream_bytes_total"] > before["sandstream_stream_bytes_total"]
    assert after["sandstream_exec_duration_seconds_count"] >= before[
        "sandstream_exec_duration_seconds_count"] + 1
    assert 'sandstream_exec_duration_seconds_bucket{le="+Inf"}' in after
    assert after['sandstream_exec_duration_seconds_bucket{le="+Inf"}'] == after[
        "sandstream_exec_duration_seconds_count"]
    assert "sandstream_exec_duration_seconds_sum" in after
    codes = [k for k in after if k.startswith("sandstream_http_requests_total{")]
    assert any('code="200"' in k for k in codes), codes
