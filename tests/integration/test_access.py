"""Access: tenants with their own keys and quotas, and scoped tokens of one sandbox.

The admin key (the daemon's api_key) manages tenants and keys; a tenant sees only its own
sandboxes (another's is a 404, as if it did not exist); a token opens one sandbox for its
scopes until it expires, is revoked or the sandbox goes, including on a stream already open.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from helpers import API_KEY, Daemon, assert_error, create_sandbox, run, tenant, wait_until

SPEC = Path(__file__).resolve().parents[2] / "spec" / "openapi.yaml"


@pytest.fixture
def access(daemon_factory: Any) -> Iterator[Daemon]:
    """A daemon of its own: tenants and keys are the daemon's state."""
    yield daemon_factory()


def client(d: Daemon, key: str) -> httpx.Client:
    return d.client(key=key)


def test_tenants_see_only_their_own_sandboxes(access: Daemon) -> None:
    with access.client() as admin:
        key_a, key_b = tenant(admin, "alpha"), tenant(admin, "beta")
        with client(access, key_a) as a, client(access, key_b) as b:
            sb = create_sandbox(a)
            assert sb["tenant"] == "alpha"
            mine = create_sandbox(b)
            assert [s["id"] for s in a.get("/v1/sandboxes").json()["sandboxes"]] == [sb["id"]]
            assert [s["id"] for s in b.get("/v1/sandboxes").json()["sandboxes"]] == [mine["id"]]
            # The admin sees both.
            ids = {s["id"] for s in admin.get("/v1/sandboxes").json()["sandboxes"]}
            assert {sb["id"], mine["id"]} <= ids
            # Another tenant's sandbox does not exist for b: the same 404 as a missing one.
            missing = assert_error(b.get("/v1/sandboxes/sb_nope"), 404, "not_found")
            other = assert_error(b.get(f"/v1/sandboxes/{sb['id']}"), 404, "not_found")
            assert other["message"] == missing["message"].replace("sb_nope", sb["id"])
            assert run(a, sb["id"], cmd="echo mine")["stdout"] == "mine\n"


def concrete(path: str, values: dict[str, str]) -> str:
    """A spec path with its parameters filled in (sandbox, process, session, context, ...)."""
    def fill(m: re.Match[str]) -> str:
        return values.get(m.group(1), "x1")
    return re.sub(r"\{(\w+)\}", fill, path)


def test_every_sandbox_route_is_a_404_to_another_tenant(access: Daemon) -> None:
    """Every route of the spec under /v1/sandboxes/{id}, walked with the wrong tenant's key:
    404, never data, and nothing changes for the owner."""
    spec = yaml.safe_load(SPEC.read_text())
    with access.client() as admin:
        key_a, key_b = tenant(admin, "owner"), tenant(admin, "intruder")
        with client(access, key_a) as a, client(access, key_b) as b:
            sb = create_sandbox(a)
            r = a.post(f"/v1/sandboxes/{sb['id']}/processes", json={"id": "p1", "cmd": "sleep 60"})
            assert r.status_code == 201, r.text
            values = {"sandbox_id": sb["id"], "id": sb["id"], "process_id": "p1", "port": "8000"}
            walked = 0
            for path, ops in spec["paths"].items():
                if not path.startswith("/v1/sandboxes/{"):
                    continue
                for method in ops:
                    if method not in {"get", "post", "put", "patch", "delete"}:
                        continue
                    url = concrete(path, values)
                    r = b.request(method.upper(), url, json={} if method != "get" else None,
                                  timeout=10)
                    assert r.status_code == 404, f"{method.upper()} {url}: {r.status_code} {r.text}"
                    walked += 1
            assert walked > 40
            # The owner's sandbox and process are untouched.
            assert a.get(f"/v1/sandboxes/{sb['id']}/processes/p1").json()["status"] == "running"


def test_tenants_cannot_manage_access_or_read_metrics(access: Daemon) -> None:
    with access.client() as admin:
        key = tenant(admin, "plain")
        with client(access, key) as t:
            for method, url in [("GET", "/v1/admin/tenants"), ("POST", "/v1/admin/tenants"),
                                ("POST", "/v1/admin/tenants/plain/keys"), ("GET", "/metrics")]:
                assert_error(t.request(method, url, json={}), 403, "forbidden")
        # Revoking the key ends it at once.
        key_id = admin.get("/v1/admin/tenants/plain/keys").json()["keys"][0]["id"]
        assert admin.delete(f"/v1/admin/tenants/plain/keys/{key_id}").status_code == 204
        with client(access, key) as t:
            assert_error(t.get("/v1/sandboxes"), 401, "unauthorized")
        # A tenant with sandboxes cannot be deleted; without, it can.
        key = tenant(admin, "busy")
        with client(access, key) as t:
            sb = create_sandbox(t)
            assert_error(admin.delete("/v1/admin/tenants/busy"), 409, "conflict")
            assert t.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
        assert admin.delete("/v1/admin/tenants/busy").status_code == 204
        assert_error(admin.get("/v1/admin/tenants/busy"), 404, "not_found")
        for bad in [{"name": "Bad Name"}, {"name": "x", "quotas": {"sandboxes": -1}},
                    {"name": "x", "quotas": {"gpus": 1}}, {"name": "x", "extra": 1}]:
            assert_error(admin.post("/v1/admin/tenants", json=bad), 400, "invalid_request")
        assert_error(admin.post("/v1/admin/tenants", json={"name": "plain"}), 409, "conflict")


def test_quotas_refuse_and_recover(access: Daemon) -> None:
    with access.client() as admin:
        key = tenant(admin, "small", sandboxes=2, memory_mb=768, running_processes=2)
        with client(access, key) as t:
            first = create_sandbox(t, limits={"memory_mb": 512})
            err = assert_error(t.post("/v1/sandboxes", json={"limits": {"memory_mb": 512}}), 429,
                               "quota_exceeded")
            assert "memory_mb 768" in err["message"]
            second = create_sandbox(t, limits={"memory_mb": 256})
            err = assert_error(t.post("/v1/sandboxes", json={"limits": {"memory_mb": 1}}), 429,
                               "quota_exceeded")
            assert "sandboxes 2" in err["message"]
            for i in range(2):
                r = t.post(f"/v1/sandboxes/{first['id']}/processes",
                           json={"id": f"s{i}", "cmd": "sleep 60"})
                assert r.status_code == 201, r.text
            err = assert_error(t.post(f"/v1/sandboxes/{second['id']}/processes",
                                      json={"cmd": "sleep 60"}), 429, "quota_exceeded")
            assert "running_processes 2" in err["message"]
            usage = t.get("/v1/usage").json()
            assert usage["name"] == "small"
            assert usage["usage"]["sandboxes"] == 2 and usage["usage"]["memory_mb"] == 768
            assert usage["usage"]["running_processes"] == 2
            assert usage["quotas"]["sandboxes"] == 2
            # Usage drops, and the quota lets the next one through.
            assert t.delete(f"/v1/sandboxes/{first['id']}").status_code == 204
            create_sandbox(t, limits={"memory_mb": 256})
            # The admin raises a quota; it holds at once.
            r = admin.patch("/v1/admin/tenants/small", json={"quotas": {"sandboxes": 3}})
            assert r.status_code == 200, r.text
            assert r.json()["quotas"]["memory_mb"] == 0
            create_sandbox(t, limits={"memory_mb": 256})
        metrics = admin.get("/metrics").text
        assert 'sandstream_tenant_sandboxes{tenant="small"} 3' in metrics, metrics


def test_request_rate_and_stream_quotas(access: Daemon) -> None:
    with access.client() as admin:
        key = tenant(admin, "chatty", requests_per_second=5, streams=1)
        with client(access, key) as t:
            codes = [t.get("/v1/usage").status_code for _ in range(30)]
            assert 429 in codes and codes[0] == 200
            time.sleep(1.2)
            sb = create_sandbox(t)
            with t.stream("GET", f"/v1/sandboxes/{sb['id']}/events?follow=1") as first:
                assert first.status_code == 200
                err = assert_error(t.get(f"/v1/sandboxes/{sb['id']}/logs?follow=1"), 429,
                                   "quota_exceeded")
                assert "streams 1" in err["message"]
            time.sleep(1.2)
            assert wait_until(lambda: t.get(f"/v1/sandboxes/{sb['id']}/events").status_code == 200, 5)


def token(c: httpx.Client, sandbox_id: str, *scopes: str, ttl: int = 600) -> dict[str, Any]:
    r = c.post(f"/v1/sandboxes/{sandbox_id}/tokens", json={"scopes": list(scopes), "ttl_seconds": ttl})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    assert body["token"].startswith("sst_") and body["scopes"] == list(scopes)
    return body


def test_a_token_opens_one_sandbox_for_its_scopes(access: Daemon) -> None:
    with access.client() as admin:
        key = tenant(admin, "web")
        with client(access, key) as t:
            sb, other = create_sandbox(t), create_sandbox(t)
            ro = token(t, sb["id"], "read", "files:read")
            with client(access, ro["token"]) as r:
                assert r.get(f"/v1/sandboxes/{sb['id']}").status_code == 200
                assert r.get(f"/v1/sandboxes/{sb['id']}/files", params={"path": "/"}).status_code == 200
                assert_error(r.post(f"/v1/sandboxes/{sb['id']}/exec", json={"cmd": "true"}), 403,
                             "forbidden")
                assert_error(r.put(f"/v1/sandboxes/{sb['id']}/files/content",
                                   params={"path": "/tmp/x"}, content=b"x"), 403, "forbidden")
                assert_error(r.get(f"/v1/sandboxes/{other['id']}"), 404, "not_found")
                assert_error(r.get("/v1/sandboxes"), 403, "forbidden")
                assert_error(r.delete(f"/v1/sandboxes/{sb['id']}"), 403, "forbidden")
                assert_error(r.post(f"/v1/sandboxes/{sb['id']}/tokens", json={"scopes": ["exec"]}),
                             403, "forbidden")
            # As ?access_token=, the way a browser's EventSource carries it.
            ex = token(t, sb["id"], "exec")
            bare = httpx.Client(base_url=access.url, timeout=30)
            r = bare.post(f"/v1/sandboxes/{sb['id']}/exec?access_token={ex['token']}",
                          json={"cmd": "echo via token"})
            assert r.status_code == 200 and r.json()["stdout"] == "via token\n", r.text
            # Listed (never with the secret) and revoked.
            listed = t.get(f"/v1/sandboxes/{sb['id']}/tokens").json()["tokens"]
            assert {x["id"] for x in listed} == {ro["id"], ex["id"]}
            assert all("token" not in x for x in listed)
            assert t.delete(f"/v1/sandboxes/{sb['id']}/tokens/{ex['id']}").status_code == 204
            r = bare.post(f"/v1/sandboxes/{sb['id']}/exec?access_token={ex['token']}",
                          json={"cmd": "true"})
            assert_error(r, 401, "unauthorized")
            # Deleting the sandbox ends its tokens.
            assert t.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
            with client(access, ro["token"]) as r:
                assert_error(r.get(f"/v1/sandboxes/{sb['id']}"), 401, "unauthorized")
            for bad in [{"scopes": []}, {"scopes": ["root"]}, {"scopes": ["port:0"]},
                        {"scopes": ["read"], "ttl_seconds": 0}, {"scopes": "read"}]:
                assert_error(t.post(f"/v1/sandboxes/{other['id']}/tokens", json=bad), 400,
                             "invalid_request")
            bare.close()


def test_an_expired_or_revoked_token_ends_its_open_stream(access: Daemon) -> None:
    with access.client() as admin:
        key = tenant(admin, "viewer")
        with client(access, key) as t:
            sb = create_sandbox(t)
            r = t.post(f"/v1/sandboxes/{sb['id']}/processes",
                       json={"id": "tick", "cmd": "while :; do echo t; sleep 0.2; done"})
            assert r.status_code == 201, r.text
            for how in ("expire", "revoke"):
                tok = token(t, sb["id"], "read", ttl=2 if how == "expire" else 600)
                lines: list[str] = []
                ended = threading.Event()

                def follow() -> None:
                    url = (f"{access.url}/v1/sandboxes/{sb['id']}/processes/tick/logs"
                           f"?follow=1&access_token={tok['token']}")
                    with httpx.stream("GET", url, timeout=30) as s:
                        for line in s.iter_lines():
                            lines.append(line)
                    ended.set()

                threading.Thread(target=follow, daemon=True).start()
                assert wait_until(lambda: len(lines) > 3, 5)
                if how == "revoke":
                    assert t.delete(f"/v1/sandboxes/{sb['id']}/tokens/{tok['id']}").status_code == 204
                assert ended.wait(6), how
                assert any("unauthorized" in line for line in lines), lines[-5:]


def test_keys_and_tokens_survive_a_restart(daemon_factory: Any, tmp_path: Path) -> None:
    d = daemon_factory(args=["--teardown-on-exit", "false"], data_dir=tmp_path / "data")
    with d.client() as admin:
        key = tenant(admin, "lasting", sandboxes=5)
        with client(d, key) as t:
            sb = create_sandbox(t)
            tok = token(t, sb["id"], "read")
    d.stop()
    d = daemon_factory(data_dir=tmp_path / "data")
    with client(d, key) as t:
        assert [s["id"] for s in t.get("/v1/sandboxes").json()["sandboxes"]] == [sb["id"]]
        assert t.get("/v1/usage").json()["quotas"]["sandboxes"] == 5
    with client(d, tok["token"]) as r:
        assert r.get(f"/v1/sandboxes/{sb['id']}").json()["tenant"] == "lasting"


def test_requests_are_audited_with_who_made_them(access: Daemon) -> None:
    with access.client() as admin:
        key = tenant(admin, "audited")
        key_id = admin.get("/v1/admin/tenants/audited/keys").json()["keys"][0]["id"]
        with client(access, key) as t:
            sb = create_sandbox(t)
            tok = token(t, sb["id"], "read")
            bare = httpx.Client(base_url=access.url, timeout=30)
            assert bare.get(f"/v1/sandboxes/{sb['id']}?access_token={tok['token']}").status_code == 200
            bare.close()
            events = t.get(f"/v1/sandboxes/{sb['id']}/events").json()["events"]
            created = next(e for e in events if e["type"] == "sandbox.created")
            assert created["tenant"] == "audited" and created["by"] == key_id
            made = next(e for e in events if e["type"] == "token.created")
            assert made["token_id"] == tok["id"] and made["by"] == key_id
    log = access.log_path.read_text()
    assert f"credential={key_id}" in log and "tenant=audited" in log
    assert f"credential={tok['id']}" in log
    assert tok["token"] not in log  # never the secret, even from a query string
    assert API_KEY not in log
