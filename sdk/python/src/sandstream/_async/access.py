# unasync: async only
"""Access, for asyncio: a sandbox's scoped tokens, the usage of a key's tenant, and `AsyncAdmin`
(tenants, quotas, keys)."""
# unasync: sync only
# """Access: a sandbox's scoped tokens, the usage of a key's tenant, and `Admin` (tenants,
# quotas, keys)."""
# unasync: end

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

import httpx

from .._core import ClientConfig
from ..access import (
    Key,
    Tenant,
    Token,
    create_key_call,
    create_tenant_call,
    create_token_call,
    delete_tenant_call,
    get_tenant_call,
    list_keys_call,
    list_tenants_call,
    list_tokens_call,
    revoke_key_call,
    revoke_token_call,
    set_quotas_call,
    usage_call,
)
from .api import _AsyncApi, _AsyncKeyClient, _AsyncSandboxSurface


class _AsyncAccess(_AsyncSandboxSurface):
    """The token methods of `AsyncSandbox`, and its static `usage`."""

    @staticmethod
    async def usage(
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> Tenant:
        """What the key's tenant takes now, and its quotas (the admin key: its own sandboxes,
        `name` None, no quotas)."""
        api = _AsyncApi(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return await api.call(usage_call())
        finally:
            await api.aclose()

    async def create_token(self, scopes: Sequence[str], ttl_seconds: int | None = None) -> Token:
        """Makes a token that opens this sandbox alone, for `scopes` (`read`, `exec`,
        `terminal`, `files:read`, `files:write`, `port:N`), until `ttl_seconds` pass (the
        server's default: an hour; at most 7 days), it is revoked or the sandbox is deleted.
        Its secret, `token.token`, is shown this once. Needs a key, not a token."""
        return await self._api.call(create_token_call(self._path, scopes, ttl_seconds))

    async def list_tokens(self) -> builtins.list[Token]:
        """The sandbox's live tokens, without their secrets."""
        return await self._api.call(list_tokens_call(self._path))

    async def revoke_token(self, token: Token | str) -> None:
        """Revokes a token (or a token id); requests and streams made with it end."""
        await self._api.call(revoke_token_call(self._path, token))


class AsyncAdmin(_AsyncKeyClient):
    """The admin key's API: tenants, their quotas and keys. The server is `base_url`, else
    `SANDSTREAM_URL`; the key is `api_key`, else `SANDSTREAM_API_KEY` (the daemon's own key: a
    tenant's key is `Forbidden` here). Used as a context manager, its connections close on exit.
    """

    async def create_tenant(self, name: str, quotas: Mapping[str, int] | None = None) -> Tenant:
        """Creates a tenant (`Conflict` if it exists). `quotas`, 0 or absent meaning none:
        `sandboxes`, `running_processes`, `memory_mb`, `cpu_percent`, `disk_mb` (sums of its
        sandboxes' limits), `streams`, `requests_per_second`, `template_storage_mb` (its
        image and snapshot templates' sizes), `volume_storage_mb` (its volumes' sizes),
        `watches` (0: the daemon's default share)."""
        return await self._api.call(create_tenant_call(name, quotas))

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, with its usage."""
        return await self._api.call(list_tenants_call())

    async def get_tenant(self, name: str) -> Tenant:
        """A tenant, its quotas and usage; `NotFound` if there is none of that name."""
        return await self._api.call(get_tenant_call(name))

    async def set_quotas(self, name: str, quotas: Mapping[str, int] | None) -> Tenant:
        """Sets every quota of a tenant: absent ones become none. Holds at once."""
        return await self._api.call(set_quotas_call(name, quotas))

    async def delete_tenant(self, name: str) -> None:
        """Deletes a tenant and its keys; `Conflict` while it has sandboxes."""
        await self._api.call(delete_tenant_call(name))

    async def create_key(self, tenant: str) -> Key:
        """Makes a key of the tenant; its secret, `key.key` (`ssk_...`), is shown this once. To
        rotate a key, make a new one, move to it, and revoke the old one."""
        return await self._api.call(create_key_call(tenant))

    async def list_keys(self, tenant: str) -> list[Key]:
        """The tenant's keys, without the keys themselves."""
        return await self._api.call(list_keys_call(tenant))

    async def revoke_key(self, tenant: str, key: Key | str) -> None:
        """Revokes a key (or a key id); it opens nothing from now on."""
        await self._api.call(revoke_key_call(tenant, key))
