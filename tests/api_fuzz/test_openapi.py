"""Fuzzes every operation of spec/openapi.yaml against the real daemon with schemathesis.

Valid and invalid parameters and bodies; each response must not be a 5xx and must match the
spec: a documented status, its content type, headers and schema, invalid input refused, the key
required, other methods `405` with `Allow`. Each SSE event's `data:` must match the schema the
media type's `x-sse-events` names for it. Path ids are real objects (conftest.py `World`), so
requests get past `404`; operations that destroy their object get a fresh one per example.
Deterministic and bounded for CI; SANDSTREAM_FUZZ_EXAMPLES=N and SANDSTREAM_FUZZ_RANDOM=1
explore further.
"""

from __future__ import annotations

import json
import os
import secrets
from functools import cache
from typing import Any

import httpx
import jsonschema
import schemathesis
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from schemathesis import Case
from schemathesis.core.parameters import ParameterLocation

import helpers
from conftest import ROOT, World

SPEC = ROOT / "spec" / "openapi.yaml"
SPEC_URI = "urn:sandstream:openapi"
EXAMPLES = int(os.environ.get("SANDSTREAM_FUZZ_EXAMPLES", "25"))

# Streams that may never end by themselves: a `follow` of the journal or of a process, a files
# watch. Schemathesis reads such a stream until a few events or its request timeout have passed,
# then validates what it got; the daemon's one-second keepalive lets it see the time pass.
STREAMS = ["getSandboxLogs", "getSandboxEvents", "getProcessLogs"]
# The WebSocket routes (execPty, execWs) are fuzzed as what schemathesis sends, a GET without
# `Upgrade`: their parameters and ids are checked, and the answer is 400; what flows over an
# upgraded socket is tested in tests/integration (test_terminals.py, test_flow.py).
# Each example of these starts a sandbox or an interpreter: fewer of them.
COSTLY = ["createSandbox", "deleteSandbox", "createContext", "deleteContext", "restartContext",
          "runCode"]
# Request body fields that are required somewhere; any other field may be null (= left out).
REQUIRED_FIELDS = {"code", "signal", "path", "from", "to"}


def fuzz_config() -> schemathesis.Config:
    """The run's settings: the key, the bounds. The daemon's address comes with each call."""
    return schemathesis.Config.from_dict({
        "auth": {"openapi": {"bearerAuth": {"bearer": helpers.API_KEY}}},
        "request-timeout": 20,
        "max-stream-events": 50,
        "generation": {
            "max-examples": EXAMPLES,
            "deterministic": os.environ.get("SANDSTREAM_FUZZ_RANDOM") != "1",
            "database": "none",
            # An unknown header or query parameter is ignored, as HTTP servers do: adding one
            # does not make a request invalid.
            "allow-extra-parameters": False,
        },
        "checks": {
            # A valid request may still name no such file, process or signal: 400 and 404 are
            # right answers to it, so valid-data acceptance proves nothing here.
            "positive_data_acceptance": {"enabled": False},
            # Stateful checks; this run has no links between operations.
            "use_after_free": {"enabled": False},
            "ensure_resource_availability": {"enabled": False},
            "object_level_authorization": {"enabled": False},
        },
        "phases": {"stateful": {"enabled": False}},
        "operations": [
            {"include-operation-id": STREAMS, "request-timeout": 1, "max-stream-events": 5},
            # A watch sends `ready`, then only what changes: one event is all there is.
            {"include-operation-id": "watchFiles", "request-timeout": 2, "max-stream-events": 1},
            {"include-operation-id": COSTLY, "generation": {"max-examples": max(EXAMPLES // 3, 1)}},
        ],
    })


schema = schemathesis.openapi.from_path(SPEC, config=fuzz_config())


def operation_id(case: Case) -> str:
    """The operationId of the case's operation."""
    return str(case.operation.definition.raw.get("operationId", ""))


def start_process(client: httpx.Client, sandbox: str, cmd: str) -> str:
    """A running background process in `sandbox`."""
    r = client.post(f"/v1/sandboxes/{sandbox}/processes", json={"cmd": cmd})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def created(client: httpx.Client, url: str, body: dict[str, Any]) -> str:
    """POSTs `body` to `url`, asserts 201 and returns the new object's id."""
    r = client.post(url, json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


# What an operation destroys (or, for signals and stdin, disturbs): each example gets its own,
# made before the call and deleted after it.
FRESH = {"deleteSandbox": "/v1/sandboxes/{id}",
         "killProcess": "/v1/sandboxes/{id}/processes/{pid}",
         "signalProcess": "/v1/sandboxes/{id}/processes/{pid}",
         "writeStdin": "/v1/sandboxes/{id}/processes/{pid}",
         "deleteSession": "/v1/sandboxes/{id}/sessions/{sid}",
         "deleteContext": "/v1/sandboxes/{id}/contexts/{cid}",
         "closePort": "/v1/sandboxes/{id}/ports/{port}",
         "deleteTenant": "/v1/admin/tenants/{tenant}",
         "revokeKey": "/v1/admin/tenants/{tenant}/keys/{key_id}",
         "revokeToken": "/v1/sandboxes/{id}/tokens/{token_id}"}


def use_real_ids(case: Case, world: World, client: httpx.Client) -> list[str]:
    """Replaces generated path ids with real ones, unless the ids are the invalid part.

    Returns the objects made for this example alone, to delete after it.
    """
    meta = case.meta
    path = meta.components.get(ParameterLocation.PATH) if meta is not None else None
    if not case.path_parameters or (path is not None and path.mode.is_negative):
        return []
    op = operation_id(case)
    sb = f"/v1/sandboxes/{world.sandbox}"
    real: dict[str, Any] = {"id": world.sandbox, "pid": world.process, "sid": world.session,
                            "cid": world.context, "n": world.run, "port": world.port,
                            "tenant": world.tenant, "key_id": world.key, "token_id": world.token}
    if op == "deleteSandbox":
        real["id"] = helpers.create_sandbox(client)["id"]
    elif op in ("killProcess", "signalProcess"):
        real["pid"] = start_process(client, world.sandbox, "sleep 600")
    elif op == "writeStdin":
        real["pid"] = start_process(client, world.sandbox, "cat >/dev/null")
    elif op == "deleteSession":
        real["sid"] = created(client, f"{sb}/sessions", {})
    elif op == "deleteContext":
        real["cid"] = created(client, f"{sb}/contexts", {"language": "bash"})
    elif op == "closePort":
        real["port"] = world.port + 1
        assert client.post(f"{sb}/ports", json={"port": real["port"]}).status_code in (200, 201)
    elif op == "deleteTenant":
        real["tenant"] = f"fuzz-{secrets.token_hex(4)}"
        assert client.post("/v1/admin/tenants", json={"name": real["tenant"]}).status_code == 201
    elif op == "revokeKey":
        real["key_id"] = created(client, f"/v1/admin/tenants/{world.tenant}/keys", {})
    elif op == "revokeToken":
        real["token_id"] = created(client, f"{sb}/tokens", {"scopes": ["read"]})
    for name in case.path_parameters:
        case.path_parameters[name] = real[name]
    return [FRESH[op].format(**real)] if op in FRESH else []


def null_for_optional(case: Case) -> bool:
    """Whether the body sets an optional field to null, which the spec reads as left out."""
    body = case.body
    if not isinstance(body, dict):
        return False
    limits = body.get("limits")
    return (any(v is None and k not in REQUIRED_FIELDS for k, v in body.items())
            or (isinstance(limits, dict) and None in limits.values()))


def clean_up(case: Case, response: Any, world: World, client: httpx.Client) -> None:
    """Removes what a successful create made, so examples do not pile up sandboxes."""
    if response.status_code != 201:
        return
    op = operation_id(case)
    body = response.json()
    if op == "createSandbox":
        client.delete(f"/v1/sandboxes/{body['id']}")
    elif op == "createContext":
        client.delete(f"/v1/sandboxes/{world.sandbox}/contexts/{body['id']}")
    elif op == "createSession":
        client.delete(f"/v1/sandboxes/{world.sandbox}/sessions/{body['id']}")
    elif op == "startProcess":
        client.delete(f"/v1/sandboxes/{world.sandbox}/processes/{body['id']}")
    elif op == "exposePort":
        client.delete(f"/v1/sandboxes/{world.sandbox}/ports/{body['port']}")


@cache
def spec_document() -> tuple[dict[str, Any], Registry]:
    """The spec as data, and a registry that resolves its `#/components/...` references."""
    doc: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    registry = Registry().with_resource(SPEC_URI, Resource.from_contents(doc, DRAFT202012))
    return doc, registry


def pointer(*parts: str) -> str:
    """A JSON pointer from unescaped parts."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def node_at(doc: dict[str, Any], where: str) -> tuple[Any, str]:
    """The node at JSON pointer `where`, its local `$ref`s followed; and where that is."""
    node: Any = doc
    for part in where.split("/")[1:]:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    if isinstance(node, dict) and "$ref" in node:
        return node_at(doc, node["$ref"].removeprefix("#"))
    return node, where


def documented_events(case: Case, status: int) -> dict[str, str]:
    """Event name -> where the schema of its `data:` is, from the response's `x-sse-events`."""
    doc, _ = spec_document()
    op = pointer("paths", case.operation.path, case.method.lower())
    _, response = node_at(doc, op + pointer("responses", str(status)))
    events, where = node_at(doc, response + pointer("content", "text/event-stream", "x-sse-events"))
    if "properties" in events:
        events, where = events["properties"], where + "/properties"
    if "pandastack" in events:
        body_format = case.body.get("format") if isinstance(case.body, dict) else None
        fmt = body_format or (case.query or {}).get("format") or "pandastack"
        events, where = node_at(doc, where + pointer(fmt))
        events, where = events["properties"], where + "/properties"
    return {name: where + pointer(name) for name in events}


def parse_events(body: bytes) -> list[dict[str, str]]:
    """The events of a text/event-stream body (comments skipped; a cut last event dropped)."""
    events = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n")[:-1]:
        event: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            event[field] = value.removeprefix(" ")
        if "data" in event:
            events.append(event)
    return events


def check_sse_events(case: Case, response: Any) -> None:
    """Each event of an SSE response is documented and its data matches its schema."""
    content_type = response.headers.get("content-type", [""])[0]
    if not content_type.startswith("text/event-stream"):
        return
    _, registry = spec_document()
    documented = documented_events(case, response.status_code)
    for event in parse_events(response.content):
        name = event.get("event", "message")
        assert name in documented, (
            f"{operation_id(case)}: event `{name}` is not in x-sse-events ({sorted(documented)})")
        validator = jsonschema.Draft202012Validator({"$ref": f"{SPEC_URI}#{documented[name]}"},
                                                    registry=registry)
        data = json.loads(event["data"])
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(data)]
        assert not errors, f"{operation_id(case)}: event `{name}` data {data}: {errors}"


@schema.parametrize()
def test_operation(case: Case, world: World, client: httpx.Client) -> None:
    """One operation, fuzzed: no 5xx, and every response as the spec says."""
    meta = case.meta
    if meta is not None and meta.generation.mode.is_negative and null_for_optional(case):
        return
    fresh = use_real_ids(case, world, client)
    response = case.call(base_url=world.url)
    try:
        case.validate_response(response)
        check_sse_events(case, response)
    finally:
        clean_up(case, response, world, client)
        for url in fresh:
            client.delete(url)
