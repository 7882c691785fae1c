"""Volumes: storage that outlives sandboxes, made with `Volumes.create()` (`AsyncVolumes`),
mounted into sandboxes at create (`Sandbox.create(volumes=[VolumeMount("data", "/mnt/data")])`)
and read and written without one (`volume.files`).

What both clients share, without I/O: the `VolumeInfo` value and the requests of the volumes
API. `_async/volumes.py` (and `_sync/volumes.py`, generated from it) send them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ._core import Call, ignore_body


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class VolumeInfo:
    """A volume as the server describes it: an ext4 filesystem of `size_mb`, what it holds
    now, and the sandboxes that mount it."""

    id: str  # vol_...
    name: str  # unique among its tenant's volumes
    tenant: str | None  # its owner; None: the admin's
    size_mb: int
    created_at: str | None
    # What its filesystem holds now, and its size (less than size_mb by what ext4 keeps): statfs
    # of it; None when the server could not read it.
    used_bytes: int | None
    total_bytes: int | None
    mounted_by: tuple[str, ...] = ()  # the ids of the sandboxes that mount it

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VolumeInfo:
        """Parses a Volume object."""
        return cls(id=str(data["id"]), name=str(data.get("name", "")),
                   tenant=_opt_str(data.get("tenant")), size_mb=_int(data.get("size_mb")),
                   created_at=_opt_str(data.get("created_at")),
                   used_bytes=_opt_int(data.get("used_bytes")),
                   total_bytes=_opt_int(data.get("total_bytes")),
                   mounted_by=tuple(str(s) for s in data.get("mounted_by") or ()))


def volume_path(id_or_name: str) -> str:
    """`/v1/volumes/{id_or_name}`."""
    return f"/v1/volumes/{quote(id_or_name, safe='')}"


def create_volume_call(name: str, size_mb: int | None) -> Call[VolumeInfo]:
    """`POST /v1/volumes {"name", "size_mb"?}` (without `size_mb`: the server's
    `volume_default_mb`)."""
    body: dict[str, Any] = {"name": name}
    if size_mb is not None:
        body["size_mb"] = int(size_mb)
    return Call("POST", "/v1/volumes", VolumeInfo.from_json, json=body)


def list_volumes_call() -> Call[list[VolumeInfo]]:
    """`GET /v1/volumes`, oldest first."""
    return Call("GET", "/v1/volumes",
                lambda data: [VolumeInfo.from_json(v) for v in data.get("volumes", [])])


def get_volume_call(id_or_name: str) -> Call[VolumeInfo]:
    """`GET /v1/volumes/{id_or_name}`."""
    return Call("GET", volume_path(id_or_name), VolumeInfo.from_json)


def delete_volume_call(id_or_name: str) -> Call[None]:
    """`DELETE /v1/volumes/{id_or_name}`: `Conflict` while a sandbox mounts it."""
    return Call("DELETE", volume_path(id_or_name), ignore_body)
