"""What the spec fuzz found, each kept as a plain request and the answer the spec gives it."""

from __future__ import annotations

import json

import httpx
import pytest

import helpers
from conftest import World


def test_405_names_the_allowed_methods(client: httpx.Client, world: World) -> None:
    """A known path with another method is 405 with an Allow header (RFC 9110), once each."""
    r = client.request("TRACE", "/healthz")
    helpers.assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET"
    r = client.put(f"/v1/sandboxes/{world.sandbox}")
    helpers.assert_error(r, 405, "method_not_allowed")
    assert sorted(r.headers["allow"].split(", ")) == ["DELETE", "GET", "PATCH"]
    r = client.put(f"/v1/sandboxes/{world.sandbox}/files")
    assert sorted(r.headers["allow"].split(", ")) == ["DELETE", "GET"]
    assert "allow" not in client.get("/healthz").headers


def test_metadata_values_are_strings(client: httpx.Client) -> None:
    """metadata is an object of strings: another value is 400 naming it, never echoed back."""
    for value in ({}, 1, None, [], True):
        r = client.post("/v1/sandboxes", json={"metadata": {"owner": value}})
        err = helpers.assert_error(r, 400, "invalid_request")
        assert "metadata.owner" in err["message"], err


def test_empty_idempotency_key(client: httpx.Client, world: World) -> None:
    """An empty Idempotency-Key is 400, not silently a request without one."""
    for route in ("exec", "exec/stream", "processes"):
        r = client.post(f"/v1/sandboxes/{world.sandbox}/{route}", json={"cmd": "true"},
                        headers={"Idempotency-Key": ""})
        err = helpers.assert_error(r, 400, "invalid_request")
        assert "Idempotency-Key" in err["message"], err


def test_idempotent_retry_of_a_process_is_200(client: httpx.Client, world: World) -> None:
    """POST processes: 201 when it starts the process, 200 with that process on a retry."""
    url = f"/v1/sandboxes/{world.sandbox}/processes"
    headers = {"Idempotency-Key": "fuzz-retry"}
    first = client.post(url, json={"cmd": "sleep 60"}, headers=headers)
    assert first.status_code == 201, first.text
    again = client.post(url, json={"cmd": "sleep 60"}, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    client.delete(f"{url}/{first.json()['id']}")


@pytest.mark.parametrize("value", ["AAA", "2", "TRUE", "on"])
def test_query_flags_refuse_other_words(client: httpx.Client, world: World, value: str) -> None:
    """follow, eof, recursive and parents are 1/true/yes/empty or 0/false/no; else 400."""
    sb = f"/v1/sandboxes/{world.sandbox}"
    requests = [
        ("follow", "GET", f"{sb}/logs?follow={value}", None),
        ("follow", "GET", f"{sb}/events?follow={value}", None),
        ("follow", "GET", f"{sb}/processes/{world.process}/logs?follow={value}", None),
        ("eof", "POST", f"{sb}/processes/{world.process}/stdin?eof={value}", b"x"),
        ("recursive", "DELETE", f"{sb}/files?path=/tmp/none&recursive={value}", None),
        ("parents", "PUT", f"{sb}/files/content?path=/tmp/flag&parents={value}", b"x"),
        ("recursive", "GET", f"{sb}/files/watch?path=/tmp&recursive={value}", None),
    ]
    for flag, method, url, body in requests:
        r = client.request(method, url, content=body,
                           headers={"Content-Type": "application/octet-stream"} if body else {})
        err = helpers.assert_error(r, 400, "invalid_request")
        assert flag in err["message"], (url, err)


def test_query_flags_accept_their_words(client: httpx.Client, world: World) -> None:
    """The accepted spellings still work, a bare flag included."""
    sb = f"/v1/sandboxes/{world.sandbox}"
    for value in ("1", "true", "yes", "", "0", "false", "no"):
        r = client.get(f"{sb}/processes/{world.process}/logs?follow={value}")
        assert r.status_code == 200, (value, r.text)
        r = client.put(f"{sb}/files/content?path=/tmp/flags/f&parents={value or '1'}",
                       content=b"x")
        assert r.status_code in (200, 201), (value, r.text)
    assert client.get(f"{sb}/processes/{world.process}/logs?follow").status_code == 200


def test_process_status_filter(client: httpx.Client, world: World) -> None:
    """?status= is running or exited; empty or anything else is 400."""
    url = f"/v1/sandboxes/{world.sandbox}/processes"
    for value in ("", "done", "RUNNING"):
        err = helpers.assert_error(client.get(f"{url}?status={value}"), 400, "invalid_request")
        assert "status" in err["message"], err
    exited = client.get(f"{url}?status=exited").json()["processes"]
    assert world.process in [p["id"] for p in exited]


def test_since_and_last_event_id_are_both_checked(client: httpx.Client, world: World) -> None:
    """The header wins over ?since=, but neither is ignored when bad; empty is bad too."""
    url = f"/v1/sandboxes/{world.sandbox}/processes/{world.process}/logs"
    bad = [({"since": "18446744073709551616"}, {"Last-Event-ID": "0"}),
           ({"since": "x"}, {"Last-Event-ID": "1"}),
           ({}, {"Last-Event-ID": ""}),
           ({"since": ""}, {})]
    for params, headers in bad:
        r = client.get(url, params=params, headers=headers)
        err = helpers.assert_error(r, 400, "invalid_request")
        assert "since" in err["message"], (params, headers, err)
    r = client.get(url, params={"since": "99"}, headers={"Last-Event-ID": "0"})
    assert r.status_code == 200 and r.json()["chunks"], r.text


def test_stdin_json_encoding_and_eof(client: httpx.Client, world: World) -> None:
    """JSON stdin: an unknown encoding is 400; {"eof": true} alone closes stdin."""
    url = f"/v1/sandboxes/{world.sandbox}/processes"
    pid = client.post(url, json={"cmd": "cat"}).json()["id"]
    for encoding in ("hex", "base32", 5):
        r = client.post(f"{url}/{pid}/stdin", json={"data": "aGk=", "encoding": encoding})
        helpers.assert_error(r, 400, "invalid_request")
    r = client.post(f"{url}/{pid}/stdin", json={"data": "aGk=", "encoding": "base64"})
    assert r.json() == {"written": 2}, r.text
    assert client.post(f"{url}/{pid}/stdin", json={"eof": True}).json() == {"written": 0}
    assert client.get(f"{url}/{pid}/wait?timeout_seconds=10").json()["exit_code"] == 0
    r = client.get(f"{url}/{pid}/logs")
    assert r.json()["stdout"] == "hi", r.text


def test_session_is_a_string_for_processes_too(client: httpx.Client, world: World) -> None:
    """POST processes checks the type of `session`, a field of the shared command request."""
    r = client.post(f"/v1/sandboxes/{world.sandbox}/processes", json={"cmd": "true", "session": 1})
    err = helpers.assert_error(r, 400, "invalid_request")
    assert "session" in err["message"], err


def test_signal_to_an_ended_process_is_409(client: httpx.Client, world: World) -> None:
    """An ended process cannot be signalled: 409 conflict, as the spec says."""
    r = client.post(f"/v1/sandboxes/{world.sandbox}/processes/{world.process}/signal",
                    json={"signal": "TERM"})
    helpers.assert_error(r, 409, "conflict")


def test_exec_stream_resumed_past_its_exit_is_204(client: httpx.Client, world: World) -> None:
    """exec/stream with the key of an ended process and a Last-Event-ID past its end: 204."""
    url = f"/v1/sandboxes/{world.sandbox}/exec/stream"
    headers = {"Idempotency-Key": "fuzz-resume-204"}
    first = client.post(url, json={"cmd": "echo hi"}, headers=headers)
    assert first.status_code == 200 and "event: exit" in first.text, first.text
    r = client.post(url, json={"cmd": "echo hi"},
                    headers={**headers, "Last-Event-ID": "18446744073709551615"})
    assert r.status_code == 204, r.text
    assert r.content == b""


def test_empty_format_encoding_flow(client: httpx.Client, world: World) -> None:
    """format, encoding and flow are named values: an empty one is 400, in the query or body."""
    sb = f"/v1/sandboxes/{world.sandbox}"
    logs = f"{sb}/processes/{world.process}/logs"
    for name in ("format", "encoding", "flow"):
        err = helpers.assert_error(client.get(f"{logs}?{name}="), 400, "invalid_request")
        assert name in err["message"], err
        r = client.post(f"{sb}/exec", json={"cmd": "true", name: ""})
        err = helpers.assert_error(r, 400, "invalid_request")
        assert name in err["message"], err
        r = client.post(f"{sb}/exec/stream?{name}=", json={"cmd": "true"})
        err = helpers.assert_error(r, 400, "invalid_request")
        assert name in err["message"], err
    r = client.get(f"{logs}?format=cloudflare&encoding=base64&flow=skip")
    assert r.status_code == 200, r.text


def test_journal_stream_past_its_window_starts_with_a_documented_gap(client: httpx.Client) -> None:
    """The journal keeps 1000 entries: a reader from the start gets a `gap`, which the spec's
    x-sse-events of logs and events now lists (GapData)."""
    sb = helpers.create_sandbox(client)["id"]
    try:
        for _ in range(510):  # two entries each: started, exited
            r = client.post(f"/v1/sandboxes/{sb}/exec", json={"argv": ["true"]})
            assert r.status_code == 200, r.text
        for route in ("logs", "events"):
            r = client.get(f"/v1/sandboxes/{sb}/{route}", headers={"Accept": "text/event-stream"})
            assert r.status_code == 200, r.text
            first = r.text.split("\n\n", 1)[0].splitlines()
            assert "event: gap" in first, first
            data = json.loads(next(line for line in first if line.startswith("data:"))[5:])
            assert set(data) == {"from_seq", "to_seq", "bytes"} and data["from_seq"] == 1, data
    finally:
        client.delete(f"/v1/sandboxes/{sb}")


def test_a_signed_urls_expiration_out_of_range_is_400(client: httpx.Client) -> None:
    """A signature_expiration far out of range (its milliseconds overflow) is 400, not a crash:
    on the admin's lookup and on E2B's /files, which takes no key."""
    for at in ("-23727102680", "9223372036854775807", "253402300800"):
        r = client.get("/v1/admin/e2b/signed-url",
                       params={"signature": "0", "operation": "read", "signature_expiration": at})
        err = helpers.assert_error(r, 400, "invalid_request")
        assert "signature_expiration" in err["message"], err
        r = httpx.get(f"{client.base_url}/files",
                      params={"path": "/x", "signature": "v1_0", "signature_expiration": at})
        assert r.status_code == 400 and "signature_expiration" in r.json()["message"], r.text
