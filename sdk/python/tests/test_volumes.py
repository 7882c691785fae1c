"""Volumes: the requests both clients send (against a recording transport, no daemon), then
against the real daemon: made, listed, found, their files read and written without a sandbox,
mounted by sandboxes (shared, read-only), refused deletion while mounted, a tenant's quota."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandstream import (
    Admin,
    AsyncSandbox,
    AsyncVolume,
    AsyncVolumes,
    Conflict,
    FileInfo,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    Sandbox,
    SandboxInfo,
    Volume,
    VolumeInfo,
    VolumeMount,
    Volumes,
)

from .conftest import Daemon

VOLUME: dict[str, Any] = {
    "id": "vol_0123456789abcdef", "name": "data", "tenant": None, "size_mb": 64,
    "created_at": "2026-01-02T03:04:05.000Z", "used_bytes": 24576, "total_bytes": 60817408,
    "mounted_by": ["sb_0123456789abcdef"]}
FILE = {"path": "/a.txt", "name": "a.txt", "type": "file", "size": 2,
        "mtime": "2026-01-02T03:04:05.000Z", "mode": "0644"}
SANDBOX = {"id": "sb_0123456789abcdef", "status": "running",
           "volumes": [{"id": "vol_0123456789abcdef", "name": "data", "path": "/mnt/data",
                        "read_only": True}]}


class Recorder:
    """A transport that answers as the daemon would and keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, str], Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body: Any = request.content
        if request.headers.get("content-type") == "application/json":
            body = json.loads(request.content)
        path = request.url.raw_path.decode().split("?")[0]
        self.sent.append((request.method, path, dict(request.url.params), body))
        if path == "/v1/sandboxes":
            return httpx.Response(201, json=SANDBOX)
        if path == "/v1/volumes":
            if request.method == "GET":
                return httpx.Response(200, json={"volumes": [VOLUME]})
            return httpx.Response(201, json=VOLUME)
        if path.endswith("/files/content") and request.method == "GET":
            return httpx.Response(200, content=b"hi")
        if path.endswith("/files") and request.method == "GET":
            return httpx.Response(200, json={"path": "/", "entries": [FILE], "truncated": False})
        if request.method == "DELETE":
            return httpx.Response(204)
        if path.endswith("/files/stat") and request.url.params["path"] == "/missing":
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}})
        if "/files" in path:
            return httpx.Response(201, json=FILE)
        return httpx.Response(200, json=VOLUME)


# The requests of the walk below, in order; the same for both clients.
WALK = [
    ("POST", "/v1/volumes", {}, {"name": "data"}),
    ("POST", "/v1/volumes", {}, {"name": "small", "size_mb": 16}),
    ("GET", "/v1/volumes", {}, b""),
    ("GET", "/v1/volumes/data", {}, b""),
    ("GET", "/v1/volumes/vol_0123456789abcdef", {}, b""),
    ("PUT", "/v1/volumes/vol_0123456789abcdef/files/content",
     {"path": "/a.txt", "parents": "1", "mode": "0600"}, b"hi"),
    ("GET", "/v1/volumes/vol_0123456789abcdef/files/content", {"path": "/a.txt"}, b""),
    ("GET", "/v1/volumes/vol_0123456789abcdef/files", {"path": "/"}, b""),
    ("GET", "/v1/volumes/vol_0123456789abcdef/files/stat", {"path": "/missing"}, b""),
    ("POST", "/v1/volumes/vol_0123456789abcdef/files/mkdir", {}, {"path": "/d", "parents": True}),
    ("POST", "/v1/volumes/vol_0123456789abcdef/files/move", {},
     {"from": "/a.txt", "to": "/d/a.txt", "overwrite": False}),
    ("DELETE", "/v1/volumes/vol_0123456789abcdef/files", {"path": "/d", "recursive": "1"}, b""),
    ("DELETE", "/v1/volumes/vol_0123456789abcdef", {}, b""),
    ("DELETE", "/v1/volumes/a%2Fb", {}, b""),
    ("POST", "/v1/sandboxes", {}, {"template": "base", "volumes": [
        {"name": "data", "path": "/mnt/data", "read_only": True},
        {"name": "vol_1", "path": "/mnt/other"}]}),
]


def test_the_sync_client_sends_the_volume_routes() -> None:
    recorder = Recorder()
    client = httpx.Client(transport=httpx.MockTransport(recorder))
    where: dict[str, Any] = {"base_url": "http://sandstream.test", "api_key": "k",
                             "http_client": client}
    with Volumes(**where) as volumes:
        vol = volumes.create("data")
        assert isinstance(vol, Volume) and vol.info == VolumeInfo.from_json(VOLUME)
        assert (vol.id, vol.name, vol.info.mounted_by) == (VOLUME["id"], "data", (SANDBOX["id"],))
        volumes.create("small", size_mb=16)
        assert [v.id for v in volumes.list()] == [VOLUME["id"]]
        assert volumes.get("data").info.total_bytes == VOLUME["total_bytes"]
        assert vol.refresh().used_bytes == VOLUME["used_bytes"]
        info = vol.files.write("/a.txt", "hi", mode=0o600)
        assert isinstance(info, FileInfo) and info.path == "/a.txt"
        assert vol.files.read_text("/a.txt") == "hi"
        assert [f.name for f in vol.files.list("/")] == ["a.txt"]
        assert not vol.files.exists("/missing")
        vol.files.mkdir("/d")
        vol.files.move("/a.txt", "/d/a.txt")
        vol.files.remove("/d", recursive=True)
        assert not hasattr(vol.files, "watch")
        vol.delete()
        volumes.delete("a/b")
    with Sandbox.create(volumes=[VolumeMount("data", "/mnt/data", read_only=True),
                                 {"name": "vol_1", "path": "/mnt/other"}], **where) as sb:
        assert sb.info.volumes == (VolumeMount("data", "/mnt/data", True, VOLUME["id"]),)
    assert recorder.sent[:len(WALK)] == WALK


async def test_the_async_client_sends_the_same() -> None:
    recorder = Recorder()
    client = httpx.AsyncClient(transport=httpx.MockTransport(recorder))
    where: dict[str, Any] = {"base_url": "http://sandstream.test", "api_key": "k",
                             "http_client": client}
    async with AsyncVolumes(**where) as volumes:
        vol = await volumes.create("data")
        assert isinstance(vol, AsyncVolume) and vol.info == VolumeInfo.from_json(VOLUME)
        await volumes.create("small", size_mb=16)
        assert [v.name for v in await volumes.list()] == ["data"]
        await volumes.get("data")
        await vol.refresh()
        await vol.files.write("/a.txt", b"hi", mode="0600")
        assert await vol.files.read("/a.txt") == b"hi"
        assert [f.name for f in await vol.files.list("/")] == ["a.txt"]
        assert not await vol.files.exists("/missing")
        await vol.files.mkdir("/d")
        await vol.files.move("/a.txt", "/d/a.txt")
        await vol.files.remove("/d", recursive=True)
        await volumes.delete(vol)
        await volumes.delete("a/b")
    sb = await AsyncSandbox.create(volumes=[VolumeMount("data", "/mnt/data", read_only=True),
                                            {"name": "vol_1", "path": "/mnt/other"}], **where)
    assert sb.info.volumes[0].id == VOLUME["id"] and sb.info.volumes[0].read_only
    await client.aclose()
    assert recorder.sent[:len(WALK)] == WALK


@pytest.mark.parametrize("volumes", ["data", {"name": "data", "path": "/mnt/data"}])
def test_volumes_is_a_list_of_mounts(volumes: Any) -> None:
    recorder = Recorder()
    client = httpx.Client(transport=httpx.MockTransport(recorder))
    with pytest.raises(TypeError, match="list of mounts"):
        Sandbox.create(volumes=volumes, base_url="http://sandstream.test", http_client=client)
    assert recorder.sent == []


def test_what_the_server_leaves_out_reads_as_empty() -> None:
    assert SandboxInfo.from_json({"id": "sb_1"}).volumes == ()
    assert VolumeInfo.from_json({"id": "vol_1"}) == VolumeInfo(
        "vol_1", "", None, 0, None, None, None, ())


# --- against the daemon ---------------------------------------------------------------------------


def unique(prefix: str) -> str:
    """A name no other test uses: the session's daemon keeps every test's volumes."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def volumes(daemon: Daemon) -> Iterator[Volumes]:
    """The volumes API of the session's daemon; skips where volumes cannot be made."""
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("volumes are loop-mounted: this machine has no /dev/loop-control")
    if shutil.which("mkfs.ext4", path="/usr/sbin:/sbin:/usr/bin:/bin") is None:
        pytest.skip("volumes are ext4: mkfs.ext4 is not installed")
    with Volumes() as v:
        yield v


def test_a_volume_outlives_its_sandboxes(volumes: Volumes) -> None:
    vol = volumes.create(unique("sdk"), size_mb=64)
    try:
        assert vol.id.startswith("vol_") and vol.info.size_mb == 64 and vol.info.tenant is None
        assert vol.info.used_bytes is not None and vol.info.total_bytes is not None
        assert 0 <= vol.info.used_bytes < vol.info.total_bytes <= 64 << 20
        assert vol.info.mounted_by == ()
        assert volumes.get(vol.name).id == vol.id and volumes.get(vol.id).name == vol.name
        assert vol.id in [v.id for v in volumes.list()]
        with pytest.raises(Conflict):
            volumes.create(vol.name, size_mb=16)
        with pytest.raises(InvalidRequest, match="size_mb"):
            volumes.create(unique("tiny"), size_mb=8)

        # Its files without a sandbox: the sandbox files' calls, `/` the volume's top.
        assert vol.files.write("notes/a.txt", "from the api").path == "/notes/a.txt"
        assert vol.files.read_text("/notes/a.txt") == "from the api"
        assert vol.files.write("/run.sh", b"#!/bin/sh\n", mode=0o750).mode == "0750"
        assert vol.files.mkdir("/d/e").is_dir
        vol.files.move("/notes/a.txt", "/d/a.txt")
        assert {f.name for f in vol.files.list("/")} - {"lost+found"} == {"notes", "run.sh", "d"}
        assert vol.files.stat("/d/a.txt").size == len("from the api")
        assert not vol.files.exists("/notes/a.txt")
        with pytest.raises(InvalidRequest):
            vol.files.read("/../volume.img")
        with pytest.raises(NotFound):
            vol.files.read("/missing")

        # Mounted by two sandboxes at once, one read-only: one filesystem, the user's files.
        by_id = {"name": vol.id, "path": "/data", "read_only": True}
        with Sandbox.create(volumes=[VolumeMount(vol.name, "/mnt/data")]) as writer, \
                Sandbox.create(volumes=[by_id]) as reader:
            assert writer.info.volumes == (VolumeMount(vol.name, "/mnt/data", False, vol.id),)
            assert reader.info.volumes == (VolumeMount(vol.name, "/data", True, vol.id),)
            assert writer.exec("stat -c '%u %a' /mnt/data").stdout == "1000 755\n"
            assert writer.exec("cat /mnt/data/d/a.txt; echo hi > /mnt/data/b.txt").stdout == \
                "from the api"
            assert vol.files.read_text("/b.txt") == "hi\n"
            assert reader.exec("cat /data/b.txt; stat -c %u /data/b.txt").stdout == "hi\n1000\n"
            denied = reader.exec("echo no > /data/b.txt")
            assert denied.exit_code != 0 and "Read-only file system" in denied.stderr
            assert set(vol.refresh().mounted_by) == {writer.id, reader.id}
            with pytest.raises(Conflict) as refused:
                vol.delete()
            assert writer.id in str(refused.value) or reader.id in str(refused.value)
        assert vol.refresh().mounted_by == ()
        assert vol.files.read_text("/b.txt") == "hi\n"
    finally:
        volumes.delete(vol)
    with pytest.raises(NotFound):
        volumes.get(vol.id)
    with pytest.raises(InvalidRequest, match=vol.name):
        Sandbox.create(volumes=[VolumeMount(vol.name, "/mnt/data")])


async def test_the_async_client_against_the_daemon(volumes: Volumes) -> None:
    async with AsyncVolumes() as av:
        vol = await av.create(unique("async"), size_mb=16)
        try:
            await vol.files.write("/x", b"async")
            async with await AsyncSandbox.create(volumes=[VolumeMount(vol.name, "/v")]) as sb:
                assert (await sb.exec("cat /v/x")).stdout == "async"
                assert (await vol.refresh()).mounted_by == (sb.id,)
            assert {f.name for f in await vol.files.list()} - {"lost+found"} == {"x"}
        finally:
            await vol.delete()
        assert vol.id not in [v.id for v in await av.list()]


def test_a_tenants_volumes_count_against_its_quota(volumes: Volumes) -> None:
    name = unique("vq")
    with Admin() as admin:
        tenant = admin.create_tenant(name, quotas={"volume_storage_mb": 100})
        assert tenant.quotas["volume_storage_mb"] == 100
        key = admin.create_key(name).key
        assert key is not None
        with Volumes(api_key=key) as mine:
            first = mine.create("first", size_mb=64)
            assert first.info.tenant == name
            with pytest.raises(QuotaExceeded, match="volume_storage_mb"):
                mine.create("second", size_mb=64)
            assert [v.name for v in mine.list()] == ["first"]
            # The admin's volumes are not there for it.
            theirs = volumes.create(unique("admins"), size_mb=16)
            try:
                with pytest.raises(NotFound):
                    mine.get(theirs.id)
            finally:
                theirs.delete()
            mine.delete("first")
            mine.create("second", size_mb=64).delete()
        admin.delete_tenant(name)
