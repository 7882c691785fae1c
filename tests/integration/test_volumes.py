"""Volumes: storage that outlives sandboxes (/v1/volumes).

A volume is an ext4 filesystem of its size, kept by the daemon across restarts. It is made,
listed, read and deleted through /v1/volumes; its files are reached without a sandbox through
/v1/volumes/{v}/files...; sandboxes mount it at create (`volumes: [{name, path, read_only}]`),
several at once, idmapped (what `user` writes is uid 1000 whoever reads it). A mounted volume
cannot be deleted; a full one refuses writes without hurting the daemon; a tenant sees, mounts
and deletes only its own, within its volume_storage_mb.

Effects are checked from the other side: what the files API writes is read inside a sandbox,
what a sandbox writes is read through the files API or another sandbox. Every test deletes
what it made, sandboxes first (they hold their volumes)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import Daemon, assert_error, create_sandbox, run, tenant, wait_until

MIB = 1 << 20
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
VOLUME_KEYS = {"id", "name", "tenant", "size_mb", "created_at", "used_bytes", "total_bytes",
               "mounted_by"}
KEEP = ["--teardown-on-exit", "false"]


def vname(prefix: str = "v") -> str:
    """A volume name no other test uses (the session daemon is shared)."""
    return f"{prefix}-{secrets.token_hex(4)}"


def files(v: str, suffix: str = "") -> str:
    """The files route of volume `v` (id or name)."""
    return f"/v1/volumes/{v}/files{suffix}"


def vput(c: httpx.Client, v: str, path: str, data: bytes, **params: str) -> httpx.Response:
    """PUT /v1/volumes/{v}/files/content?path=..."""
    return c.put(files(v, "/content"), params={"path": path, **params}, content=data)


def vread(c: httpx.Client, v: str, path: str) -> bytes:
    """A volume file's bytes through the files API; asserts 200."""
    r = c.get(files(v, "/content"), params={"path": path})
    assert r.status_code == 200, f"{path}: {r.status_code} {r.text}"
    return r.content


def volume(c: httpx.Client, v: str) -> dict[str, Any]:
    """GET /v1/volumes/{v}; asserts 200."""
    r = c.get(f"/v1/volumes/{v}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def sh(c: httpx.Client, sb: str, cmd: str, user: str = "user") -> dict[str, Any]:
    """Runs `cmd` in sandbox `sb`; asserts it exits 0."""
    res = run(c, sb, cmd=cmd, user=user)
    assert res["exit_code"] == 0, res
    return res


def host_volume_mounts(data_dir: Path) -> list[str]:
    """Lines of the host's mount table under `data_dir`/volumes."""
    prefix = str(data_dir / "volumes")
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if prefix in line]


class Made:
    """What a test makes on one daemon, removed at its end: sandboxes first, then volumes."""

    def __init__(self, c: httpx.Client) -> None:
        self.c = c
        self.sandboxes: list[str] = []
        self.volumes: list[str] = []

    def volume(self, name: str | None = None, size_mb: int | None = 64) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name or vname()}
        if size_mb is not None:
            body["size_mb"] = size_mb
        r = self.c.post("/v1/volumes", json=body)
        assert r.status_code == 201, r.text
        v: dict[str, Any] = r.json()
        self.volumes.append(v["id"])
        return v

    def sandbox(self, **body: Any) -> dict[str, Any]:
        sb = create_sandbox(self.c, **body)
        self.sandboxes.append(sb["id"])
        return sb

    def cleanup(self) -> None:
        for sb in self.sandboxes:
            with contextlib.suppress(httpx.HTTPError):
                self.c.delete(f"/v1/sandboxes/{sb}")
        for v in self.volumes:
            with contextlib.suppress(httpx.HTTPError):
                # A sandbox that is still going away may hold it a moment.
                wait_until(lambda v=v: self.c.delete(f"/v1/volumes/{v}").status_code
                           in (204, 404), 10, interval=0.2)


@pytest.fixture
def made(client: httpx.Client) -> Iterator[Made]:
    """Volumes and sandboxes of one test on the session daemon, removed afterwards."""
    m = Made(client)
    yield m
    m.cleanup()


@contextlib.contextmanager
def making(c: httpx.Client) -> Iterator[Made]:
    """Made, on a daemon of the test's own."""
    m = Made(c)
    try:
        yield m
    finally:
        m.cleanup()


# --- the volumes themselves --------------------------------------------------------------------


def test_create_get_list_delete(client: httpx.Client, made: Made) -> None:
    """Create is 201 with every field; get by id and by name; list is oldest first; delete is
    204 and then the volume is a 404 everywhere."""
    name = vname("crud")
    r = client.post("/v1/volumes", json={"name": name, "size_mb": 64})
    assert r.status_code == 201, r.text
    assert r.headers["content-type"].startswith("application/json")
    v = r.json()
    made.volumes.append(v["id"])
    assert set(v) == VOLUME_KEYS, v
    assert re.fullmatch(r"vol_[0-9a-f]+", v["id"]), v
    assert v["name"] == name and v["tenant"] is None and v["size_mb"] == 64
    assert RFC3339_MS.match(v["created_at"]), v
    made_at = datetime.fromisoformat(v["created_at"].replace("Z", "+00:00"))
    assert abs(time.time() - made_at.timestamp()) < 60, v
    assert v["mounted_by"] == []
    # statfs of a fresh 64 MiB ext4: most of it free, none of it more than the image.
    assert isinstance(v["total_bytes"], int) and 48 * MIB < v["total_bytes"] <= 64 * MIB, v
    assert isinstance(v["used_bytes"], int) and 0 <= v["used_bytes"] < 8 * MIB, v

    by_id, by_name = volume(client, v["id"]), volume(client, name)
    for got in (by_id, by_name):
        assert set(got) == VOLUME_KEYS, got
        assert {k: got[k] for k in ("id", "name", "tenant", "size_mb", "created_at")} == \
            {k: v[k] for k in ("id", "name", "tenant", "size_mb", "created_at")}

    second = made.volume(vname("crud2"), size_mb=16)
    r = client.get("/v1/volumes")
    assert r.status_code == 200, r.text
    listed = r.json()["volumes"]
    assert all(set(x) == VOLUME_KEYS for x in listed), listed
    ids = [x["id"] for x in listed if x["id"] in (v["id"], second["id"])]
    assert ids == [v["id"], second["id"]], listed
    assert [x["created_at"] for x in listed] == sorted(x["created_at"] for x in listed)

    r = client.delete(f"/v1/volumes/{v['id']}")
    assert r.status_code == 204 and r.content == b"", r.text
    assert_error(client.get(f"/v1/volumes/{v['id']}"), 404, "not_found")
    assert_error(client.get(f"/v1/volumes/{name}"), 404, "not_found")
    assert_error(client.delete(f"/v1/volumes/{v['id']}"), 404, "not_found")
    assert_error(client.get(files(v["id"]), params={"path": "/"}), 404, "not_found")
    assert v["id"] not in [x["id"] for x in client.get("/v1/volumes").json()["volumes"]]
    # By name too.
    assert client.delete(f"/v1/volumes/{second['name']}").status_code == 204
    assert_error(client.get(f"/v1/volumes/{second['id']}"), 404, "not_found")
    assert_error(client.get("/v1/volumes/vol_0000000000000000"), 404, "not_found")


def test_default_size(client: httpx.Client, made: Made) -> None:
    """Without size_mb a volume is volume_default_mb (1024) big."""
    v = made.volume(size_mb=None)
    assert v["size_mb"] == 1024, v
    assert 900 * MIB < volume(client, v["id"])["total_bytes"] <= 1024 * MIB


def test_duplicate_name_is_a_conflict(client: httpx.Client, made: Made) -> None:
    """A name in use is 409; once that volume is deleted the name is free again."""
    first = made.volume()
    err = assert_error(client.post("/v1/volumes", json={"name": first["name"], "size_mb": 16}),
                       409, "conflict")
    assert first["name"] in err["message"], err
    assert [x["id"] for x in client.get("/v1/volumes").json()["volumes"]
            if x["name"] == first["name"]] == [first["id"]]
    assert client.delete(f"/v1/volumes/{first['id']}").status_code == 204
    again = made.volume(first["name"], size_mb=16)
    assert again["id"] != first["id"]


@pytest.mark.parametrize("name", ["", "x" * 64, "vol_x", "a/b", "..", ".", "a b", "é", "a\nb"])
def test_bad_names(client: httpx.Client, name: str) -> None:
    """A name that is empty, too long, an id's prefix, a path or not [A-Za-z0-9._-] is 400."""
    before = {x["id"] for x in client.get("/v1/volumes").json()["volumes"]}
    assert_error(client.post("/v1/volumes", json={"name": name, "size_mb": 16}), 400,
                 "invalid_request")
    assert {x["id"] for x in client.get("/v1/volumes").json()["volumes"]} == before


def test_names_at_the_edges_are_accepted(made: Made) -> None:
    """63 characters, and each of the allowed punctuation marks."""
    long = ("z" + secrets.token_hex(31))[:63]
    assert made.volume(long, size_mb=16)["name"] == long
    odd = f"A.b_c-{secrets.token_hex(2)}"
    assert made.volume(odd, size_mb=16)["name"] == odd


def test_bad_bodies(client: httpx.Client) -> None:
    """No name, a name or size of the wrong type, a size below 16 or above volume_max_mb: 400
    naming the field; a body that is not a JSON object: 400 invalid_json."""
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "name"),
        ({"size_mb": 64}, "name"),
        ({"name": 5}, "name"),
        ({"name": None}, "name"),
        ({"name": vname(), "size_mb": 15}, "size_mb"),
        ({"name": vname(), "size_mb": 0}, "size_mb"),
        ({"name": vname(), "size_mb": -1}, "size_mb"),
        ({"name": vname(), "size_mb": 65537}, "size_mb"),
        ({"name": vname(), "size_mb": 1 << 40}, "size_mb"),
        ({"name": vname(), "size_mb": "64"}, "size_mb"),
        ({"name": vname(), "size_mb": 64.5}, "size_mb"),
    ]
    before = {x["id"] for x in client.get("/v1/volumes").json()["volumes"]}
    for body, field in cases:
        err = assert_error(client.post("/v1/volumes", json=body), 400, "invalid_request")
        assert field in err["message"], (body, err)
    for raw in (b"{not json", b'{"name": "x"', b"[1, 2]", b'"name"', b"\xff\xfe"):
        r = client.post("/v1/volumes", content=raw, headers={"Content-Type": "application/json"})
        assert_error(r, 400, "invalid_json")
    assert {x["id"] for x in client.get("/v1/volumes").json()["volumes"]} == before


def test_smallest_size(client: httpx.Client, made: Made) -> None:
    """16 MiB is allowed and usable."""
    v = made.volume(size_mb=16)
    assert v["size_mb"] == 16 and 0 < v["total_bytes"] <= 16 * MIB
    assert vput(client, v["id"], "/a", b"tiny").status_code == 201


# --- files without a sandbox --------------------------------------------------------------------


def test_files_roundtrip(client: httpx.Client, made: Made) -> None:
    """put and get content, stat, list, mkdir, move, delete (recursive), by id or by name."""
    v = made.volume()
    vid = v["id"]
    data = bytes(range(256)) * 400
    r = vput(client, vid, "/blob.bin", data)
    assert r.status_code == 201, r.text
    info = r.json()
    assert (info["path"], info["type"], info["size"]) == ("/blob.bin", "file", len(data)), info
    assert vread(client, vid, "/blob.bin") == data
    assert vread(client, v["name"], "/blob.bin") == data
    r = vput(client, vid, "/blob.bin", b"short")
    assert r.status_code == 200 and r.json()["size"] == 5, r.text
    assert vread(client, vid, "/blob.bin") == b"short"
    # A relative path is taken from the volume's top; parents are made.
    r = vput(client, vid, "rel/deep/a.txt", b"rel")
    assert r.status_code == 201 and r.json()["path"] == "/rel/deep/a.txt", r.text
    r = vput(client, vid, "/x.sh", b"#!/bin/sh\n", mode="0750")
    assert r.status_code == 201 and r.json()["mode"] == "0750", r.text

    st = client.get(files(vid, "/stat"), params={"path": "/blob.bin"})
    assert st.status_code == 200, st.text
    assert st.json()["size"] == 5 and st.json()["type"] == "file" and st.json()["mode"] == "0644"

    r = client.post(files(vid, "/mkdir"), json={"path": "/d/e"})
    assert r.status_code == 201 and r.json()["type"] == "directory", r.text
    assert vput(client, vid, "/d/f.txt", b"12345").status_code == 201
    r = client.get(files(vid), params={"path": "/d"})
    assert r.status_code == 200, r.text
    listing = r.json()
    assert listing["path"] == "/d" and listing["truncated"] is False, listing
    by_name = {e["name"]: e for e in listing["entries"]}
    assert set(by_name) == {"e", "f.txt"}, listing
    assert by_name["e"]["type"] == "directory" and by_name["e"]["path"] == "/d/e"
    assert by_name["f.txt"]["type"] == "file" and by_name["f.txt"]["size"] == 5
    assert by_name["f.txt"]["mtime"].endswith("Z")
    top = {e["name"] for e in client.get(files(vid), params={"path": "/"}).json()["entries"]}
    assert {"blob.bin", "rel", "x.sh", "d"} <= top, top
    # ext4's lost+found is the filesystem's, not the user's: tolerated, nothing else.
    assert top - {"blob.bin", "rel", "x.sh", "d", "lost+found"} == set(), top

    mv = client.post(files(vid, "/move"), json={"from": "/d/f.txt", "to": "/d/e/g.txt"})
    assert mv.status_code == 200 and mv.json()["path"] == "/d/e/g.txt", mv.text
    assert vread(client, vid, "/d/e/g.txt") == b"12345"
    assert_error(client.get(files(vid, "/stat"), params={"path": "/d/f.txt"}), 404, "not_found")
    assert vput(client, vid, "/d/h.txt", b"h").status_code == 201
    clash = client.post(files(vid, "/move"), json={"from": "/d/h.txt", "to": "/d/e/g.txt"})
    assert_error(clash, 409, "conflict")
    ok = client.post(files(vid, "/move"),
                     json={"from": "/d/h.txt", "to": "/d/e/g.txt", "overwrite": True})
    assert ok.status_code == 200, ok.text
    assert vread(client, vid, "/d/e/g.txt") == b"h"

    assert_error(client.delete(files(vid), params={"path": "/d"}), 409, "conflict")
    assert client.delete(files(vid), params={"path": "/d", "recursive": "true"}).status_code == 204
    assert_error(client.get(files(vid, "/stat"), params={"path": "/d"}), 404, "not_found")
    assert client.delete(files(vid), params={"path": "/blob.bin"}).status_code == 204
    assert_error(client.get(files(vid, "/content"), params={"path": "/blob.bin"}), 404,
                 "not_found")
    # Errors of a volume's files are the sandbox files' errors.
    assert_error(client.get(files(vid, "/content"), params={"path": "/rel"}), 400,
                 "invalid_request")
    assert_error(client.get(files(vid, "/content")), 400, "invalid_request")
    assert_error(client.get(files("vol_0000000000000000", "/content"), params={"path": "/a"}),
                 404, "not_found")
    assert_error(vput(client, "no-such-volume", "/a", b"x"), 404, "not_found")


def test_dotdot_cannot_leave_the_volume(client: httpx.Client, made: Made, daemon: Daemon) -> None:
    """`..` above the volume's top is 400 on every route, and a file planted just above it on
    the host is never read, written, moved or deleted; `..` that stays inside is fine."""
    v = made.volume()
    vid = v["id"]
    assert vput(client, vid, "/inside.txt", b"in").status_code == 201
    assert vput(client, vid, "/sub/k", b"k").status_code == 201
    assert vread(client, vid, "/sub/../inside.txt") == b"in"
    # The top is <data>/volumes/<id>/fs: two levels up is <data>/volumes.
    canary = daemon.data_dir / "volumes" / f"canary-{secrets.token_hex(4)}"
    canary.write_text("host only\n")
    try:
        for path in ("/..", f"/../../{canary.name}", f"../../{canary.name}",
                     f"/sub/../../../{canary.name}", f"/./../../{canary.name}"):
            for r in (client.get(files(vid, "/content"), params={"path": path}),
                      client.get(files(vid, "/stat"), params={"path": path}),
                      client.get(files(vid), params={"path": path}),
                      vput(client, vid, path, b"planted"),
                      client.delete(files(vid), params={"path": path, "recursive": "true"}),
                      client.post(files(vid, "/mkdir"), json={"path": path + "/newdir"})):
                assert b"host only" not in r.content, (path, r.request.method, r.text)
                assert_error(r, 400, "invalid_request")
            assert canary.read_text() == "host only\n", path
        for body in ({"from": "/inside.txt", "to": f"/../../{canary.name}"},
                     {"from": "/inside.txt", "to": "/../out.txt", "overwrite": True},
                     {"from": f"/../../{canary.name}", "to": "/stolen"}):
            assert_error(client.post(files(vid, "/move"), json=body), 400, "invalid_request")
        assert canary.read_text() == "host only\n"
        assert not (daemon.data_dir / "volumes" / vid / "out.txt").exists()
        assert vread(client, vid, "/inside.txt") == b"in"
        assert_error(client.get(files(vid, "/stat"), params={"path": "/stolen"}), 404,
                     "not_found")
    finally:
        canary.unlink(missing_ok=True)


def test_symlinks_planted_in_a_volume_stay_inside(client: httpx.Client, made: Made,
                                                  daemon: Daemon) -> None:
    """A sandbox plants symlinks to / and to the host's data directory in a volume; the files
    API resolves them inside the volume, never on the host."""
    v = made.volume()
    sb = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/data"}])
    secret = daemon.data_dir / f"host-secret-{secrets.token_hex(3)}.txt"
    secret.write_text("host only\n")
    try:
        sh(client, sb["id"], f"ln -s / /mnt/data/root; ln -s {daemon.data_dir} /mnt/data/dd; "
                             "ln -s ../../../.. /mnt/data/up; echo top > /mnt/data/top.txt")
        for path in (f"/dd/{secret.name}", f"/root{secret}", f"/up{secret}"):
            r = client.get(files(v["id"], "/content"), params={"path": path})
            assert r.status_code in (400, 404), f"{path}: {r.status_code} {r.text}"
            assert b"host only" not in r.content
        r = client.get(files(v["id"], "/content"), params={"path": "/root/top.txt"})
        assert r.status_code in (200, 400, 404), r.text
        if r.status_code == 200:
            assert r.content == b"top\n"  # `/` is the volume's top
        planted = f"planted-{secrets.token_hex(3)}"
        r = vput(client, v["id"], f"/dd/{planted}", b"planted")
        # Refused, or written inside the volume (parents made under its own top).
        assert r.status_code in (201, 400, 404), r.text
        assert not (daemon.data_dir / planted).exists()
        if r.status_code == 201:
            assert vread(client, v["id"], f"/dd/{planted}") == b"planted"
        assert secret.read_text() == "host only\n"
    finally:
        secret.unlink()


def test_used_bytes_grows(client: httpx.Client, made: Made) -> None:
    """Writing 5 MB shows in used_bytes (statfs of the volume's filesystem); deleting frees it."""
    v = made.volume()
    before = volume(client, v["id"])["used_bytes"]
    r = vput(client, v["id"], "/five", os.urandom(5 * MIB))
    assert r.status_code == 201, r.text
    target = before + 5 * MIB - 64 * 1024
    grown = wait_until(lambda: volume(client, v["id"])["used_bytes"] >= target, 5, interval=0.1)
    assert grown, (before, volume(client, v["id"]))
    now = volume(client, v["id"])
    assert now["used_bytes"] <= now["total_bytes"]
    assert client.delete(files(v["id"]), params={"path": "/five"}).status_code == 204
    assert wait_until(lambda: volume(client, v["id"])["used_bytes"] < before + MIB, 5, interval=0.1)


# --- mounts -------------------------------------------------------------------------------------


def test_mount_write_share_and_ownership(client: httpx.Client, made: Made) -> None:
    """A sandbox's `user` writes on the mount; the file is the volume's (files API), uid 1000
    inside; a second sandbox mounting the volume at the same time sees it and writes back."""
    v = made.volume()
    first = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/data"}])
    assert first["volumes"] == [{"id": v["id"], "name": v["name"], "path": "/mnt/data",
                                 "read_only": False}], first
    assert client.get(f"/v1/sandboxes/{first['id']}").json()["volumes"] == first["volumes"]
    # The top belongs to `user`, 0755.
    assert sh(client, first["id"], "stat -c '%u %g %a' /mnt/data")["stdout"] == "1000 1000 755\n"
    sh(client, first["id"], "sh -c 'echo hi > /mnt/data/x'")
    assert vread(client, v["id"], "/x") == b"hi\n"
    assert sh(client, first["id"], "stat -c '%u %g' /mnt/data/x")["stdout"] == "1000 1000\n"
    assert volume(client, v["id"])["mounted_by"] == [first["id"]]

    # By id this time, somewhere else.
    second = made.sandbox(volumes=[{"name": v["id"], "path": "/data/shared"}])
    assert second["volumes"][0]["id"] == v["id"] and second["volumes"][0]["name"] == v["name"]
    assert sh(client, second["id"], "cat /data/shared/x")["stdout"] == "hi\n"
    sh(client, second["id"], "echo back > /data/shared/y")
    assert sh(client, first["id"], "cat /mnt/data/y")["stdout"] == "back\n"
    assert sorted(volume(client, v["id"])["mounted_by"]) == sorted([first["id"], second["id"]])

    # What the files API writes, as `user` or as root, keeps its ids inside either sandbox.
    assert vput(client, v["id"], "/api.txt", b"api").status_code == 201
    assert vput(client, v["id"], "/root.txt", b"r", user="root").status_code == 201
    out = sh(client, second["id"], "stat -c '%n %u' /data/shared/api.txt /data/shared/root.txt")
    assert out["stdout"] == "/data/shared/api.txt 1000\n/data/shared/root.txt 0\n", out
    assert sh(client, first["id"], "cat /mnt/data/api.txt")["stdout"] == "api"
    # Root inside writes as 0, seen by the other sandbox; `user` cannot write over root's file.
    sh(client, first["id"], "echo r > /mnt/data/by-root; chmod 600 /mnt/data/by-root", user="root")
    assert sh(client, second["id"], "stat -c %u /data/shared/by-root")["stdout"] == "0\n"
    denied = run(client, second["id"], cmd="cat /data/shared/by-root")
    assert denied["exit_code"] != 0 and "Permission denied" in denied["stderr"], denied

    # A sandbox deleted leaves the files, and stops being listed as mounting the volume.
    assert client.delete(f"/v1/sandboxes/{first['id']}").status_code == 204
    assert volume(client, v["id"])["mounted_by"] == [second["id"]]
    assert vread(client, v["id"], "/x") == b"hi\n"


def test_read_only_mount(client: httpx.Client, made: Made) -> None:
    """A read_only mount reads but cannot write, not even as root, while another sandbox
    writes the same volume."""
    v = made.volume()
    assert vput(client, v["id"], "/there.txt", b"there").status_code == 201
    ro = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/ro", "read_only": True}])
    assert ro["volumes"] == [{"id": v["id"], "name": v["name"], "path": "/mnt/ro",
                              "read_only": True}], ro
    assert sh(client, ro["id"], "cat /mnt/ro/there.txt")["stdout"] == "there"
    for user in ("user", "root"):
        res = run(client, ro["id"], cmd="echo no > /mnt/ro/there.txt", user=user)
        assert res["exit_code"] != 0 and "Read-only file system" in res["stderr"], (user, res)
        res = run(client, ro["id"], cmd="mkdir /mnt/ro/d", user=user)
        assert res["exit_code"] != 0 and "Read-only file system" in res["stderr"], (user, res)
    # Root cannot lift it.
    run(client, ro["id"], cmd="mount -o remount,rw /mnt/ro; mount -o remount,rw,bind /mnt/ro",
        user="root")
    res = run(client, ro["id"], cmd="echo no > /mnt/ro/there.txt", user="root")
    assert res["exit_code"] != 0, res
    # Nor the sandbox's own files API, as `user` or as root.
    for params in ({}, {"user": "root"}):
        r = client.put(f"/v1/sandboxes/{ro['id']}/files/content",
                       params={"path": "/mnt/ro/via-api.txt", **params}, content=b"no")
        assert r.status_code >= 400, r.text
        r = client.delete(f"/v1/sandboxes/{ro['id']}/files",
                          params={"path": "/mnt/ro/there.txt", **params})
        assert r.status_code >= 400, r.text
    r = client.get(f"/v1/sandboxes/{ro['id']}/files/content", params={"path": "/mnt/ro/there.txt"})
    assert r.status_code == 200 and r.content == b"there", r.text
    assert_error(client.get(files(v["id"], "/stat"), params={"path": "/via-api.txt"}), 404,
                 "not_found")
    assert vread(client, v["id"], "/there.txt") == b"there"
    # A writer beside it; the reader sees its writes.
    rw = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/rw", "read_only": False}])
    sh(client, rw["id"], "echo new > /mnt/rw/new.txt")
    assert sh(client, ro["id"], "cat /mnt/ro/new.txt")["stdout"] == "new\n"
    assert sorted(volume(client, v["id"])["mounted_by"]) == sorted([ro["id"], rw["id"]])


def test_bad_mounts(client: httpx.Client, made: Made) -> None:
    """An unknown volume, a path that is relative, `/`, under /proc, /sys or /dev (also once
    normalized), two mounts at one path (also once normalized), a wrong type: 400, no sandbox
    made, the volume not held."""
    v = made.volume()
    other = made.volume(size_mb=16)
    name = v["name"]
    before = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}

    def refused(volumes: Any) -> dict[str, Any]:
        r = client.post("/v1/sandboxes", json={"volumes": volumes})
        if r.status_code == 201:
            made.sandboxes.append(r.json()["id"])  # removed at the end all the same
        err = assert_error(r, 400, "invalid_request")
        return err

    missing = f"missing-{secrets.token_hex(3)}"
    err = refused([{"name": missing, "path": "/mnt/data"}])
    assert missing in err["message"], err
    cases: list[Any] = [
        [{"name": name, "path": "mnt/data"}],
        [{"name": name, "path": ""}],
        [{"name": name, "path": "/"}],
        [{"name": name, "path": "/.."}],
        [{"name": name, "path": "/mnt/.."}],
        [{"name": name, "path": "/proc"}],
        [{"name": name, "path": "/proc/x"}],
        [{"name": name, "path": "/sys"}],
        [{"name": name, "path": "/sys/fs/x"}],
        [{"name": name, "path": "/dev"}],
        [{"name": name, "path": "/dev/x"}],
        [{"name": name, "path": "/mnt/../proc/x"}],
        [{"name": name, "path": "/mnt/x/../../sys/y"}],
        [{"name": name, "path": "//dev/x"}],
        [{"name": name, "path": "/mnt/data"}, {"name": other["name"], "path": "/mnt/data"}],
        [{"name": name, "path": "/mnt/data"}, {"name": name, "path": "/mnt/data"}],
        [{"name": name, "path": "/mnt/data"}, {"name": other["name"], "path": "/mnt//data"}],
        [{"name": name, "path": "/mnt/data"}, {"name": other["name"], "path": "/mnt/x/../data"}],
        [{"name": name}],
        [{"path": "/mnt/data"}],
        [{"name": name, "path": "/mnt/data", "read_only": "yes"}],
        [{"name": 5, "path": "/mnt/data"}],
        [{"name": name, "path": 5}],
        [name],
        {"name": name, "path": "/mnt/data"},
        "data",
    ]
    for volumes in cases:
        refused(volumes)
    assert {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]} == before
    # Nothing refused holds the volumes.
    assert volume(client, v["id"])["mounted_by"] == []
    assert client.delete(f"/v1/volumes/{other['id']}").status_code == 204


def test_mount_paths_are_normalized(client: httpx.Client, made: Made) -> None:
    """A path with `.`, `..` (staying below /) or `//` is taken normalized, as the sandbox's
    JSON says, or refused; never mounted anywhere else."""
    v = made.volume()
    for given, normal in (("/mnt/a/../b", "/mnt/b"), ("/mnt//data", "/mnt/data"),
                          ("/mnt/./data", "/mnt/data"), ("/mnt/data/", "/mnt/data")):
        r = client.post("/v1/sandboxes", json={"volumes": [{"name": v["name"], "path": given}]})
        if r.status_code != 201:
            assert_error(r, 400, "invalid_request")
            continue
        sb = r.json()
        made.sandboxes.append(sb["id"])
        assert [m["path"] for m in sb["volumes"]] == [normal], (given, sb["volumes"])
        sh(client, sb["id"], f"echo {secrets.token_hex(2)} > {normal}/probe")
        assert sh(client, sb["id"], f"stat -c %u {normal}/probe")["stdout"] == "1000\n"
        assert client.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204


def test_a_mount_the_template_cannot_take_is_refused_cleanly(client: httpx.Client, made: Made,
                                                             daemon: Daemon) -> None:
    """A path the sandbox's image cannot hold a mount at (an existing file, a directory that
    cannot be made in its read-only /usr) is the caller's mistake: 400 naming the path, no
    sandbox left, the volume not held, nothing mounted on the host."""
    v = made.volume()
    before = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    host_before = Path("/proc/self/mountinfo").read_text().splitlines()
    for path in ("/etc/hostname", "/bin/vol-mount"):
        r = client.post("/v1/sandboxes", json={"volumes": [{"name": v["name"], "path": path}]})
        if r.status_code == 201:
            made.sandboxes.append(r.json()["id"])
            continue  # an image that can take it: nothing to refuse
        err = assert_error(r, 400, "invalid_request")
        assert path in err["message"], err
    assert {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]} - before == \
        set(made.sandboxes)
    if not made.sandboxes:
        left = set(Path("/proc/self/mountinfo").read_text().splitlines()) - set(host_before)
        assert not [m for m in left if str(daemon.data_dir) in m], left
    assert daemon.alive()
    for sb in made.sandboxes:
        assert client.delete(f"/v1/sandboxes/{sb}").status_code == 204
    assert volume(client, v["id"])["mounted_by"] == []
    assert client.delete(f"/v1/volumes/{v['id']}").status_code == 204


def test_a_templates_link_cannot_lead_a_mount_out_of_its_root(client: httpx.Client,
                                                               made: Made) -> None:
    """The way to a mount point is taken through no link and on the root's own mount: a
    template's /workspace/devlink -> /dev would otherwise put a tenant's volume over the
    sandbox's /dev/pts, where the daemon opens ptmx. 400 naming the step, nothing made."""
    v = made.volume(size_mb=16)
    src = made.sandbox()
    sh(client, src["id"], "ln -s /dev /workspace/devlink && ln -s /proc /workspace/proclink")
    name = f"linky-{secrets.token_hex(4)}"
    r = client.post(f"/v1/sandboxes/{src['id']}/snapshot", json={"name": name})
    assert r.status_code == 201, r.text
    try:
        before = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
        for path in ("/workspace/devlink/pts", "/workspace/proclink/sys", "/workspace/devlink"):
            r = client.post("/v1/sandboxes", json={
                "template": name, "volumes": [{"name": v["id"], "path": path}]})
            err = assert_error(r, 400, "invalid_request")
            assert "volume:" in err["message"] and "mount point" in err["message"], err
        assert {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]} == before
        # The same template takes a volume where no link leads.
        sb = made.sandbox(template=name, volumes=[{"name": v["id"], "path": "/workspace/v"}])
        assert sh(client, sb["id"], "readlink /workspace/devlink; ls /dev/pts | head -1")[
            "stdout"].startswith("/dev\n")
        assert client.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
    finally:
        client.delete(f"/v1/sandboxes/{src['id']}")
        assert client.delete(f"/v1/templates/{name}").status_code == 204


def test_at_most_sixteen_mounts(client: httpx.Client, made: Made) -> None:
    """16 volumes mount at once; 17 is 400."""
    vols = [made.volume(size_mb=16) for _ in range(17)]
    mounts = [{"name": v["name"], "path": f"/mnt/v{i}"} for i, v in enumerate(vols)]
    before = {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    assert_error(client.post("/v1/sandboxes", json={"volumes": mounts}), 400, "invalid_request")
    assert {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]} == before
    sb = made.sandbox(volumes=mounts[:16])
    assert [m["path"] for m in sb["volumes"]] == [f"/mnt/v{i}" for i in range(16)]
    cmd = "; ".join(f"echo {i} > /mnt/v{i}/n" for i in range(16))
    sh(client, sb["id"], cmd)
    for i in (0, 7, 15):
        assert vread(client, vols[i]["id"], "/n") == f"{i}\n".encode()
    assert_error(client.get(files(vols[16]["id"], "/content"), params={"path": "/n"}), 404,
                 "not_found")


def test_deleting_a_mounted_volume_is_a_conflict(client: httpx.Client, made: Made) -> None:
    """409 naming the sandbox while it mounts the volume; its files stay; 204 once it is gone."""
    v = made.volume()
    sb = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/data"}])
    sh(client, sb["id"], "echo kept > /mnt/data/k")
    for ref in (v["id"], v["name"]):
        err = assert_error(client.delete(f"/v1/volumes/{ref}"), 409, "conflict")
        assert sb["id"] in err["message"], err
    assert volume(client, v["id"])["mounted_by"] == [sb["id"]]
    assert sh(client, sb["id"], "cat /mnt/data/k")["stdout"] == "kept\n"
    assert vread(client, v["id"], "/k") == b"kept\n"
    assert client.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
    assert client.delete(f"/v1/volumes/{v['id']}").status_code == 204
    assert_error(client.get(f"/v1/volumes/{v['id']}"), 404, "not_found")
    # Gone with everything on it: a new volume of the same name starts empty.
    again = made.volume(v["name"])
    entries = client.get(files(again["id"]), params={"path": "/"}).json()["entries"]
    assert [e["name"] for e in entries if e["name"] != "lost+found"] == []


def test_an_expired_sandbox_lets_its_volume_go(client: httpx.Client, made: Made,
                                               marker: str) -> None:
    """A sandbox the daemon ends itself (its TTL), with a process holding a file of the volume
    open, stops holding the volume: mounted_by empties and the volume deletes."""
    v = made.volume()
    sb = made.sandbox(ttl_seconds=2, volumes=[{"name": v["name"], "path": "/mnt/data"}])
    r = client.post(f"/v1/sandboxes/{sb['id']}/processes",
                    json={"cmd": f"exec 3>/mnt/data/held; echo held >&3; sleep {marker}"})
    assert r.status_code == 201, r.text
    assert wait_until(lambda: client.get(f"/v1/sandboxes/{sb['id']}").status_code == 404, 10)
    released = wait_until(lambda: volume(client, v["id"])["mounted_by"] == [], 5)
    assert released, volume(client, v["id"])
    assert vread(client, v["id"], "/held") == b"held\n"
    assert client.delete(f"/v1/volumes/{v['id']}").status_code == 204


def test_a_paused_sandbox_keeps_its_volume(client: httpx.Client, made: Made) -> None:
    """Paused, a sandbox still mounts its volume (409 on delete); the volume's files stay
    reachable through the files API; resumed, it goes on with the volume."""
    v = made.volume()
    sb = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/data"}])
    sh(client, sb["id"], "echo before > /mnt/data/p")
    r = client.post(f"/v1/sandboxes/{sb['id']}/pause", json={})
    assert r.status_code == 200, r.text
    assert client.get(f"/v1/sandboxes/{sb['id']}").json()["status"] == "paused"
    assert vread(client, v["id"], "/p") == b"before\n"
    assert vput(client, v["id"], "/while-paused", b"w").status_code == 201
    err = assert_error(client.delete(f"/v1/volumes/{v['id']}"), 409, "conflict")
    assert sb["id"] in err["message"], err
    r = client.post(f"/v1/sandboxes/{sb['id']}/resume")
    assert r.status_code == 200, r.text
    assert sh(client, sb["id"], "cat /mnt/data/p /mnt/data/while-paused")["stdout"] == "before\nw"


def test_concurrent_creates_of_one_name(client: httpx.Client, made: Made) -> None:
    """Several creates of one name at once: exactly one is made, the others are 409."""
    import concurrent.futures
    name = vname("race")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        rs = list(pool.map(lambda _: client.post("/v1/volumes",
                                                 json={"name": name, "size_mb": 16}), range(4)))
    made.volumes += [r.json()["id"] for r in rs if r.status_code == 201]
    assert sorted(r.status_code for r in rs) == [201, 409, 409, 409], [r.text for r in rs]
    assert [x["name"] for x in client.get("/v1/volumes").json()["volumes"]].count(name) == 1


# --- size ---------------------------------------------------------------------------------------


def test_size_holds(client: httpx.Client, made: Made, daemon: Daemon) -> None:
    """A 16 MiB volume takes no 64 MB: dd fails with ENOSPC inside, the files API answers 413
    for a 32 MB upload, the daemon stays healthy, and the volume works once space is freed."""
    v = made.volume(size_mb=16)
    sb = made.sandbox(volumes=[{"name": v["name"], "path": "/mnt/data"}])
    res = run(client, sb["id"], cmd="dd if=/dev/zero of=/mnt/data/big bs=1M count=64",
              timeout_seconds=30)
    assert res["exit_code"] != 0, res
    assert "No space left on device" in res["stderr"], res
    assert daemon.alive()
    assert httpx.get(f"{daemon.url}/healthz", timeout=5).status_code == 200
    full = volume(client, v["id"])
    assert full["used_bytes"] <= full["total_bytes"] <= 16 * MIB, full
    # The other sandboxes' disk is not this volume's.
    assert sh(client, sb["id"], "echo fine > /tmp/t; cat /tmp/t")["stdout"] == "fine\n"

    sh(client, sb["id"], "rm /mnt/data/big")
    r = vput(client, v["id"], "/upload", b"\0" * (32 * MIB))
    assert_error(r, 413, "payload_too_large")
    assert daemon.alive()
    # Nothing half-written is left taking the space.
    assert_error(client.get(files(v["id"], "/stat"), params={"path": "/upload"}), 404, "not_found")
    assert vput(client, v["id"], "/small", b"ok").status_code == 201
    assert sh(client, sb["id"], "cat /mnt/data/small")["stdout"] == "ok"
    assert httpx.get(f"{daemon.url}/healthz", timeout=5).status_code == 200


# --- restarts -----------------------------------------------------------------------------------


def test_volume_outlives_its_sandbox_and_a_restart(daemon_factory: Any, tmp_path: Path) -> None:
    """The issue's case: a sandbox writes a volume and is deleted, the daemon restarts on the
    same data directory, and the next sandbox mounting the volume reads what was written."""
    data_dir = tmp_path / "data"
    token = secrets.token_hex(16)
    blob = os.urandom(3 * MIB)
    d = daemon_factory(data_dir=data_dir)
    with d.client() as c:
        v = c.post("/v1/volumes", json={"name": "work", "size_mb": 64})
        assert v.status_code == 201, v.text
        vol = v.json()
        later = c.post("/v1/volumes", json={"name": "later", "size_mb": 16})
        assert later.status_code == 201, later.text
        writer = create_sandbox(c, volumes=[{"name": "work", "path": "/mnt/data"}])
        sh(c, writer["id"], f"mkdir -p /mnt/data/notes && echo {token} > /mnt/data/notes/n.txt")
        assert vput(c, vol["id"], "/blob.bin", blob).status_code == 201
        assert c.delete(f"/v1/sandboxes/{writer['id']}").status_code == 204
        assert vread(c, vol["id"], "/notes/n.txt") == f"{token}\n".encode()
        before = {x["id"]: x for x in c.get("/v1/volumes").json()["volumes"]}
    assert d.stop() == 0, d.log_tail()
    # A daemon stopped leaves nothing of its volumes mounted on the host.
    assert host_volume_mounts(data_dir) == []

    d2 = daemon_factory(data_dir=data_dir)
    with d2.client() as c, making(c) as m:
        m.volumes += list(before)
        listed = c.get("/v1/volumes").json()["volumes"]
        assert [x["id"] for x in listed] == [vol["id"], later.json()["id"]], listed
        for x in listed:
            for k in ("name", "tenant", "size_mb", "created_at"):
                assert x[k] == before[x["id"]][k], (k, x, before[x["id"]])
        assert listed[0]["mounted_by"] == [] and listed[0]["used_bytes"] >= 3 * MIB
        reader = m.sandbox(volumes=[{"name": "work", "path": "/mnt/data"}])
        assert sh(c, reader["id"], "cat /mnt/data/notes/n.txt")["stdout"] == f"{token}\n"
        assert sh(c, reader["id"], "stat -c %u /mnt/data/notes/n.txt")["stdout"] == "1000\n"
        sums = sh(c, reader["id"], "sha256sum < /mnt/data/blob.bin")["stdout"].split()[0]
        assert sums == hashlib.sha256(blob).hexdigest()
        assert vread(c, "work", "/notes/n.txt") == f"{token}\n".encode()
        # Still a volume like any other: it writes, and it deletes once unmounted.
        sh(c, reader["id"], "echo more >> /mnt/data/notes/n.txt")
        assert c.delete(f"/v1/sandboxes/{reader['id']}").status_code == 204
        for x in listed:
            assert c.delete(f"/v1/volumes/{x['id']}").status_code == 204
        assert c.get("/v1/volumes").json()["volumes"] == []
    assert d2.stop() == 0, d2.log_tail()
    assert host_volume_mounts(data_dir) == []
    assert not (data_dir / "volumes").exists() or not list((data_dir / "volumes").iterdir())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_kept_sandbox_keeps_its_mount_across_a_restart(daemon_factory: Any, tmp_path: Path,
                                                         sig: int) -> None:
    """A sandbox that lives through a restart still has its volume, and it is the same
    filesystem the restarted daemon serves (not a second mount of the image)."""
    data_dir = tmp_path / "data"
    d = daemon_factory(args=KEEP, data_dir=data_dir)
    with d.client() as c:
        r = c.post("/v1/volumes", json={"name": "kept", "size_mb": 64})
        assert r.status_code == 201, r.text
        vol = r.json()
        sb = create_sandbox(c, volumes=[{"name": "kept", "path": "/mnt/data"}])
        sh(c, sb["id"], "echo before > /mnt/data/a")
    if sig == signal.SIGKILL:
        d.kill()
    else:
        assert d.stop(sig) == 0, d.log_tail()

    d2 = daemon_factory(data_dir=data_dir)  # tears down at its end
    with d2.client() as c, making(c) as m:
        m.sandboxes.append(sb["id"])
        m.volumes.append(vol["id"])
        got = c.get(f"/v1/sandboxes/{sb['id']}").json()
        assert got["status"] == "running", got
        assert got["volumes"] == [{"id": vol["id"], "name": "kept", "path": "/mnt/data",
                                   "read_only": False}], got
        assert volume(c, vol["id"])["mounted_by"] == [sb["id"]]
        assert sh(c, sb["id"], "cat /mnt/data/a")["stdout"] == "before\n"
        # Both ways, through the sandbox's mount and the daemon's.
        sh(c, sb["id"], "echo after > /mnt/data/b")
        assert vread(c, vol["id"], "/b") == b"after\n"
        assert vput(c, vol["id"], "/c", b"from the api").status_code == 201
        assert sh(c, sb["id"], "cat /mnt/data/c")["stdout"] == "from the api"
        assert_error(c.delete(f"/v1/volumes/{vol['id']}"), 409, "conflict")
        assert c.delete(f"/v1/sandboxes/{sb['id']}").status_code == 204
        assert c.delete(f"/v1/volumes/{vol['id']}").status_code == 204
    assert d2.stop() == 0, d2.log_tail()
    assert host_volume_mounts(data_dir) == []


# --- tenants ------------------------------------------------------------------------------------


@pytest.fixture
def access(daemon_factory: Any) -> Daemon:
    """A daemon of its own: tenants are the daemon's state."""
    d: Daemon = daemon_factory()
    return d


def test_volume_storage_quota(access: Daemon) -> None:
    """volume_storage_mb 100: 64 fits, another 64 is 429, 32 more fits (96); deleting one frees
    its share; the admin raising the quota holds at once."""
    with access.client() as admin:
        key = tenant(admin, "vq", volume_storage_mb=100)
        assert admin.get("/v1/admin/tenants/vq").json()["quotas"]["volume_storage_mb"] == 100
        with access.client(key=key) as t, making(t) as m:
            first = m.volume("first", size_mb=64)
            assert first["tenant"] == "vq"
            err = assert_error(t.post("/v1/volumes", json={"name": "second", "size_mb": 64}), 429,
                               "quota_exceeded")
            assert "volume_storage_mb" in err["message"], err
            assert [x["name"] for x in t.get("/v1/volumes").json()["volumes"]] == ["first"]
            m.volume("third", size_mb=32)
            # What the quota measures, as the tenant's usage shows it.
            assert t.get("/v1/usage").json()["usage"]["volume_storage_mb"] == 96
            assert admin.get("/v1/admin/tenants/vq").json()["usage"]["volume_storage_mb"] == 96
            assert_error(t.post("/v1/volumes", json={"name": "fourth", "size_mb": 16}), 429,
                         "quota_exceeded")
            # The default size (1024) is over the quota by itself.
            assert_error(t.post("/v1/volumes", json={"name": "big"}), 429, "quota_exceeded")
            assert t.delete("/v1/volumes/first").status_code == 204
            m.volume("second", size_mb=64)
            r = admin.patch("/v1/admin/tenants/vq", json={"quotas": {"volume_storage_mb": 200}})
            assert r.status_code == 200, r.text
            m.volume("fourth", size_mb=64)
            # The admin itself has no quota.
            with making(admin) as am:
                am.volume("admins", size_mb=128)
        for bad in ({"volume_storage_mb": -1}, {"volume_storage_mb": "100"}):
            assert_error(admin.patch("/v1/admin/tenants/vq", json={"quotas": bad}), 400,
                         "invalid_request")


def test_parallel_creates_hold_the_quota(access: Daemon) -> None:
    """Volumes being made count against volume_storage_mb already: of four 64 MiB creates at
    once under 100, one is made."""
    import concurrent.futures
    with access.client() as admin:
        key = tenant(admin, "vpar", volume_storage_mb=100)
        with access.client(key=key) as t, making(t) as m:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(
                    lambda i: t.post("/v1/volumes", json={"name": f"p{i}", "size_mb": 64}),
                    range(4)))
            made_ids = [r.json()["id"] for r in answers if r.status_code == 201]
            m.volumes.extend(made_ids)
            assert len(made_ids) == 1, [r.text for r in answers]
            assert sorted(r.status_code for r in answers) == [201, 429, 429, 429]
            assert t.get("/v1/usage").json()["usage"]["volume_storage_mb"] == 64


def test_a_tenant_with_volumes_is_not_deleted(access: Daemon) -> None:
    """A tenant's volumes are kept by its name: while it has any, deleting it is 409 (a tenant
    made again under that name would have them)."""
    with access.client() as admin:
        key = tenant(admin, "vdel")
        with access.client(key=key) as t:
            r = t.post("/v1/volumes", json={"name": "keep", "size_mb": 16})
            assert r.status_code == 201, r.text
            err = assert_error(admin.delete("/v1/admin/tenants/vdel"), 409, "conflict")
            assert "volume" in err["message"], err
            assert t.delete("/v1/volumes/keep").status_code == 204
        assert admin.delete("/v1/admin/tenants/vdel").status_code == 204


def test_tenants_see_mount_and_delete_only_their_own(access: Daemon) -> None:
    """Tenant B cannot list, get, read, write, mount or delete tenant A's volume, by id or by
    name; names are per tenant."""
    with access.client() as admin:
        key_a, key_b = tenant(admin, "alpha"), tenant(admin, "beta")
        with access.client(key=key_a) as a, access.client(key=key_b) as b, \
                making(a) as ma, making(b) as mb:
            va = ma.volume("data")
            assert va["tenant"] == "alpha"
            assert vput(a, va["id"], "/secret.txt", b"alpha's").status_code == 201
            assert b.get("/v1/volumes").json()["volumes"] == []
            for ref in (va["id"], "data"):
                assert_error(b.get(f"/v1/volumes/{ref}"), 404, "not_found")
                assert_error(b.delete(f"/v1/volumes/{ref}"), 404, "not_found")
                assert_error(b.get(files(ref, "/content"), params={"path": "/secret.txt"}), 404,
                             "not_found")
                assert_error(b.get(files(ref), params={"path": "/"}), 404, "not_found")
                assert_error(b.get(files(ref, "/stat"), params={"path": "/secret.txt"}), 404,
                             "not_found")
                assert_error(vput(b, ref, "/planted", b"x"), 404, "not_found")
                assert_error(b.delete(files(ref), params={"path": "/secret.txt"}), 404,
                             "not_found")
                assert_error(b.post(files(ref, "/mkdir"), json={"path": "/d"}), 404, "not_found")
                assert_error(b.post(files(ref, "/move"),
                                    json={"from": "/secret.txt", "to": "/s"}), 404, "not_found")
            err = assert_error(b.post("/v1/sandboxes", json={
                "volumes": [{"name": va["id"], "path": "/mnt/data"}]}), 400, "invalid_request")
            assert va["id"] in err["message"], err
            assert b.get("/v1/sandboxes").json()["sandboxes"] == []
            # B's own "data" is another volume; B mounting "data" gets its own.
            vb = mb.volume("data")
            assert vb["id"] != va["id"] and vb["tenant"] == "beta"
            sb = mb.sandbox(volumes=[{"name": "data", "path": "/mnt/data"}])
            assert sb["volumes"][0]["id"] == vb["id"]
            res = run(b, sb["id"], cmd="ls /mnt/data; cat /mnt/data/secret.txt")
            assert res["exit_code"] != 0 and "alpha's" not in res["stdout"], res
            # A's volume is untouched, and A sees only its own.
            assert vread(a, va["id"], "/secret.txt") == b"alpha's"
            assert [x["id"] for x in a.get("/v1/volumes").json()["volumes"]] == [va["id"]]
            assert volume(a, "data")["id"] == va["id"]
            assert volume(a, va["id"])["mounted_by"] == []
            # A tenant's sandbox, mounting its volume, is named to it in the 409; B's not at all.
            sa = ma.sandbox(volumes=[{"name": "data", "path": "/mnt/data"}])
            err = assert_error(a.delete("/v1/volumes/data"), 409, "conflict")
            assert sa["id"] in err["message"] and sb["id"] not in err["message"], err


def test_a_sandbox_token_cannot_use_volumes(access: Daemon) -> None:
    """A sandbox-scoped token, whatever its scopes, cannot reach /v1/volumes."""
    with access.client() as admin:
        key = tenant(admin, "tok")
        with access.client(key=key) as t, making(t) as m:
            v = m.volume("mine")
            sb = m.sandbox(volumes=[{"name": "mine", "path": "/mnt/data"}])
            r = t.post(f"/v1/sandboxes/{sb['id']}/tokens",
                       json={"scopes": ["read", "exec", "files:read", "files:write"],
                             "ttl_seconds": 600})
            assert r.status_code == 201, r.text
            tok = r.json()["token"]
            with access.client(key=tok) as s:
                # The token works for its sandbox...
                assert s.get(f"/v1/sandboxes/{sb['id']}").status_code == 200
                # ...and for nothing of volumes.
                calls: list[tuple[str, str, dict[str, Any]]] = [
                        ("GET", "/v1/volumes", {}),
                        ("POST", "/v1/volumes", {"json": {"name": "by-token", "size_mb": 16}}),
                        ("GET", f"/v1/volumes/{v['id']}", {}),
                        ("GET", "/v1/volumes/mine", {}),
                        ("DELETE", f"/v1/volumes/{v['id']}", {}),
                        ("GET", files(v["id"]), {"params": {"path": "/"}}),
                        ("GET", files(v["id"], "/content"), {"params": {"path": "/x"}}),
                        ("PUT", files(v["id"], "/content"),
                         {"params": {"path": "/x"}, "content": b"x"}),
                        ("POST", files(v["id"], "/mkdir"), {"json": {"path": "/d"}})]
                for method, url, kwargs in calls:
                    r = s.request(method, url, **kwargs)
                    assert r.status_code in (403, 404), f"{method} {url}: {r.status_code} {r.text}"
                    body = r.json()
                    assert set(body) == {"error"} and body["error"]["code"] in (
                        "forbidden", "not_found"), body
            assert [x["name"] for x in t.get("/v1/volumes").json()["volumes"]] == ["mine"]
            assert_error(t.get(files(v["id"], "/stat"), params={"path": "/x"}), 404, "not_found")


def test_tenant_volumes_and_quota_survive_a_restart(daemon_factory: Any, tmp_path: Path) -> None:
    """After a restart a tenant's volume is still its own (another tenant gets 404) and still
    counts against its volume_storage_mb."""
    data_dir = tmp_path / "data"
    d = daemon_factory(data_dir=data_dir)
    with d.client() as admin:
        key_a, key_b = tenant(admin, "ra", volume_storage_mb=100), tenant(admin, "rb")
        with d.client(key=key_a) as a:
            r = a.post("/v1/volumes", json={"name": "keep", "size_mb": 64})
            assert r.status_code == 201, r.text
            vid = r.json()["id"]
            assert vput(a, vid, "/a.txt", b"tenant a").status_code == 201
    assert d.stop() == 0, d.log_tail()
    d2 = daemon_factory(data_dir=data_dir)
    with d2.client(key=key_a) as a, d2.client(key=key_b) as b, making(a) as m:
        m.volumes.append(vid)
        got = volume(a, "keep")
        assert got["id"] == vid and got["tenant"] == "ra", got
        assert vread(a, vid, "/a.txt") == b"tenant a"
        assert_error(a.post("/v1/volumes", json={"name": "more", "size_mb": 64}), 429,
                     "quota_exceeded")
        assert b.get("/v1/volumes").json()["volumes"] == []
        assert_error(b.get(f"/v1/volumes/{vid}"), 404, "not_found")
        assert_error(b.get(files(vid, "/content"), params={"path": "/a.txt"}), 404, "not_found")
    assert d2.stop() == 0, d2.log_tail()
