"""`Sandbox.metrics()` against the real daemon, sampling every 0.2 s: a busy CPU, the window
`start`/`end`, and the typed answer; the query forms without it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

import sandstream
from sandstream import AsyncSandbox, MetricSample, Sandbox, SandboxMetrics
from sandstream._core import metrics_call, time_param

from .conftest import API_KEY, Daemon, start_daemon


@pytest.fixture(scope="module")
def sampling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon of its own that samples five times a second."""
    d = start_daemon(tmp_path_factory.mktemp("metrics") / "data",
                     args=["--metrics-interval-seconds", "0.2"])
    yield d
    d.stop()


def test_the_time_forms_sent() -> None:
    assert time_param("start", 1767323045) == "1767323045"
    assert time_param("start", 1767323045.0) == "1767323045"
    assert time_param("start", 1767323045.25) == "2026-01-02T03:04:05.250Z"
    at = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
    assert time_param("end", at) == "2026-01-02T03:04:05.123Z"
    assert time_param("end", at.astimezone(timezone(timedelta(hours=2)))) == "2026-01-02T03:04:05.123Z"
    with pytest.raises(TypeError, match="start"):
        time_param("start", "yesterday")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        time_param("start", True)
    call = metrics_call("sb_1", None, 5)
    assert call.path == "/v1/sandboxes/sb_1/metrics" and call.params == {"end": "5"}
    assert metrics_call("sb_1", None, None).params is None


def test_metrics_of_a_busy_sandbox(sampling: Daemon) -> None:
    with Sandbox.create(base_url=sampling.url, api_key=API_KEY) as sb:
        created = datetime.now(timezone.utc)
        sb.exec("timeout 2 sh -c 'while :; do :; done'")
        time.sleep(0.6)
        m = sb.metrics()
        assert isinstance(m, SandboxMetrics) and m.sandbox_id == sb.id
        assert m.interval_seconds == pytest.approx(0.2)
        assert m.cpu_count == pytest.approx((sb.info.limits.cpu_percent or 0) / 100)
        assert m.memory_total_bytes == (sb.info.limits.memory_mb or 0) << 20
        assert m.disk_total_bytes is not None and m.disk_total_bytes > 0
        assert len(m.samples) >= 5 and all(isinstance(s, MetricSample) for s in m.samples)
        assert [s.time for s in m.samples] == sorted(s.time for s in m.samples)
        assert max(s.cpu_used_pct for s in m.samples) > 50, m.samples
        assert all(0 <= s.cpu_used_pct <= 100 for s in m.samples)
        assert all(s.memory_used_bytes > 0 and s.disk_used_bytes > 0 for s in m.samples)
        assert m.latest == m.samples[-1]
        assert m.samples[0].time >= created - timedelta(seconds=2)

        # The window: datetimes and Unix seconds alike, both bounds inclusive.
        middle = m.samples[len(m.samples) // 2]
        later = sb.metrics(start=middle.time)
        assert later.samples and later.samples[0].time >= middle.time
        assert sb.metrics(end=created - timedelta(minutes=1)).samples == ()
        assert sb.metrics(start=time.time() + 3600).samples == ()
        assert len(sb.metrics(start=time.time() - 3600, end=time.time() + 60).samples) >= len(m.samples)

        # A paused sandbox is read, not resumed.
        sb.pause()
        assert isinstance(sb.metrics().latest, MetricSample)
        assert sb.refresh().paused


async def test_async_metrics_and_a_missing_sandbox(sampling: Daemon) -> None:
    async with await AsyncSandbox.create(base_url=sampling.url, api_key=API_KEY) as sb:
        deadline = time.monotonic() + 5
        while not (await sb.metrics()).samples and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        m = await sb.metrics(start=datetime.now(timezone.utc) - timedelta(minutes=5))
        assert m.samples and m.disk_total_bytes
        gone = Sandbox.connect(sb.id, base_url=sampling.url, api_key=API_KEY)
    with pytest.raises(sandstream.NotFound):
        gone.metrics()
    gone.close()
