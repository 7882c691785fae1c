"""Access: tenants, their keys and quotas (the admin key's), usage, and scoped tokens of one
sandbox (`sst_...`), which a browser may carry in `?access_token=` where a key must never go.

What both clients share, without I/O: the value types and the requests of the access API. The
surfaces in `_async/` (and `_sync/`, generated from it) send them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ._core import Call, ignore_body

# The quotas a tenant may have; 0 (or absent) means none (`watches`: the daemon's default share).
QUOTA_NAMES = ("sandboxes", "running_processes", "memory_mb", "cpu_percent", "disk_mb", "streams",
               "requests_per_second", "template_storage_mb", "volume_storage_mb", "watches")


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class Token:
    """A scoped token of one sandbox. `token` (the secret, `sst_...`) is set only in the answer
    that made it; a listed token has `None`."""

    id: str
    sandbox_id: str
    scopes: tuple[str, ...]
    created_at: str | None
    expires_at: str | None
    token: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Token:
        """Parses a Token object."""
        return cls(id=str(data["id"]), sandbox_id=str(data.get("sandbox_id", "")),
                   scopes=tuple(str(s) for s in data.get("scopes") or ()),
                   created_at=_opt_str(data.get("created_at")),
                   expires_at=_opt_str(data.get("expires_at")), token=_opt_str(data.get("token")))


@dataclass(frozen=True)
class Tenant:
    """A tenant, its quotas (0: none) and what it takes now. `/v1/usage` of the admin key
    answers one with `name` None and no quotas."""

    name: str | None
    quotas: dict[str, int]
    usage: dict[str, int]
    created_at: str | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Tenant:
        """Parses a Tenant object."""
        return cls(name=_opt_str(data.get("name")),
                   quotas={str(k): _int(v) for k, v in (data.get("quotas") or {}).items()},
                   usage={str(k): _int(v) for k, v in (data.get("usage") or {}).items()},
                   created_at=_opt_str(data.get("created_at")))


@dataclass(frozen=True)
class Key:
    """A tenant's key. `key` (the secret, `ssk_...`) is set only in the answer that made it."""

    id: str
    tenant: str
    created_at: str | None
    key: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Key:
        """Parses a Key object."""
        return cls(id=str(data["id"]), tenant=str(data.get("tenant", "")),
                   created_at=_opt_str(data.get("created_at")), key=_opt_str(data.get("key")))


def tokens_path(sandbox_path: str, token_id: str | None = None) -> str:
    """`.../tokens`, or `.../tokens/{token_id}`."""
    base = sandbox_path + "/tokens"
    return base if token_id is None else f"{base}/{quote(token_id, safe='')}"


def create_token_call(sandbox_path: str, scopes: Sequence[str],
                      ttl_seconds: int | None) -> Call[Token]:
    """`POST .../tokens`: `read`, `exec`, `terminal`, `files:read`, `files:write`, `port:N`."""
    # A str is a Sequence[str] too: "read" must not become four one-letter scopes.
    if isinstance(scopes, str):
        raise TypeError(f"scopes is a list of scopes, not a string: [{scopes!r}]")
    body: dict[str, Any] = {"scopes": [str(s) for s in scopes]}
    if ttl_seconds is not None:
        body["ttl_seconds"] = int(ttl_seconds)
    return Call("POST", tokens_path(sandbox_path), Token.from_json, json=body)


def list_tokens_call(sandbox_path: str) -> Call[list[Token]]:
    """`GET .../tokens`: the live tokens, without their secrets."""
    return Call("GET", tokens_path(sandbox_path),
                lambda data: [Token.from_json(t) for t in data.get("tokens", [])])


def revoke_token_call(sandbox_path: str, token: Token | str) -> Call[None]:
    """`DELETE .../tokens/{token_id}`."""
    token_id = token.id if isinstance(token, Token) else token
    return Call("DELETE", tokens_path(sandbox_path, token_id), ignore_body)


def usage_call() -> Call[Tenant]:
    """`GET /v1/usage`: the caller's tenant."""
    return Call("GET", "/v1/usage", Tenant.from_json)


def tenant_path(name: str | None = None) -> str:
    """`/v1/admin/tenants`, or `/v1/admin/tenants/{name}`."""
    return "/v1/admin/tenants" if name is None else f"/v1/admin/tenants/{quote(name, safe='')}"


def quotas_body(quotas: Mapping[str, int] | None) -> dict[str, int]:
    """The `quotas` object; the server refuses an unknown name."""
    return {str(k): int(v) for k, v in (quotas or {}).items()}


def create_tenant_call(name: str, quotas: Mapping[str, int] | None) -> Call[Tenant]:
    """`POST /v1/admin/tenants`."""
    return Call("POST", tenant_path(), Tenant.from_json,
                json={"name": name, "quotas": quotas_body(quotas)})


def list_tenants_call() -> Call[list[Tenant]]:
    """`GET /v1/admin/tenants`."""
    return Call("GET", tenant_path(),
                lambda data: [Tenant.from_json(t) for t in data.get("tenants", [])])


def get_tenant_call(name: str) -> Call[Tenant]:
    """`GET /v1/admin/tenants/{name}`."""
    return Call("GET", tenant_path(name), Tenant.from_json)


def set_quotas_call(name: str, quotas: Mapping[str, int] | None) -> Call[Tenant]:
    """`PATCH /v1/admin/tenants/{name}`: every quota is set, absent ones become none."""
    return Call("PATCH", tenant_path(name), Tenant.from_json, json={"quotas": quotas_body(quotas)})


def delete_tenant_call(name: str) -> Call[None]:
    """`DELETE /v1/admin/tenants/{name}`: `Conflict` while it has sandboxes."""
    return Call("DELETE", tenant_path(name), ignore_body)


def create_key_call(tenant: str) -> Call[Key]:
    """`POST /v1/admin/tenants/{tenant}/keys`."""
    return Call("POST", tenant_path(tenant) + "/keys", Key.from_json)


def list_keys_call(tenant: str) -> Call[list[Key]]:
    """`GET /v1/admin/tenants/{tenant}/keys`, without the keys themselves."""
    return Call("GET", tenant_path(tenant) + "/keys",
                lambda data: [Key.from_json(k) for k in data.get("keys", [])])


def revoke_key_call(tenant: str, key: Key | str) -> Call[None]:
    """`DELETE /v1/admin/tenants/{tenant}/keys/{key_id}`."""
    key_id = key.id if isinstance(key, Key) else key
    return Call("DELETE", f"{tenant_path(tenant)}/keys/{quote(key_id, safe='')}", ignore_body)
