# unasync: async only
"""Volumes, for asyncio: `AsyncVolumes` makes, lists, finds and deletes them; an `AsyncVolume`
is one, whose files are read and written without a sandbox (`volume.files`)."""
# unasync: sync only
# """Volumes: `Volumes` makes, lists, finds and deletes them; a `Volume` is one, whose files are
# read and written without a sandbox (`volume.files`)."""
# unasync: end

from __future__ import annotations

import builtins

from ..volumes import (
    VolumeInfo,
    create_volume_call,
    delete_volume_call,
    get_volume_call,
    list_volumes_call,
    volume_path,
)
from .api import _AsyncApi, _AsyncKeyClient
from .files import _AsyncFileOps


class AsyncVolumeFiles(_AsyncFileOps):
    # unasync: async only
    """File operations on one volume, for asyncio; see `VolumeFiles`."""
    # unasync: sync only
    # """File operations on one volume, without a sandbox: those of `Sandbox.files` but `watch`.
    # Paths are inside the volume, `/` its top (a relative one is taken from there); one that
    # climbs above the top raises `InvalidRequest`. They act as the sandbox user (uid 1000), who
    # owns the top; a full volume raises `PayloadTooLarge`."""
    # unasync: end


class AsyncVolume:
    # unasync: async only
    """One volume, for asyncio; see `Volume`."""
    # unasync: sync only
    # """One volume: an ext4 filesystem of its size that outlives sandboxes. `info` is what the
    # server said of it (size, use, the sandboxes that mount it); `files` reads and writes it
    # without a sandbox. It talks through the `Volumes` that returned it."""
    # unasync: end

    def __init__(self, info: VolumeInfo, api: _AsyncApi) -> None:
        self._info = info
        self._api = api
        self.files = AsyncVolumeFiles(api, volume_path(info.id))

    @property
    def info(self) -> VolumeInfo:
        """The volume as last fetched; `refresh()` fetches it again."""
        return self._info

    @property
    def id(self) -> str:
        """The volume id (`vol_...`)."""
        return self._info.id

    @property
    def name(self) -> str:
        """The volume's name, unique among its tenant's."""
        return self._info.name

    async def refresh(self) -> VolumeInfo:
        """Fetches the volume again: what it holds now, who mounts it."""
        self._info = await self._api.call(get_volume_call(self.id))
        return self._info

    async def delete(self) -> None:
        """Deletes the volume and everything on it; `Conflict` (naming the sandbox) while a
        sandbox mounts it."""
        await self._api.call(delete_volume_call(self.id))


class AsyncVolumes(_AsyncKeyClient):
    # unasync: async only
    """The volumes API, for asyncio; see `Volumes`."""
    # unasync: sync only
    # """The volumes API: storage that outlives sandboxes, mounted into them at create
    # (`Sandbox.create(volumes=[VolumeMount(name, path)])`). The server is `base_url`, else
    # `SANDSTREAM_URL`; the key is `api_key`, else `SANDSTREAM_API_KEY`: the admin's or a
    # tenant's (a tenant sees its own volumes only), not a sandbox's token. Used as a context
    # manager, its connections close on exit; the volumes it returns talk through them.
    # """
    # unasync: end

    async def create(self, name: str, size_mb: int | None = None) -> AsyncVolume:
        """Makes volume `name` (1 to 63 of `A-Za-z0-9._-`, not `.` or `..`, not starting with
        `vol_`; `Conflict` if the tenant has one of that name) of `size_mb` (16 up to the
        server's `volume_max_mb`; None: its `volume_default_mb`, 1024). A tenant's volumes
        count against its `volume_storage_mb` quota (`QuotaExceeded`)."""
        return AsyncVolume(await self._api.call(create_volume_call(name, size_mb)), self._api)

    async def list(self) -> builtins.list[AsyncVolume]:
        """The volumes this key sees (a tenant's key: its own), oldest first."""
        return [AsyncVolume(info, self._api) for info in await self._api.call(list_volumes_call())]

    async def get(self, id_or_name: str) -> AsyncVolume:
        """A volume by id (`vol_...`) or name; `NotFound` if this key sees none."""
        return AsyncVolume(await self._api.call(get_volume_call(id_or_name)), self._api)

    async def delete(self, volume: AsyncVolume | str) -> None:
        """Deletes a volume (or the volume of an id or name) and everything on it; `Conflict`
        (naming the sandbox) while a sandbox mounts it, `NotFound` if there is none."""
        id_or_name = volume.id if isinstance(volume, AsyncVolume) else volume
        await self._api.call(delete_volume_call(id_or_name))
