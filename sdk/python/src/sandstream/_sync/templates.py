# Generated from the module of the same name in _async/ by sdk/python/scripts/unasync.py; do
# not edit. Edit that one, then run `python sdk/python/scripts/unasync.py` (`--check` tells
# whether this file is current).
"""Templates: importing, pulling, listing and deleting them, and snapshots."""

from __future__ import annotations

import builtins
import os

import httpx

from .._core import ClientConfig
from ..templates import (
    ARCHIVE_HEADERS,
    Template,
    archive_chunks,
    delete_template_call,
    get_template_call,
    import_template_call,
    list_templates_call,
    pull_template_call,
    snapshot_call,
)
from .api import _Api, _SandboxSurface


class _Templates(_SandboxSurface):
    """The template methods of `Sandbox` (static ones need no sandbox)."""

    @staticmethod
    def import_template(
        name: str,
        archive: bytes | str | os.PathLike[str],
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Template:
        """Makes template `name` from an image archive: an OCI image layout or a `docker save`
        tar, as bytes or the path of a file (streamed, never held whole). Every layer is checked
        against its digest and stored once; a bad archive raises `InvalidRequest` naming what
        is wrong. With a tenant's key the template is the tenant's own."""
        content = archive if isinstance(archive, bytes) else archive_chunks(archive)
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(import_template_call(name), content=content,
                            headers=ARCHIVE_HEADERS, timeout=api.config.stream_timeout())
        finally:
            api.close()

    @staticmethod
    def pull_template(
        name: str,
        image: str,
        *,
        username: str | None = None,
        password: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Template:
        """Makes template `name` from `image` pulled from its registry
        (`host[:port]/repository[:tag][@sha256:...]`; Docker Hub when it names no host).
        `username` and `password` answer the registry's auth, for this pull only. Raises
        `NotFound` when the registry has no such image, `Forbidden` when the daemon's registry
        policy refuses it, `BadGateway` when the registry fails or refuses the credentials."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(pull_template_call(name, image, username, password),
                            timeout=api.config.stream_timeout())
        finally:
            api.close()

    @staticmethod
    def list_templates(
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> builtins.list[Template]:
        """The templates this key may use: built in, directories, images and snapshots."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(list_templates_call())
        finally:
            api.close()

    @staticmethod
    def get_template(
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> Template:
        """One template; `NotFound` if this key may not use one of that name."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            return api.call(get_template_call(name))
        finally:
            api.close()

    @staticmethod
    def delete_template(
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """Deletes an image or snapshot template; `Conflict` while a sandbox uses it."""
        api = _Api(ClientConfig.resolve(base_url, api_key), http_client)
        try:
            api.call(delete_template_call(name))
        finally:
            api.close()

    def snapshot(self, name: str, *, memory: bool = False) -> Template:
        """Template `name` of this sandbox as it is now. `memory=False` (the default): its
        files (its template's layers and what it changed); its processes keep running, and each
        file is copied as it is when read. `memory=True`: also its running processes and code
        contexts, checkpointed with CRIU while it runs on; a sandbox created from the template
        starts with them running where they were, with the same process and context ids
        (`Template.memory` is true, `layers_count` 0). A server without CRIU, or a sandbox it
        cannot checkpoint (one with volumes or egress, or made from an image or a files
        snapshot), raises `RouteNotImplemented`."""
        return self._api.call(snapshot_call(self._path, name, memory),
                              timeout=self._api.config.stream_timeout())
