"""Bad input: every malformed request gets the right error shape and status; the daemon lives."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from helpers import API_KEY, Daemon, assert_error, create_sandbox, wait_until

UNKNOWN_SB = "sb_0000000000000000"
UNKNOWN_PROC = "proc_0000000000000000"


@pytest.fixture(autouse=True)
def daemon_survives(daemon: Daemon) -> Iterator[None]:
    """After each test the session daemon still runs and answers."""
    yield
    assert daemon.alive(), daemon.log_tail()
    assert httpx.get(f"{daemon.url}/healthz", timeout=5).status_code == 200


def test_malformed_json(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A body that is not JSON, or not an object, is 400 invalid_json."""
    sb = sandbox["id"]
    for url in ("/v1/sandboxes", f"/v1/sandboxes/{sb}/exec", f"/v1/sandboxes/{sb}/exec/stream",
                f"/v1/sandboxes/{sb}/processes"):
        for body in (b"{not json", b'{"cmd": "true"', b"[1, 2]", b'"cmd"', b"\xff\xfe"):
            r = client.post(url, content=body, headers={"Content-Type": "application/json"})
            assert_error(r, 400, "invalid_json")


def test_wrong_field_type(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A known field of the wrong type is 400 invalid_request naming the field."""
    url = f"/v1/sandboxes/{sandbox['id']}/exec"
    cases: list[tuple[str, dict[str, Any], str]] = [
        (url, {"cmd": 5}, "cmd"),
        (url, {"argv": "echo hi"}, "argv"),
        (url, {"argv": ["echo", 1]}, "argv"),
        (url, {"cmd": "true", "env": {"A": 1}}, "env"),
        (url, {"cmd": "true", "env": ["A=1"]}, "env"),
        (url, {"cmd": "true", "merge_stderr": "yes"}, "merge_stderr"),
        (url, {"cmd": "true", "timeout_seconds": "5"}, "timeout_seconds"),
        (url, {"cmd": "true", "stdin": 42}, "stdin"),
        (url, {"cmd": "true", "log_window_bytes": "big"}, "log_window_bytes"),
        ("/v1/sandboxes", {"ttl_seconds": "x"}, "ttl_seconds"),
        ("/v1/sandboxes", {"env": "K=V"}, "env"),
        ("/v1/sandboxes", {"metadata": 3}, "metadata"),
    ]
    for u, body, field in cases:
        err = assert_error(client.post(u, json=body), 400, "invalid_request")
        assert field in err["message"], (body, err)


def test_unknown_fields_ignored(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Unknown fields are ignored."""
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec",
                    json={"cmd": "echo ok", "colour": {"deep": [1, 2]}, "x": None})
    assert r.status_code == 200 and r.json()["stdout"] == "ok\n", r.text


def test_unknown_sandbox_and_process(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Every route on an unknown sandbox or process is 404 not_found."""
    sb = f"/v1/sandboxes/{UNKNOWN_SB}"
    for method, url, body in (
            ("GET", sb, None), ("DELETE", sb, None), ("POST", f"{sb}/exec", {"cmd": "true"}),
            ("POST", f"{sb}/exec/stream", {"cmd": "true"}), ("GET", f"{sb}/processes", None),
            ("POST", f"{sb}/processes", {"cmd": "true"}), ("GET", f"{sb}/logs", None),
            ("GET", f"{sb}/events", None)):
        assert_error(client.request(method, url, json=body), 404, "not_found")
    p = f"/v1/sandboxes/{sandbox['id']}/processes/{UNKNOWN_PROC}"
    for method, url, body in (
            ("GET", p, None), ("DELETE", p, None), ("GET", f"{p}/logs", None),
            ("GET", f"{p}/wait", None), ("POST", f"{p}/stdin", {"data": "x"}),
            ("POST", f"{p}/signal", {"signal": "TERM"})):
        assert_error(client.request(method, url, json=body), 404, "not_found")


def test_body_over_limit_default(daemon: Daemon) -> None:
    """A Content-Length above the default 1 MiB is 413 without the body being sent."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as s:
        s.sendall((f"POST /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {(1 << 20) + 1}\r\n\r\n").encode() + b"{")
        data = b""
        while b"\r\n\r\n" not in data:
            more = s.recv(65536)
            if not more:
                break
            data += more
    status_line = data.split(b"\r\n", 1)[0]
    assert status_line.split()[1:2] == [b"413"], data[:300]
    assert b'"payload_too_large"' in data, data[:500]


def test_body_over_configured_limit(daemon_factory: Any) -> None:
    """--max-body-bytes applies to sized and chunked bodies alike."""
    d = daemon_factory(args=["--max-body-bytes", "1024"])

    def chunks() -> Iterator[bytes]:
        yield b'{"metadata": {"pad": "'
        for _ in range(8):
            yield b"y" * 512
        yield b'"}}'

    # A fresh connection each: whether the daemon keeps one open after a 413 is tested below.
    with d.client() as c:
        assert_error(c.post("/v1/sandboxes", json={"metadata": {"pad": "x" * 4096}}),
                     413, "payload_too_large")
    with d.client() as c:
        r = c.post("/v1/sandboxes", content=chunks(), headers={"Content-Type": "application/json"})
        assert_error(r, 413, "payload_too_large")
    with d.client() as c:
        assert c.post("/v1/sandboxes", json={"metadata": {"pad": "x" * 100}}).status_code == 201
    assert d.alive()


def test_connection_after_413(daemon_factory: Any) -> None:
    """After a 413 the connection either says `Connection: close` or keeps serving requests."""
    d = daemon_factory(args=["--max-body-bytes", "1024"])
    body = b'{"metadata": {"pad": "' + b"x" * 4096 + b'"}}'
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
                  b"Content-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        f = s.makefile("rb")
        status = f.readline()
        assert status.split()[1] == b"413", status
        headers = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip().lower()
        f.read(int(headers["content-length"]))
        if headers.get("connection") == "close":
            return
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        again = f.readline()
    assert again.startswith(b"HTTP/1.1 200"), (
        f"no `Connection: close` on the 413, yet the connection was closed: {again!r}")


def test_bad_signal_name(client: httpx.Client, sandbox: dict[str, Any], marker: str) -> None:
    """An unknown signal name or number is 400 invalid_request; the process keeps running."""
    sb = sandbox["id"]
    proc = client.post(f"/v1/sandboxes/{sb}/processes", json={"argv": ["sleep", marker]}).json()
    for sig in ("SIGNOPE", "", 999, -9, True):
        r = client.post(f"/v1/sandboxes/{sb}/processes/{proc['id']}/signal", json={"signal": sig})
        assert_error(r, 400, "invalid_request")
    assert client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}").json()["status"] == "running"
    client.delete(f"/v1/sandboxes/{sb}/processes/{proc['id']}")


def test_negative_timeouts(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Negative or zero timeouts are 400 invalid_request naming the field, on every route."""
    sb = sandbox["id"]
    for url in (f"/v1/sandboxes/{sb}/exec", f"/v1/sandboxes/{sb}/exec/stream",
                f"/v1/sandboxes/{sb}/processes"):
        for field in ("timeout_seconds", "idle_timeout_seconds"):
            for value in (-1, 0, -0.5):
                err = assert_error(client.post(url, json={"cmd": "true", field: value}),
                                   400, "invalid_request")
                assert field in err["message"], err
    assert_error(client.post("/v1/sandboxes", json={"ttl_seconds": -5}), 400, "invalid_request")
    proc = client.post(f"/v1/sandboxes/{sb}/processes", json={"cmd": "true"}).json()
    r = client.get(f"/v1/sandboxes/{sb}/processes/{proc['id']}/wait",
                   params={"timeout_seconds": "-1"})
    assert_error(r, 400, "invalid_request")


def test_unknown_route(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Unknown routes are 404 not_found in the error shape."""
    for url in ("/v1/nope", "/nope", f"/v1/sandboxes/{sandbox['id']}/nope",
                "/v1/sandboxes/a/b/c/d/e/f", "/v3/sandboxes"):
        assert_error(client.get(url), 404, "not_found")


def test_wrong_method(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A known route with a method it does not have is 405 method_not_allowed."""
    sb = f"/v1/sandboxes/{sandbox['id']}"
    for method, url in (("PUT", "/v1/sandboxes"), ("DELETE", "/v1/sandboxes"),
                        ("PUT", sb), ("POST", sb), ("GET", f"{sb}/exec"),
                        ("GET", f"{sb}/exec/stream"), ("POST", "/healthz")):
        assert_error(client.request(method, url), 405, "method_not_allowed")


def test_unsupported_media_type(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A body that is neither JSON nor octet-stream is 415."""
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/exec", content=b"cmd=true",
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert_error(r, 415, "unsupported_media_type")


def test_garbage_http(daemon: Daemon) -> None:
    """Bytes that are not HTTP get a 400 or a closed connection, never a crash."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
    assert data == b"" or data.startswith(b"HTTP/1.1 400"), data[:200]


def test_many_bad_requests_then_work(client: httpx.Client) -> None:
    """After a burst of bad requests, normal requests still work."""
    for _ in range(50):
        client.post("/v1/sandboxes", content=b"{", headers={"Content-Type": "application/json"})
        client.get(f"/v1/sandboxes/{UNKNOWN_SB}/processes/{UNKNOWN_PROC}/logs")
    sb = create_sandbox(client)
    r = client.post(f"/v1/sandboxes/{sb['id']}/exec", json={"cmd": "echo alive"})
    assert r.json()["stdout"] == "alive\n"
    client.delete(f"/v1/sandboxes/{sb['id']}")


def raw_request(port: int, head: bytes, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Sends `head` on a fresh connection and reads one response with a Content-Length body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        f = s.makefile("rb")
        status = int(f.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip().lower()
        return status, headers, f.read(int(headers.get("content-length", "0")))


def test_route_errors_come_before_body_errors(daemon: Daemon) -> None:
    """An unknown route or a wrong method is answered from the header, before anything about
    the body: 404/405, not 413, for an oversized body that is never sent."""
    auth = f"Authorization: Bearer {API_KEY}\r\n"
    for method, path, status in (("POST", "/v1/nope", 404), ("PUT", "/v1/sandboxes", 405)):
        got, headers, body = raw_request(daemon.port, (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {64 << 20}\r\n\r\n").encode())
        assert got == status, (method, path, got, body)
        assert headers.get("connection") == "close"


def test_header_too_large_is_431(daemon: Daemon) -> None:
    """A 200 KB header is 431 request_header_too_large in the error shape, not a silent close."""
    status, headers, body = raw_request(daemon.port, (
        b"GET /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 200_000 +
        b"\r\n\r\n"))
    assert status == 431, body
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["error"]["code"] == "request_header_too_large", body


def test_malformed_content_length_is_400(daemon: Daemon) -> None:
    """A Content-Length past 2^64 is 400 invalid_request, not a silent close."""
    status, _, body = raw_request(daemon.port, (
        f"POST /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Length: 99999999999999999999999\r\n\r\n").encode())
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_request", body


def test_huge_numbers_are_400_naming_field_and_range(client: httpx.Client,
                                                     sandbox: dict[str, Any]) -> None:
    """Numbers past any sensible range (or past 64 bits) are a 400 naming the field and the
    range it allows, never an overflow."""
    sb = sandbox["id"]
    cases: list[tuple[str, bytes, str, str]] = [
        ("/v1/sandboxes", b'{"ttl_seconds": 1e10}', "ttl_seconds", "315360000"),
        ("/v1/sandboxes", b'{"ttl_seconds": 9223372036854775808}', "ttl_seconds", "315360000"),
        ("/v1/sandboxes", b'{"ttl_seconds": 1e400}', "ttl_seconds", "315360000"),
        ("/v1/sandboxes", b'{"limits": {"memory_mb": 1e30}}', "limits.memory_mb", "8192"),
        ("/v1/sandboxes", b'{"limits": {"pids": 18446744073709551616}}', "limits.pids", "4096"),
        (f"/v1/sandboxes/{sb}/exec", b'{"cmd": "true", "log_window_bytes": 1e20}',
         "log_window_bytes", "268435456"),
        (f"/v1/sandboxes/{sb}/exec", b'{"cmd": "true", "timeout_seconds": 1e400}',
         "timeout_seconds", "604800"),
    ]
    for url, body, field, bound in cases:
        r = client.post(url, content=body, headers={"Content-Type": "application/json"})
        err = assert_error(r, 400, "invalid_request")
        assert field in err["message"] and bound in err["message"], (body, err)
    r = client.get(f"/v1/sandboxes/{sb}/events", params={"since": str(1 << 64)})
    assert "Last-Event-ID" in assert_error(r, 400, "invalid_request")["message"]
    r = client.get(f"/v1/sandboxes/{sb}/events", params={"tail": "-1"})
    assert "tail" in assert_error(r, 400, "invalid_request")["message"]


def test_resume_past_the_end_is_not_a_replay(client: httpx.Client,
                                             sandbox: dict[str, Any]) -> None:
    """Last-Event-ID or since past the end of a log (2^64-1 included) starts at its end: never a
    wrap-around to a gap from 0 and the whole log again."""
    sb = sandbox["id"]
    top = str((1 << 64) - 1)
    proc = client.post(f"/v1/sandboxes/{sb}/processes",
                       json={"cmd": "echo first; sleep 1; echo second"}).json()
    logs = f"/v1/sandboxes/{sb}/processes/{proc['id']}/logs"
    assert wait_until(lambda: "first" in client.get(logs).json()["stdout"], within=5)
    r = client.get(logs, headers={"Last-Event-ID": top})
    assert r.status_code == 200 and r.json()["chunks"] == [] and r.json()["gap"] is None, r.text
    with client.stream("GET", logs, params={"follow": "1"},
                       headers={"Last-Event-ID": top}) as stream:
        text = "".join(stream.iter_text())
    assert "first" not in text and "second" in text and "event: exit" in text, text
    assert "event: gap" not in text, text
    r = client.get(f"/v1/sandboxes/{sb}/events", params={"since": top})
    assert r.status_code == 200 and r.json()["events"] == [], r.text
