"""A sandbox's network: the request each form of `network=` sends, the `egress` of a sandbox
as the model reads it, and the server's refusal passed on as `InvalidRequest`. Egress itself
needs a host set up for it (tests/integration/test_egress.py builds one in namespaces of its
own), so the requests for egress here go to a daemon without it, which checks them in full and
then refuses them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import sandstream
from sandstream import AsyncSandbox, Egress, Sandbox, SandboxInfo
from sandstream._core import sandbox_body

from .conftest import API_KEY, Daemon

SANDBOX = {
    "id": "sb_0123456789abcdef",
    "template": "base",
    "status": "running",
    "created_at": "2025-01-01T00:00:00Z",
    "expires_at": None,
    "ttl_seconds": 0,
    "env": {},
    "cwd": "/workspace",
    "limits": {"memory_mb": 512, "pids": 256, "cpu_percent": 100, "disk_mb": 256, "open_files": 1024},
    "metadata": {},
    "processes_running": 0,
}


def test_the_model_reads_egress_and_its_absence() -> None:
    info = SandboxInfo.from_json({
        **SANDBOX,
        "network": "egress",
        "egress": {"allow": ["pypi.org", "*.pythonhosted.org", "198.18.0.0/15"],
                   "deny": ["203.0.113.7"], "address": "10.200.0.15", "gateway": "10.200.0.14"},
    })
    assert info.network == "egress"
    assert info.egress == Egress(allow=["pypi.org", "*.pythonhosted.org", "198.18.0.0/15"],
                                 deny=["203.0.113.7"], address="10.200.0.15", gateway="10.200.0.14")
    assert info.egress.allow == ("pypi.org", "*.pythonhosted.org", "198.18.0.0/15")
    opened = SandboxInfo.from_json({**SANDBOX, "network": "egress",
                                    "egress": {"allow": None, "deny": [], "address": None, "gateway": None}})
    assert opened.egress == Egress()
    assert opened.egress.allow is None and opened.egress.address is None
    for without in ({"network": "loopback", "egress": None}, {"network": "none"}):
        assert SandboxInfo.from_json({**SANDBOX, **without}).egress is None


def test_each_form_of_network_makes_its_request() -> None:
    def network(value: Any) -> Any:
        return sandbox_body("base", None, None, None, None, None, {}, value).get("network", "absent")

    assert network(None) == "absent"
    for mode in ("none", "loopback", "egress"):
        assert network(mode) == mode
    assert network(Egress()) == {"egress": {}}
    assert network(Egress(allow=["pypi.org"])) == {"egress": {"allow": ["pypi.org"]}}
    assert network(Egress(allow=[], deny=["*.example.com"])) == {"egress": {"allow": [], "deny": ["*.example.com"]}}
    # What the server says of a sandbox is a policy that makes another one like it.
    held = Egress(allow=["pypi.org"], deny=["203.0.113.7"], address="10.200.0.15", gateway="10.200.0.14")
    assert network(held) == {"egress": {"allow": ["pypi.org"], "deny": ["203.0.113.7"]}}
    assert network({"egress": True}) == {"egress": True}
    with pytest.raises(TypeError, match="not a string"):
        Egress(allow="pypi.org")


def test_loopback_and_none_need_no_egress(daemon: Daemon) -> None:
    with Sandbox.create() as sb:
        assert sb.info.network == "loopback" and sb.info.egress is None
    with Sandbox.create(network="none") as sb:
        assert sb.info.network == "none" and sb.info.egress is None


@pytest.fixture
def sent(daemon_without_egress: Daemon) -> Iterator[tuple[httpx.Client, list[Any]]]:
    """A client of the daemon without egress that keeps the body of each sandbox it asks for."""
    bodies: list[Any] = []

    def keep(request: httpx.Request) -> None:
        if request.url.path == "/v1/sandboxes" and request.method == "POST":
            bodies.append(json.loads(request.content))

    with httpx.Client(event_hooks={"request": [keep]}) as client:
        yield client, bodies


@pytest.mark.parametrize(
    ("network", "wire"),
    [
        ("egress", "egress"),
        (Egress(allow=["pypi.org", "*.github.com", "198.18.0.0/15"], deny=["203.0.113.7"]),
         {"egress": {"allow": ["pypi.org", "*.github.com", "198.18.0.0/15"], "deny": ["203.0.113.7"]}}),
        ({"egress": {"allow": ["pypi.org"], "deny": []}}, {"egress": {"allow": ["pypi.org"], "deny": []}}),
        ({"egress": True}, {"egress": True}),
    ],
    ids=["mode", "policy", "dict", "true"],
)
def test_a_daemon_without_egress_refuses_it_by_name(
    daemon_without_egress: Daemon, sent: tuple[httpx.Client, list[Any]], network: Any, wire: Any
) -> None:
    client, bodies = sent
    with pytest.raises(sandstream.InvalidRequest) as refused:
        Sandbox.create(network=network, base_url=daemon_without_egress.url, api_key=API_KEY,
                       http_client=client)
    assert refused.value.status == 400 and refused.value.code == "invalid_request"
    assert "egress_pool" in refused.value.message
    assert bodies == [{"template": "base", "network": wire}]
    assert Sandbox.list(base_url=daemon_without_egress.url, api_key=API_KEY) == []


def test_a_bad_policy_is_refused_before_anything_else(daemon_without_egress: Daemon) -> None:
    cases: list[tuple[Any, str]] = [
        (Egress(allow=["10.0.0.1/8"]), "10.0.0.0/8"),
        (Egress(deny=["bad name!"]), "bad name!"),
        ({"egress": {"allow": [], "block": []}}, "block"),
        ("wan", "network"),
    ]
    for network, words in cases:
        with pytest.raises(sandstream.InvalidRequest) as refused:
            Sandbox.create(network=network, base_url=daemon_without_egress.url, api_key=API_KEY)
        assert words in refused.value.message, (network, refused.value.message)


async def test_async_create_sends_the_policy_and_raises_the_same(daemon_without_egress: Daemon) -> None:
    with pytest.raises(sandstream.InvalidRequest, match="egress_pool"):
        await AsyncSandbox.create(network=Egress(allow=["pypi.org"]), base_url=daemon_without_egress.url,
                                  api_key=API_KEY)
    async with await AsyncSandbox.create(network="none", base_url=daemon_without_egress.url,
                                         api_key=API_KEY) as sb:
        assert sb.info.network == "none" and sb.info.egress is None


# --- update_network: new rules for a sandbox made with egress ---------------------------------


def canned_client(answer: dict[str, Any]) -> tuple[httpx.Client, list[tuple[str, str, Any]]]:
    """A client whose server answers every request with `answer`, keeping what was asked."""
    asked: list[tuple[str, str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append((request.method, request.url.path,
                      json.loads(request.content) if request.content else None))
        return httpx.Response(200 if request.method != "POST" else 201, json=answer)

    return httpx.Client(transport=httpx.MockTransport(handle)), asked


def test_update_network_sends_each_form_and_keeps_the_answer() -> None:
    held = {"allow": ["files.pypi.org"], "deny": ["pypi.org"], "address": "10.200.0.15",
            "gateway": "10.200.0.14"}
    client, asked = canned_client({**SANDBOX, "network": "egress", "egress": held})
    sb = Sandbox.create(network="egress", base_url="http://sandstream.test", api_key=API_KEY,
                        http_client=client)
    path = f"/v1/sandboxes/{SANDBOX['id']}/network"
    for network, wire in [
        (Egress(allow=["files.pypi.org"], deny=["pypi.org"]),
         {"egress": {"allow": ["files.pypi.org"], "deny": ["pypi.org"]}}),
        (Egress(allow=[]), {"egress": {"allow": []}}),
        ("egress", "egress"),
        ({"egress": True}, {"egress": True}),
        # What the server says of a sandbox goes back as its rules only.
        (Egress.from_json(held), {"egress": {"allow": ["files.pypi.org"], "deny": ["pypi.org"]}}),
    ]:
        asked.clear()
        info = sb.update_network(network)
        assert asked == [("PATCH", path, wire)]
        assert info is sb.info and info.egress == Egress.from_json(held)


async def test_async_update_network_sends_the_same() -> None:
    asked: list[tuple[str, str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append((request.method, request.url.path, json.loads(request.content)))
        return httpx.Response(200 if request.method != "POST" else 201,
                              json={**SANDBOX, "network": "egress",
                                    "egress": {"allow": [], "deny": [], "address": None,
                                               "gateway": None}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        sb = await AsyncSandbox.create(network="egress", base_url="http://sandstream.test",
                                       api_key=API_KEY, http_client=client)
        info = await sb.update_network(Egress(allow=[]))
    assert asked[-1] == ("PATCH", f"/v1/sandboxes/{SANDBOX['id']}/network",
                         {"egress": {"allow": []}})
    assert info.egress == Egress(allow=[])


def test_update_network_without_egress_is_a_conflict_and_a_bad_rule_is_named(
        daemon_without_egress: Daemon) -> None:
    """A sandbox made without egress keeps its mode (`Conflict`); a bad rule is refused by name
    first, and a mode without egress is a `Conflict` too. Changing the rules of a sandbox with
    egress needs a host set up for it: tests/integration/test_egress.py."""
    options: dict[str, Any] = {"base_url": daemon_without_egress.url, "api_key": API_KEY}
    with Sandbox.create(**options) as sb:
        for network in ("egress", Egress(allow=["pypi.org"]), Egress(allow=[]), "loopback"):
            with pytest.raises(sandstream.Conflict) as refused:
                sb.update_network(network)
            assert refused.value.status == 409 and refused.value.code == "conflict"
        with pytest.raises(sandstream.InvalidRequest, match="10.0.0.0/8"):
            sb.update_network(Egress(allow=["10.0.0.1/8"]))
        assert sb.refresh().network == "loopback" and sb.info.egress is None
        gone = httpx.delete(f"{daemon_without_egress.url}/v1/sandboxes/{sb.id}",
                            headers={"Authorization": f"Bearer {API_KEY}"})
        assert gone.status_code == 204
        with pytest.raises(sandstream.NotFound):
            sb.update_network("egress")
