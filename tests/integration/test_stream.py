"""exec/stream: the seed's curl, both SSE encodings, live delivery, byte exactness, keepalives."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import time
from typing import Any

import httpx

from helpers import API_KEY, Daemon
from sse import SseComment, SseEvent, SseParser, chunks_of, iter_sse, read_events

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def stream(c: httpx.Client, sandbox_id: str, body: dict[str, Any], params: dict[str, str] | None = None,
           headers: dict[str, str] | None = None, limit_seconds: float = 30.0) -> list[SseEvent]:
    """Runs exec/stream to its terminal event; asserts the SSE response head."""
    with c.stream("POST", f"/v1/sandboxes/{sandbox_id}/exec/stream", json=body,
                  params=params, headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers
        assert r.headers.get("cache-control") == "no-cache", r.headers
        assert r.headers.get("x-accel-buffering") == "no", r.headers
        return read_events(r, limit_seconds=limit_seconds)


def test_seed_curl_verbatim(daemon: Daemon, sandbox: dict[str, Any]) -> None:
    """The curl of seeds/001 (host, id, key and command changed) yields the seed's events."""
    cmd = "echo Collecting flask; sleep 0.2; echo Successfully installed flask-3.0.3"
    env = {"PANDASTACK_API_KEY": API_KEY, "SANDBOX_ID": sandbox["id"], "PATH": "/usr/bin:/bin"}
    script = f"""curl -N -X POST \\
  -H "Authorization: Bearer $PANDASTACK_API_KEY" \\
  -H "Accept: text/event-stream" \\
  -H "Content-Type: application/json" \\
  -d '{{"cmd":"{cmd}"}}' \\
  {daemon.url}/v1/sandboxes/$SANDBOX_ID/exec/stream"""
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr
    events = [e for e in SseParser().feed(out.stdout) if isinstance(e, SseEvent)]
    names = [e.event for e in events]
    assert names[0] == "start", names
    assert names[-1] == "exit", names
    assert set(names[1:-1]) == {"stdout"}, names
    for e in events:
        if e.event == "stdout":
            assert set(e.json()) == {"chunk"}, e.data
    assert chunks_of(events) == "Collecting flask\nSuccessfully installed flask-3.0.3\n"
    assert events[-1].json()["exit_code"] == 0
    ids = [int(e.id) for e in events if e.id is not None]
    assert len(ids) == len(events), "every entry carries an id"
    assert ids == list(range(1, len(ids) + 1)), ids
    start = events[0].json()
    assert start["process_id"].startswith("proc_") and start["sandbox_id"] == sandbox["id"]
    assert isinstance(start["pid"], int)


def test_pandastack_exit_fields(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """The exit event carries exit_code, signal, reason and duration_ms; stderr is separate."""
    events = stream(client, sandbox["id"], {"cmd": "echo out; echo err >&2; exit 7"})
    assert chunks_of(events, "stdout") == "out\n"
    assert chunks_of(events, "stderr") == "err\n"
    ex = events[-1].json()
    assert events[-1].event == "exit"
    assert ex["exit_code"] == 7 and ex["signal"] is None and ex["reason"] == "exited"
    assert isinstance(ex["duration_ms"], int) and ex["duration_ms"] >= 0


def test_cloudflare_format(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """format=cloudflare (body field or query): start/stdout/stderr/complete with type+timestamp."""
    cmd = "echo out; sleep 0.1; echo err >&2; exit 2"
    for body, params in (({"cmd": cmd, "format": "cloudflare"}, None),
                         ({"cmd": cmd}, {"format": "cloudflare"})):
        events = stream(client, sandbox["id"], body, params=params)
        names = [e.event for e in events]
        assert names[0] == "start" and names[-1] == "complete", names
        assert set(names) == {"start", "stdout", "stderr", "complete"}, names
        for e in events:
            d = e.json()
            assert d["type"] == e.event, d
            assert RFC3339_MS.match(d["timestamp"]), d
        start = events[0].json()
        assert start["processId"].startswith("proc_") and start["sandboxId"] == sandbox["id"]
        assert isinstance(start["pid"], int) and start["command"] == cmd
        assert chunks_of(events, "stdout", "data") == "out\n"
        assert chunks_of(events, "stderr", "data") == "err\n"
        done = events[-1].json()
        assert done["exitCode"] == 2 and done["signal"] is None and done["reason"] == "exited"
        assert isinstance(done["durationMs"], int)


def test_partial_line_arrives_before_exit(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Output without a newline is forwarded at once, not held until the line or the exit."""
    t0 = time.monotonic()
    events = stream(client, sandbox["id"], {"cmd": "printf abc; sleep 2; printf def"})
    out = [e for e in events if e.event == "stdout"]
    assert "".join(e.json()["chunk"] for e in out) == "abcdef"
    first = out[0]
    assert first.json()["chunk"] == "abc", [e.data for e in out]
    assert first.t - t0 < 1.0, f"'abc' arrived {first.t - t0:.2f}s after the request"
    assert events[-1].t - first.t > 1.5, "'abc' must arrive well before the exit"


def test_utf8_code_point_split_across_writes(client: httpx.Client,
                                             sandbox: dict[str, Any]) -> None:
    """A code point written in two parts arrives whole in utf8 mode."""
    events = stream(client, sandbox["id"],
                    {"cmd": "printf '\\342\\202'; sleep 0.3; printf '\\254'"})
    assert chunks_of(events) == "€"
    assert events[-1].json()["exit_code"] == 0


def test_utf8_invalid_bytes_replaced(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Invalid bytes become U+FFFD; an incomplete code point at the exit too."""
    events = stream(client, sandbox["id"], {"cmd": "printf 'a\\377b'"})
    assert chunks_of(events) == "a\ufffdb"
    events = stream(client, sandbox["id"], {"cmd": "printf 'x\\342\\202'"})
    text = chunks_of(events)
    assert re.fullmatch("x\ufffd+", text), repr(text)


def test_base64_small_binary(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """base64 mode: NUL, 0xff and a lone continuation byte arrive exactly."""
    events = stream(client, sandbox["id"],
                    {"cmd": "printf '\\000\\001\\377\\202z'", "encoding": "base64"})
    data = b"".join(base64.b64decode(e.json()["chunk"]) for e in events if e.event == "stdout")
    assert data == b"\x00\x01\xff\x82z"


def test_50mib_random_bytes_base64_exact(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """50 MiB of random bytes arrive byte-exact; the command's own sha256 matches."""
    size = 50 << 20
    body = {"cmd": f"head -c {size} /dev/urandom | tee data.bin; sha256sum data.bin >&2",
            "encoding": "base64", "log_window_bytes": 64 << 20, "timeout_seconds": 120}
    digest = hashlib.sha256()
    received = 0
    stderr = b""
    names: list[str] = []
    final: dict[str, Any] = {}
    with client.stream("POST", f"/v1/sandboxes/{sandbox['id']}/exec/stream", json=body) as r:
        assert r.status_code == 200, r.read()
        for e in iter_sse(r):
            assert isinstance(e, SseEvent)
            names.append(e.event)
            if e.event == "stdout":
                chunk = base64.b64decode(e.json()["chunk"], validate=True)
                digest.update(chunk)
                received += len(chunk)
            elif e.event == "stderr":
                stderr += base64.b64decode(e.json()["chunk"], validate=True)
            elif e.event in ("exit", "error"):
                final = e.json()
                break
    assert "gap" not in names
    assert names[-1] == "exit", final
    assert final["exit_code"] == 0, (final, stderr)
    assert received == size
    assert stderr.split()[0].decode() == digest.hexdigest()


def test_keepalive_comments(daemon_factory: Any) -> None:
    """A quiet stream carries `: keepalive` comments every keepalive_seconds."""
    d = daemon_factory(args=["--keepalive-seconds", "1"])
    with d.client() as c:
        sb = c.post("/v1/sandboxes", json={}).json()
        comments: list[SseComment] = []
        with c.stream("POST", f"/v1/sandboxes/{sb['id']}/exec/stream",
                      json={"cmd": "sleep 3.5; echo done"}) as r:
            assert r.status_code == 200
            last: SseEvent | None = None
            for item in iter_sse(r, comments=True):
                if isinstance(item, SseComment):
                    comments.append(item)
                else:
                    last = item
                    if item.event in ("exit", "error"):
                        break
        assert last is not None and last.event == "exit"
        assert len(comments) >= 2, comments
        assert all(cm.text.strip() == "keepalive" for cm in comments), comments


def test_unstartable_process_is_error_not_exit(client: httpx.Client,
                                               sandbox: dict[str, Any]) -> None:
    """A process that cannot start is an error (event or response), never an exit event."""
    body = {"argv": ["/nonexistent/sandstream-no-such-binary"]}
    with client.stream("POST", f"/v1/sandboxes/{sandbox['id']}/exec/stream", json=body) as r:
        if r.status_code != 200:
            r.read()
            assert r.status_code >= 400 and "error" in r.json(), r.text
            return
        events = read_events(r)
    names = [e.event for e in events]
    assert "exit" not in names, [e.data for e in events]
    assert names[-1] == "error", names
    err = events[-1].json()
    assert err["code"] and err["message"], err
