"""E2B's own Python SDK (the real `e2b` package, pinned in tests/requirements.txt, unpatched):
its `Volume` class and `Sandbox.create(volume_mounts=...)` against the daemon.

The SDK sends the control plane (`/volumes`, X-API-KEY) to `E2B_API_URL` and a volume's files
(`/volumecontent/{id}/...`, Bearer <the volume's token>) to `E2B_VOLUME_API_URL` only; both are
the daemon's URL here. Effects are checked through sandstream's own /v1 API or inside a
sandbox, not only through the call under test. The JS SDK's counterpart is
tests/compat/e2b/test/volumes.test.mjs; sandstream's own volume API is test_volumes.py."""

from __future__ import annotations

import asyncio
import contextlib
import io
import secrets
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    AsyncVolume,
    AuthenticationException,
    NotFoundException,
    Sandbox,
    SandboxException,
    Volume,
    VolumeAndToken,
    VolumeEntryStat,
    VolumeException,
    VolumeFileType,
    VolumeInfo,
    VolumeNotFoundException,
    VolumePathNotFoundException,
)

from helpers import API_KEY, Daemon


@pytest.fixture
def e2b_env(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """The environment a user sets to point the SDK, volumes included, at sandstream."""
    monkeypatch.setenv("E2B_API_URL", daemon.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", daemon.url)
    monkeypatch.setenv("E2B_VOLUME_API_URL", daemon.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    for name in ("E2B_DEBUG", "E2B_DOMAIN", "E2B_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return daemon


def vname(prefix: str = "e2b") -> str:
    """A volume name no other test uses (the session daemon is shared)."""
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
def vol(e2b_env: Daemon, client: httpx.Client) -> Iterator[Volume]:
    """A volume made with `Volume.create()`, destroyed afterwards (through /v1 if the SDK's
    destroy is what failed)."""
    v = Volume.create(vname())
    yield v
    with contextlib.suppress(Exception):
        Volume.destroy(v.volume_id)
    client.delete(f"/v1/volumes/{v.volume_id}")


def v1_volume(client: httpx.Client, ref: str) -> httpx.Response:
    return client.get(f"/v1/volumes/{ref}")


def v1_read(client: httpx.Client, volume_id: str, path: str) -> bytes:
    """A volume file's bytes through sandstream's own API."""
    r = client.get(f"/v1/volumes/{volume_id}/files/content", params={"path": path})
    assert r.status_code == 200, f"{path}: {r.status_code} {r.text}"
    return r.content


def v1_write(client: httpx.Client, volume_id: str, path: str, data: bytes) -> None:
    r = client.put(f"/v1/volumes/{volume_id}/files/content", params={"path": path}, content=data)
    assert r.status_code in (200, 201), r.text


def v1_stat(client: httpx.Client, volume_id: str, path: str) -> httpx.Response:
    return client.get(f"/v1/volumes/{volume_id}/files/stat", params={"path": path})


def recent(t: datetime) -> bool:
    """A timestamp of the last minute, with a timezone."""
    return t.tzinfo is not None and abs(datetime.now(timezone.utc) - t) < timedelta(minutes=1)


# --- the control plane --------------------------------------------------------------------------


def test_create_list_get_info_connect_destroy(e2b_env: Daemon, client: httpx.Client) -> None:
    """Volume.create, list, get_info, connect and destroy, each seen through /v1."""
    name = vname()
    v = Volume.create(name)
    try:
        assert isinstance(v, Volume)
        assert v.volume_id.startswith("vol_") and v.name == name
        assert isinstance(v.token, str) and v.token
        mine = v1_volume(client, v.volume_id)
        assert mine.status_code == 200, mine.text
        assert mine.json()["name"] == name and mine.json()["tenant"] is None
        assert mine.json()["size_mb"] == 1024  # E2B's create has no size: the default

        listed = Volume.list()
        assert all(isinstance(x, VolumeInfo) for x in listed), listed
        assert VolumeInfo(volume_id=v.volume_id, name=name) in listed, listed

        info = Volume.get_info(v.volume_id)
        assert isinstance(info, VolumeAndToken)
        assert (info.volume_id, info.name) == (v.volume_id, name)
        assert isinstance(info.token, str) and info.token
        assert info.domain is None  # content goes to E2B_VOLUME_API_URL, not api.<domain>

        again = Volume.connect(v.volume_id)
        assert (again.volume_id, again.name) == (v.volume_id, name) and again.token
        again.write_file("/by-connect.txt", "connected")
        assert v.read_file("/by-connect.txt") == "connected"
        assert v1_read(client, v.volume_id, "/by-connect.txt") == b"connected"
    finally:
        destroyed = Volume.destroy(v.volume_id)
    assert destroyed is True
    assert v1_volume(client, v.volume_id).status_code == 404
    assert Volume.destroy(v.volume_id) is False
    with pytest.raises(VolumeNotFoundException) as e:
        Volume.get_info(v.volume_id)
    assert isinstance(e.value, NotFoundException)
    with pytest.raises(VolumeNotFoundException):
        Volume.connect(v.volume_id)
    assert v.volume_id not in [x.volume_id for x in Volume.list()]
    assert Volume.destroy("vol_0000000000000000") is False


def test_create_refusals(e2b_env: Daemon, vol: Volume, client: httpx.Client) -> None:
    """A name in use or a bad name is a VolumeException carrying the status and message."""
    with pytest.raises(VolumeException) as e:
        Volume.create(vol.name)
    assert str(e.value).startswith("409"), e.value
    assert vol.name in str(e.value)
    for bad in ("a/b", "vol_x", "x" * 64, ""):
        with pytest.raises(VolumeException) as e:
            Volume.create(bad)
        assert str(e.value).startswith("400"), (bad, e.value)
    assert [x.name for x in Volume.list()].count(vol.name) == 1


def test_wrong_api_key(e2b_env: Daemon, vol: Volume) -> None:
    """The control plane refuses a wrong key with AuthenticationException."""
    for call in (lambda: Volume.list(api_key="wrong"),
                 lambda: Volume.create(vname(), api_key="wrong"),
                 lambda: Volume.get_info(vol.volume_id, api_key="wrong"),
                 lambda: Volume.destroy(vol.volume_id, api_key="wrong")):
        with pytest.raises(AuthenticationException):
            call()
    assert Volume.get_info(vol.volume_id).name == vol.name


def test_wire_shapes(e2b_env: Daemon) -> None:
    """What the SDKs parse strictly, on the wire: VolumeAndToken without `domain`, Volume
    items, `{code: int, message}` errors of the control plane, `{code, message}` of the
    content routes, 204 without a body; `volumeMounts` in and out of /v2/sandboxes."""
    key = {"X-API-KEY": API_KEY}
    with httpx.Client(base_url=e2b_env.url, timeout=30) as c:
        name = vname("wire")
        r = c.post("/volumes", json={"name": name}, headers=key)
        assert r.status_code == 201, r.text
        made = r.json()
        assert set(made) == {"volumeID", "name", "token"}, made
        vid, token = made["volumeID"], made["token"]
        try:
            got = c.get(f"/volumes/{vid}", headers=key).json()
            assert set(got) == {"volumeID", "name", "token"} and got["name"] == name, got
            listed = c.get("/volumes", headers=key).json()
            assert isinstance(listed, list) and {"volumeID": vid, "name": name} in listed, listed
            assert all(set(x) == {"volumeID", "name"} for x in listed), listed
            for method, url, body in (("GET", "/volumes/vol_0000000000000000", None),
                                      ("DELETE", "/volumes/vol_0000000000000000", None),
                                      ("POST", "/volumes", {"name": "a/b"}),
                                      ("POST", "/volumes", {"name": name})):
                r = c.request(method, url, json=body, headers=key)
                assert r.status_code in (400, 404, 409), (method, url, r.status_code, r.text)
                err = r.json()
                assert err.get("code") == r.status_code and isinstance(err.get("message"), str), err
            r = c.get("/volumes", headers={"X-API-KEY": "wrong"})
            assert r.status_code == 401 and r.json().get("code") == 401, r.text
            bearer = {"Authorization": f"Bearer {token}"}
            r = c.get(f"/volumecontent/{vid}/path", params={"path": "/nothing"}, headers=bearer)
            assert r.status_code == 404, r.text
            err = r.json()
            assert "code" in err and isinstance(err.get("message"), str), err
            r = c.put(f"/volumecontent/{vid}/file", params={"path": "/w.txt"}, content=b"w",
                      headers={**bearer, "Content-Type": "application/octet-stream"})
            assert r.status_code == 201, r.text
            st = r.json()
            assert {"name", "type", "path", "size", "mode", "uid", "gid", "atime", "mtime",
                    "ctime"} <= set(st), st
            for t in ("atime", "mtime", "ctime"):
                datetime.fromisoformat(st[t].replace("Z", "+00:00"))
            r = c.delete(f"/volumecontent/{vid}/path", params={"path": "/w.txt"}, headers=bearer)
            assert r.status_code == 204 and r.content == b"", r.text

            r = c.post("/v2/sandboxes", headers=key, json={
                "templateID": "base", "volumeMounts": [{"name": name, "path": "/mnt/w"}]})
            assert r.status_code == 201, r.text
            sid = r.json()["sandboxID"]
            try:
                detail = c.get(f"/sandboxes/{sid}", headers=key).json()
                assert detail["volumeMounts"] == [{"name": name, "path": "/mnt/w"}], detail
            finally:
                assert c.delete(f"/sandboxes/{sid}", headers=key).status_code == 204
        finally:
            r = c.delete(f"/volumes/{vid}", headers=key)
            assert r.status_code == 204 and r.content == b"", r.text


# --- a volume's files ---------------------------------------------------------------------------


def test_write_read_and_overwrite(vol: Volume, client: httpx.Client) -> None:
    """write_file of str, bytes and a file object; read_file as text, bytes and a stream; a
    second write replaces the content."""
    st = vol.write_file("/notes/a.txt", "héllo volume\n")
    assert isinstance(st, VolumeEntryStat)
    assert (st.name, st.path, st.type, st.size) == ("a.txt", "/notes/a.txt", VolumeFileType.FILE,
                                                    len("héllo volume\n".encode()))
    assert (st.uid, st.gid) == (1000, 1000)
    assert recent(st.mtime) and recent(st.atime) and recent(st.ctime), st
    assert v1_read(client, vol.volume_id, "/notes/a.txt") == "héllo volume\n".encode()
    assert vol.read_file("/notes/a.txt") == "héllo volume\n"

    blob = bytes(range(256)) * 300 + b"\0\0"
    vol.write_file("/blob.bin", blob)
    assert v1_read(client, vol.volume_id, "/blob.bin") == blob
    got = vol.read_file("/blob.bin", format="bytes")
    assert isinstance(got, bytes) and got == blob
    assert b"".join(vol.read_file("/blob.bin", format="stream")) == blob

    streamed = vol.write_file("/streamed.bin", io.BytesIO(blob * 4))
    assert streamed.size == len(blob) * 4
    assert v1_read(client, vol.volume_id, "/streamed.bin") == blob * 4

    # The same path again with force (as E2B's own tests overwrite): the content is replaced,
    # and the answer is still a stat (201, or the SDK raises).
    again = vol.write_file("/notes/a.txt", "short", force=True)
    assert again.size == 5
    assert vol.read_file("/notes/a.txt") == "short"
    # What /v1 writes, the SDK reads.
    v1_write(client, vol.volume_id, "/from-v1.txt", b"v1 wrote this")
    assert vol.read_file("/from-v1.txt") == "v1 wrote this"


def test_write_over_a_file_without_force(vol: Volume) -> None:
    """Without force, a write over an existing file either replaces it (the SDK's docstring:
    "Writing to a file that already exists overwrites the file") or is refused as a conflict,
    leaving the file as it was."""
    vol.write_file("/once.txt", "first")
    try:
        st = vol.write_file("/once.txt", "second")
    except VolumeException as e:
        assert str(e).startswith("409"), e
        assert vol.read_file("/once.txt") == "first"
    else:
        assert st.size == len("second") and vol.read_file("/once.txt") == "second"


def test_write_with_mode(vol: Volume, client: httpx.Client) -> None:
    """write_file's mode is the file's permission bits."""
    st = vol.write_file("/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert st.mode & 0o777 == 0o755, oct(st.mode)
    assert v1_stat(client, vol.volume_id, "/run.sh").json()["mode"] == "0755"


def test_get_info_exists_list_make_dir(vol: Volume, client: httpx.Client) -> None:
    """get_info and exists describe what is there; list names a directory's entries; make_dir
    makes one, with its parents when forced."""
    vol.write_file("/tree/a.txt", "abc")
    d = vol.make_dir("/tree/sub")
    assert isinstance(d, VolumeEntryStat)
    assert (d.name, d.path, d.type) == ("sub", "/tree/sub", VolumeFileType.DIRECTORY)
    assert v1_stat(client, vol.volume_id, "/tree/sub").json()["type"] == "directory"
    deep = vol.make_dir("/p/q/r", force=True)
    assert deep.path == "/p/q/r" and deep.type == VolumeFileType.DIRECTORY
    assert v1_stat(client, vol.volume_id, "/p/q").json()["type"] == "directory"
    private = vol.make_dir("/private", mode=0o700)
    assert private.mode & 0o777 == 0o700, oct(private.mode)

    info = vol.get_info("/tree/a.txt")
    assert (info.name, info.path, info.type, info.size) == ("a.txt", "/tree/a.txt",
                                                            VolumeFileType.FILE, 3)
    assert (info.uid, info.gid) == (1000, 1000) and info.mode & 0o777 == 0o644, info
    assert recent(info.mtime), info
    top = vol.get_info("/")
    assert top.type == VolumeFileType.DIRECTORY and (top.uid, top.gid) == (1000, 1000)
    assert vol.exists("/tree/a.txt") is True and vol.exists("/tree/sub") is True
    assert vol.exists("/tree/nothing") is False and vol.exists("/nowhere/at/all") is False
    with pytest.raises(VolumePathNotFoundException):
        vol.get_info("/tree/nothing")

    entries = {e.name: e for e in vol.list("/tree")}
    assert set(entries) == {"a.txt", "sub"}, entries
    assert entries["a.txt"].type == VolumeFileType.FILE and entries["a.txt"].path == "/tree/a.txt"
    assert entries["sub"].type == VolumeFileType.DIRECTORY and entries["sub"].size >= 0
    top_names = {e.name for e in vol.list("/")} - {"lost+found"}
    assert top_names == {"tree", "p", "private"}, top_names
    with pytest.raises(VolumePathNotFoundException):
        vol.list("/no-such-dir")


def test_list_depth(vol: Volume) -> None:
    """list's depth reaches into subdirectories."""
    vol.write_file("/t/a.txt", "a")
    vol.write_file("/t/sub/b.txt", "b")
    vol.write_file("/t/sub/subsub/c.txt", "c")
    assert {e.path for e in vol.list("/t")} == {"/t/a.txt", "/t/sub"}
    assert {e.path for e in vol.list("/t", depth=2)} == {"/t/a.txt", "/t/sub", "/t/sub/b.txt",
                                                         "/t/sub/subsub"}


def test_update_metadata(vol: Volume, client: httpx.Client) -> None:
    """update_metadata changes the mode and answers the new stat."""
    vol.write_file("/m.txt", "m")
    st = vol.update_metadata("/m.txt", mode=0o600)
    assert isinstance(st, VolumeEntryStat) and st.mode & 0o777 == 0o600, oct(st.mode)
    assert v1_stat(client, vol.volume_id, "/m.txt").json()["mode"] == "0600"
    assert vol.get_info("/m.txt").mode & 0o777 == 0o600
    with pytest.raises(VolumePathNotFoundException):
        vol.update_metadata("/missing.txt", mode=0o600)


def test_remove_and_missing_paths(vol: Volume, client: httpx.Client) -> None:
    """remove deletes a file and an empty directory; missing paths are
    VolumePathNotFoundException (a NotFoundException) on every call."""
    vol.write_file("/gone.txt", "x")
    vol.remove("/gone.txt")
    assert v1_stat(client, vol.volume_id, "/gone.txt").status_code == 404
    assert vol.exists("/gone.txt") is False
    vol.make_dir("/empty")
    vol.remove("/empty")
    assert v1_stat(client, vol.volume_id, "/empty").status_code == 404
    for call in (lambda: vol.read_file("/missing.txt"),
                 lambda: vol.read_file("/missing.txt", format="bytes"),
                 lambda: vol.get_info("/missing.txt"),
                 lambda: vol.remove("/missing.txt"),
                 lambda: vol.list("/missing")):
        with pytest.raises(VolumePathNotFoundException) as e:
            call()
        assert isinstance(e.value, NotFoundException)


def test_remove_a_directory_with_files(vol: Volume, client: httpx.Client) -> None:
    """remove of a directory takes what is in it (as E2B's sandbox files.remove does)."""
    vol.write_file("/full/a.txt", "a")
    vol.write_file("/full/sub/b.txt", "b")
    vol.remove("/full")
    assert v1_stat(client, vol.volume_id, "/full").status_code == 404


def test_content_needs_the_volumes_token(vol: Volume, client: httpx.Client,
                                         e2b_env: Daemon) -> None:
    """A wrong token, another volume's token or none at all reads nothing of a volume."""
    vol.write_file("/secret.txt", "only with the token")
    bogus = Volume(vol.volume_id, vol.name, token="not-a-token")
    with pytest.raises(AuthenticationException):
        bogus.list("/")
    with pytest.raises(AuthenticationException):
        bogus.read_file("/secret.txt")
    with pytest.raises(AuthenticationException):
        bogus.write_file("/planted.txt", "x")
    other = Volume.create(vname("other"))
    try:
        borrowed = Volume(vol.volume_id, vol.name, token=other.token)
        with pytest.raises((AuthenticationException, VolumeException, NotFoundException)):
            borrowed.read_file("/secret.txt")
        with pytest.raises((AuthenticationException, VolumeException, NotFoundException)):
            borrowed.write_file("/planted.txt", "x")
    finally:
        Volume.destroy(other.volume_id)
    assert v1_stat(client, vol.volume_id, "/planted.txt").status_code == 404
    # A sandbox's envd token is no volume's token, even under the sandbox's own id.
    sbx = Sandbox.create()
    try:
        envd = sbx._envd_access_token
        assert envd
        for vid in (vol.volume_id, sbx.sandbox_id):
            r = httpx.patch(f"{e2b_env.url}/volumecontent/{vid}/path",
                            params={"path": "/secret.txt"}, json={"mode": 0o777},
                            headers={"Authorization": f"Bearer {envd}"}, timeout=10)
            assert r.status_code == 401, (vid, r.text)
    finally:
        sbx.kill()
    # Without any credential, on the wire.
    for url in (f"/volumecontent/{vol.volume_id}/dir?path=/",
                f"/volumecontent/{vol.volume_id}/file?path=/secret.txt"):
        r = httpx.get(f"{e2b_env.url}{url}", timeout=10)
        assert r.status_code == 401, (url, r.status_code, r.text)
        assert b"only with the token" not in r.content
        body = r.json()
        assert isinstance(body.get("message"), str) and "code" in body, body
    # The token still works for its own volume.
    assert vol.read_file("/secret.txt") == "only with the token"


# --- mounts -------------------------------------------------------------------------------------


def test_sandbox_mounts_a_volume(vol: Volume, client: httpx.Client) -> None:
    """Sandbox.create(volume_mounts=...) mounts the volume: a command reads what write_file
    wrote, what the command writes comes back through read_file, get_info lists the mount, and
    the volume cannot be destroyed while the sandbox runs."""
    vol.write_file("/f", "from the sdk")
    sandbox = Sandbox.create(volume_mounts={"/mnt/data": vol})
    try:
        assert sandbox.commands.run("cat /mnt/data/f").stdout == "from the sdk"
        sandbox.commands.run("echo from the sandbox > /mnt/data/g")
        assert vol.read_file("/g") == "from the sandbox\n"
        assert sandbox.commands.run("stat -c %u /mnt/data/g").stdout == "1000\n"
        mounts = [{"name": vol.name, "path": "/mnt/data"}]
        assert sandbox.get_info().volume_mounts == mounts
        assert Sandbox.get_info(sandbox.sandbox_id).volume_mounts == mounts
        listed = [s for s in Sandbox.list().next_items() if s.sandbox_id == sandbox.sandbox_id]
        assert [s.volume_mounts for s in listed] == [mounts], listed
        v1 = client.get(f"/v1/sandboxes/{sandbox.sandbox_id}").json()
        assert v1["volumes"] == [{"id": vol.volume_id, "name": vol.name, "path": "/mnt/data",
                                  "read_only": False}], v1
        with pytest.raises(VolumeException) as e:
            Volume.destroy(vol.volume_id)
        assert str(e.value).startswith("409") and sandbox.sandbox_id in str(e.value), e.value
        assert vol.exists("/f")
    finally:
        sandbox.kill()
    # The files outlive the sandbox.
    assert vol.read_file("/g") == "from the sandbox\n"
    assert Volume.destroy(vol.volume_id) is True


def test_mount_by_name_and_two_sandboxes_share(vol: Volume) -> None:
    """A mount names its volume by name (a str); two sandboxes mounting one volume share it."""
    first = Sandbox.create(volume_mounts={"/data": vol.name})
    try:
        second = Sandbox.create(volume_mounts={"/mnt/shared": vol})
        try:
            first.commands.run("echo one > /data/one")
            assert second.commands.run("cat /mnt/shared/one").stdout == "one\n"
            second.commands.run("echo two > /mnt/shared/two")
            assert first.commands.run("cat /data/two").stdout == "two\n"
            assert first.get_info().volume_mounts == [{"name": vol.name, "path": "/data"}]
        finally:
            second.kill()
    finally:
        first.kill()
    assert sorted(e.name for e in vol.list("/") if e.name != "lost+found") == ["one", "two"]


def test_sandbox_files_reach_the_mount(vol: Volume) -> None:
    """The sandbox's own files API (envd) sees the mounted volume like its commands do."""
    sandbox = Sandbox.create(volume_mounts={"/mnt/data": vol})
    try:
        sandbox.files.write("/mnt/data/via-envd.txt", "envd wrote this")
        assert vol.read_file("/via-envd.txt") == "envd wrote this"
        vol.write_file("/via-volume.txt", "volume wrote this")
        assert sandbox.files.read("/mnt/data/via-volume.txt") == "volume wrote this"
        assert {e.name for e in sandbox.files.list("/mnt/data")} >= {"via-envd.txt",
                                                                     "via-volume.txt"}
    finally:
        sandbox.kill()


def test_mounting_an_unknown_volume_fails(e2b_env: Daemon, client: httpx.Client) -> None:
    """Sandbox.create with a volume that does not exist raises, naming it; nothing is made."""
    before = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    missing = vname("missing")
    with pytest.raises(SandboxException) as e:
        Sandbox.create(volume_mounts={"/mnt/data": missing})
    assert missing in str(e.value), e.value
    with pytest.raises(SandboxException):
        Sandbox.create(volume_mounts={"relative/path": missing})
    assert {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]} == before


def test_async_volume_and_sandbox(e2b_env: Daemon, client: httpx.Client) -> None:
    """AsyncVolume and AsyncSandbox do the same over the async client."""
    async def main() -> tuple[str, str]:
        v = await AsyncVolume.create(vname("async"))
        try:
            await v.write_file("/a.txt", "async wrote this")
            assert await v.read_file("/a.txt") == "async wrote this"
            assert [e.name for e in await v.list("/") if e.name != "lost+found"] == ["a.txt"]
            assert (await AsyncVolume.get_info(v.volume_id)).name == v.name
            assert v.volume_id in [x.volume_id for x in await AsyncVolume.list()]
            sandbox = await AsyncSandbox.create(volume_mounts={"/mnt/data": v})
            try:
                out = (await sandbox.commands.run("cat /mnt/data/a.txt")).stdout
                await sandbox.commands.run("echo back > /mnt/data/b.txt")
            finally:
                await sandbox.kill()
            back = await v.read_file("/b.txt")
        finally:
            assert await AsyncVolume.destroy(v.volume_id) is True
        assert await AsyncVolume.destroy(v.volume_id) is False
        return out, back

    out, back = asyncio.run(main())
    assert out == "async wrote this" and back == "back\n"
