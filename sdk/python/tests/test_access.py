"""Tenants, keys, usage and scoped tokens against the real daemon, with the sync and async
clients: a tenant sees its own sandboxes only, a read token cannot exec, usage shows quotas."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from sandstream import (
    Admin,
    AsyncAdmin,
    AsyncSandbox,
    Conflict,
    Forbidden,
    NotFound,
    Sandbox,
    Token,
    Unauthorized,
)
from sandstream.errors import error_from_code

from .conftest import Daemon


def unique(prefix: str) -> str:
    """A tenant name of its own: the session's daemon keeps every test's tenants."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(daemon: Daemon) -> Iterator[Admin]:
    with Admin() as a:
        yield a


def test_forbidden_is_typed() -> None:
    err = error_from_code("forbidden", "no scope exec", 403)
    assert isinstance(err, Forbidden) and err.status == 403 and str(err) == "403 forbidden: no scope exec"


def test_tenants_and_keys(admin: Admin) -> None:
    name = unique("sdk")
    tenant = admin.create_tenant(name, quotas={"sandboxes": 3})
    assert tenant.name == name and tenant.quotas["sandboxes"] == 3
    assert tenant.usage["sandboxes"] == 0
    assert name in [t.name for t in admin.list_tenants()]
    with pytest.raises(Conflict):
        admin.create_tenant(name)
    key = admin.create_key(name)
    assert key.tenant == name and key.key is not None and key.key.startswith("ssk_")
    listed = admin.list_keys(name)
    assert [k.id for k in listed] == [key.id] and listed[0].key is None
    assert admin.set_quotas(name, {"memory_mb": 512}).quotas["sandboxes"] == 0
    # A tenant's key is no admin key.
    with Admin(api_key=key.key) as intruder, pytest.raises(Forbidden):
        intruder.list_tenants()
    admin.revoke_key(name, key)
    with pytest.raises(Unauthorized):
        Sandbox.list(api_key=key.key)
    admin.delete_tenant(name)
    with pytest.raises(NotFound):
        admin.get_tenant(name)


def test_a_tenant_sees_only_its_own_sandboxes(admin: Admin) -> None:
    a, b = unique("alpha"), unique("beta")
    for name in (a, b):
        admin.create_tenant(name)
    key_a, key_b = admin.create_key(a).key, admin.create_key(b).key
    assert key_a is not None and key_b is not None
    with Sandbox.create(api_key=key_a) as mine, Sandbox.create(api_key=key_b) as theirs:
        assert mine.info.tenant == a and theirs.info.tenant == b
        assert [s.id for s in Sandbox.list(api_key=key_a)] == [mine.id]
        assert [s.id for s in Sandbox.list(api_key=key_b)] == [theirs.id]
        assert {mine.id, theirs.id} <= {s.id for s in Sandbox.list()}
        with pytest.raises(NotFound):
            Sandbox.connect(theirs.id, api_key=key_a)
    # The admin makes one for a tenant.
    with Sandbox.create(tenant=a) as made:
        assert made.info.tenant == a
        assert [s.id for s in Sandbox.list(api_key=key_a)] == [made.id]
    for name in (a, b):
        admin.delete_tenant(name)


def test_a_read_token_cannot_exec(daemon: Daemon) -> None:
    with Sandbox.create() as sb:
        assert sb.info.tenant is None
        token = sb.create_token(["read"], ttl_seconds=600)
        assert isinstance(token, Token) and token.scopes == ("read",)
        assert token.token is not None and token.token.startswith("sst_")
        assert token.expires_at is not None and token.sandbox_id == sb.id
        viewer = Sandbox.connect(sb.id, api_key=token.token)
        try:
            assert viewer.refresh().id == sb.id
            with pytest.raises(Forbidden):
                viewer.exec("true")
            with pytest.raises(Forbidden):
                viewer.create_token(["exec"])
        finally:
            viewer.close()
        with pytest.raises(TypeError):
            sb.create_token("read")
        # connect() reads the sandbox: `read` as well as `exec`.
        ex = sb.create_token(["read", "exec"])
        assert ex.token is not None
        runner = Sandbox.connect(sb.id, api_key=ex.token)
        try:
            assert runner.exec("echo via token").stdout == "via token\n"
            assert {t.id for t in sb.list_tokens()} == {token.id, ex.id}
            assert all(t.token is None for t in sb.list_tokens())
            sb.revoke_token(ex)
            with pytest.raises(Unauthorized):
                runner.exec("true")
        finally:
            runner.close()
        sb.revoke_token(token.id)
        assert sb.list_tokens() == []


def test_browser_url_carries_a_port_token_not_the_key(daemon: Daemon) -> None:
    with Sandbox.create() as sb:
        sb.processes.start("python3 -m http.server 8000 --bind 127.0.0.1", id="web")
        sb.wait_for_port(8000, timeout=20)
        url = sb.browser_url(8000, ttl_seconds=300)
        assert "access_token=sst_" in url and "sdk-test-key" not in url
        [token] = sb.list_tokens()
        assert token.scopes == ("port:8000",)
        # The preview host resolves to this machine; the daemon takes the Host header.
        port = sb.get_port(8000)
        daemon_url = daemon.url + "/" + url.split("/", 3)[3]
        r = httpx.get(daemon_url, headers={"Host": port.host})
        assert r.status_code == 302, r.text
        assert "sandstream_preview" in r.headers.get("set-cookie", "")


def test_usage_reports_quotas(admin: Admin) -> None:
    name = unique("quota")
    admin.create_tenant(name, quotas={"sandboxes": 2, "memory_mb": 1024})
    key = admin.create_key(name).key
    assert key is not None
    with Sandbox.create(api_key=key, memory_mb=256):
        usage = Sandbox.usage(api_key=key)
        assert usage.name == name
        assert usage.quotas["sandboxes"] == 2 and usage.quotas["memory_mb"] == 1024
        assert usage.usage["sandboxes"] == 1 and usage.usage["memory_mb"] == 256
        with pytest.raises(Conflict):
            admin.delete_tenant(name)
    assert Sandbox.usage().name is None
    admin.delete_tenant(name)


async def test_async_admin_and_tokens(daemon: Daemon) -> None:
    name = unique("async")
    async with AsyncAdmin() as admin:
        await admin.create_tenant(name, {"sandboxes": 1})
        key = (await admin.create_key(name)).key
        assert key is not None
        async with await AsyncSandbox.create(api_key=key) as sb:
            assert sb.info.tenant == name
            assert (await AsyncSandbox.usage(api_key=key)).usage["sandboxes"] == 1
            token = await sb.create_token(["read"])
            assert [t.id for t in await sb.list_tokens()] == [token.id]
            assert token.token is not None
            viewer = await AsyncSandbox.connect(sb.id, api_key=token.token)
            try:
                with pytest.raises(Forbidden):
                    await viewer.exec("true")
            finally:
                await viewer.close()
            await sb.revoke_token(token)
        assert name in [t.name for t in await admin.list_tenants()]
        await admin.delete_tenant(name)
