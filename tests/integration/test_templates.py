"""Templates: image archives imported through the API (OCI layout and docker save), sandboxes
made from them (layers shared, idmapped, whiteouts applied, the image config honoured), bad
archives refused with nothing left behind, deletion, tenants, a restart; directory templates
idmapped the same way."""

from __future__ import annotations

import json
import os
import tarfile
import io
from pathlib import Path
from typing import Any

import httpx
import pytest

import images
from helpers import API_KEY, assert_error, create_sandbox, run
from sse import SseEvent, iter_sse

TAR = {"Content-Type": "application/x-tar"}


def import_archive(c: httpx.Client, name: str, archive: bytes, **headers: str) -> httpx.Response:
    return c.post("/v1/templates", params={"name": name}, content=archive,
                  headers={**TAR, **headers}, timeout=120)


def sh(c: httpx.Client, sandbox_id: str, cmd: str, **body: Any) -> str:
    r = run(c, sandbox_id, cmd=cmd, **body)
    assert r["exit_code"] == 0, r
    return str(r["stdout"])


def layer_dirs(data_dir: Path) -> set[str]:
    root = data_dir / "images" / "layers" / "sha256"
    return set(os.listdir(root)) if root.exists() else set()


def leftovers(data_dir: Path) -> list[str]:
    """Anything in the image store's scratch places: a failed import must leave none."""
    found = []
    for sub in ("tmp",):
        d = data_dir / "images" / sub
        if d.exists():
            found += [str(p) for p in d.iterdir()]
    return found


@pytest.fixture(scope="module")
def tiny() -> images.Image:
    return images.tiny_image()


def test_an_oci_image_becomes_a_template_and_its_sandboxes_see_the_image(
        client: httpx.Client, daemon: Any, tiny: images.Image) -> None:
    r = import_archive(client, "tiny-oci", tiny.oci_archive())
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["name"] == "tiny-oci" and t["kind"] == "image" and t["status"] == "ready"
    assert t["layers_count"] == 2 and t["user"] == "app" and t["working_dir"] == "/app"
    assert "GREETING=from-image" in t["env"] and t["tags"] == ["tiny:1"]
    assert t["digest"].startswith("sha256:")
    assert client.get("/v1/templates/tiny-oci").json() == t
    assert "tiny-oci" in [x["name"] for x in client.get("/v1/templates").json()["templates"]]

    sb = create_sandbox(client, template="tiny-oci", env={"OWN": "1"})
    try:
        assert sb["template"] == "tiny-oci" and sb["cwd"] == "/app"
        # The image's User, Env and WorkingDir; the sandbox's env on top.
        assert sh(client, sb["id"], "id -u; id -g; pwd").split() == ["1234", "1234", "/app"]
        env = sh(client, sb["id"], "env")
        assert "GREETING=from-image" in env and "OWN=1" in env
        # Owners as the image has them, inside the sandbox's user namespace.
        owners = sh(client, sb["id"], "stat -c '%n %u %g %a' /app/owned-by-app /app/root-only "
                                      "/etc/passwd /tmp")
        assert owners.splitlines() == ["/app/owned-by-app 1234 1234 644",
                                       "/app/root-only 0 0 600", "/etc/passwd 0 0 644",
                                       "/tmp 0 0 1777"]
        # The top layer's whiteout and opaque directory; links resolve inside the root.
        assert sh(client, sb["id"], "ls /data; ls /opaque").split() == ["keep", "upper-only"]
        assert sh(client, sb["id"], "cat /app/link-abs /app/hard /app/added") == \
            "ID=tiny\nID=tiny\ntop\n"
        # Root-only files stay the image root's; the sandbox's root may change the image's files
        # (in its own layer), its user may not.
        denied = run(client, sb["id"], cmd="cat /app/root-only")
        assert denied["exit_code"] != 0 and "Permission denied" in denied["stderr"]
        assert sh(client, sb["id"], "cat /app/root-only", user="root") == "secret\n"
        sh(client, sb["id"], "echo changed > /etc/os-release; rm /app/added", user="root")
        assert sh(client, sb["id"], "cat /etc/os-release; ls /app").split() == \
            ["changed", "hard", "link-abs", "owned-by-app", "root-only"]
        sh(client, sb["id"], "touch /home/app/mine")
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
    # Another sandbox of the template starts from the image again, not from what one changed.
    sb2 = create_sandbox(client, template="tiny-oci")
    try:
        assert sh(client, sb2["id"], "cat /etc/os-release; ls /app/added") == "ID=tiny\n/app/added\n"
    finally:
        client.delete(f"/v1/sandboxes/{sb2['id']}")


def test_a_docker_save_archive_streams_its_progress_and_shares_layers(
        client: httpx.Client, daemon: Any, tiny: images.Image) -> None:
    before = layer_dirs(daemon.data_dir)
    # The same base layer under another top layer.
    other = images.Image([tiny.layers[0], images.layer_tar([images.Entry("other", b"x\n")])],
                         tag="other:2")
    with client.stream("POST", "/v1/templates", params={"name": "other-docker"},
                       content=other.docker_archive(),
                       headers={**TAR, "Accept": "text/event-stream"}, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [e for e in iter_sse(r) if isinstance(e, SseEvent)]
    kinds = [e.event for e in events]
    assert kinds[-1] == "template", events
    assert "progress" in kinds
    steps = {json.loads(e.data)["step"] for e in events if e.event == "progress"}
    assert "unpack" in steps or "verify" in steps, steps
    t = json.loads(events[-1].data)
    assert t["name"] == "other-docker" and t["tags"] == ["other:2"] and t["layers_count"] == 2
    # Its base layer is stored once, whichever template came first.
    added = layer_dirs(daemon.data_dir) - before
    assert len(added) <= 1, added
    sb = create_sandbox(client, template="other-docker")
    try:
        assert sh(client, sb["id"], "cat /other; id -un 2>/dev/null || id -u") in ("x\napp\n", "x\n1234\n")
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
    assert client.delete("/v1/templates/other-docker").status_code == 204


def test_a_template_in_use_is_not_deleted_and_its_layers_go_with_the_last_template(
        client: httpx.Client, daemon: Any) -> None:
    im = images.Image([images.layer_tar(images.system_layer(user="solo", uid=2000) +
                                        [images.Entry("solo-only", b"1\n")])], user="solo")
    before = layer_dirs(daemon.data_dir)
    assert import_archive(client, "solo", im.oci_archive()).status_code == 201
    added = layer_dirs(daemon.data_dir) - before
    assert len(added) == 1
    sb = create_sandbox(client, template="solo")
    err = assert_error(client.delete("/v1/templates/solo"), 409, "conflict")
    assert sb["id"] in err["message"]
    client.delete(f"/v1/sandboxes/{sb['id']}")
    assert client.delete("/v1/templates/solo").status_code == 204
    assert_error(client.get("/v1/templates/solo"), 404, "not_found")
    assert not (layer_dirs(daemon.data_dir) & added)
    assert_error(client.post("/v1/sandboxes", json={"template": "solo"}), 400, "invalid_request")
    assert_error(client.delete("/v1/templates/base"), 409, "conflict")


@pytest.mark.parametrize("case, needle", [
    ("climbs", "climbs"),
    ("through-link", "link"),
    ("device", "device"),
    ("digest", "sha256:"),
    ("truncated", "truncated"),
])
def test_a_bad_archive_is_refused_naming_what_is_wrong_and_leaves_nothing(
        client: httpx.Client, daemon: Any, case: str, needle: str) -> None:
    E = images.Entry
    if case == "climbs":
        archive = images.hostile_layer(E("../../escaped", b"x")).oci_archive()
    elif case == "through-link":
        archive = images.hostile_layer(E("etc/passwd", b"x"),
                                       [E("etc", kind=tarfile.SYMTYPE, link="/etc")]).oci_archive()
    elif case == "device":
        archive = images.hostile_layer(E("dev/sda", kind=tarfile.BLKTYPE)).oci_archive()
    elif case == "digest":
        archive = images.tiny_image().oci_archive(corrupt_layer=True)
    else:
        archive = images.tiny_image().oci_archive()[:-20000]
    before = layer_dirs(daemon.data_dir)
    err = assert_error(import_archive(client, f"bad-{case}", archive), 400, "invalid_request")
    assert needle in err["message"], err
    assert layer_dirs(daemon.data_dir) == before
    assert leftovers(daemon.data_dir) == []
    assert_error(client.get(f"/v1/templates/bad-{case}"), 404, "not_found")
    assert not Path("/escaped").exists()


def test_bad_template_requests_get_clear_errors(client: httpx.Client, tiny: images.Image) -> None:
    archive = tiny.oci_archive()
    assert_error(client.post("/v1/templates", content=archive, headers=TAR), 400, "invalid_request")
    assert_error(import_archive(client, "Bad Name", archive), 400, "invalid_request")
    assert_error(client.post("/v1/templates", params={"name": "x"}, content=b"x",
                             headers={"Content-Type": "text/plain"}),
                 415, "unsupported_media_type")
    assert_error(import_archive(client, "base", archive), 409, "conflict")
    assert_error(import_archive(client, "not-a-tar", b"hello" * 1000), 400, "invalid_request")
    assert_error(client.get("/v1/templates/nope"), 404, "not_found")


def test_an_archive_past_max_image_bytes_is_413(daemon_factory: Any, tiny: images.Image) -> None:
    d = daemon_factory(args=["--max-image-bytes", "100000"])
    with d.client() as c:
        assert_error(import_archive(c, "big", tiny.oci_archive()), 413, "payload_too_large")
        assert c.get("/healthz").status_code == 200
    assert leftovers(d.data_dir) == []


def test_a_tenants_templates_are_its_own(client: httpx.Client, daemon: Any,
                                         tiny: images.Image) -> None:
    keys = {}
    for name in ("tpl-a", "tpl-b"):
        assert client.post("/v1/admin/tenants", json={"name": name}).status_code == 201
        keys[name] = client.post(f"/v1/admin/tenants/{name}/keys", json={}).json()["key"]
    with daemon.client(keys["tpl-a"]) as a, daemon.client(keys["tpl-b"]) as b:
        assert import_archive(a, "a-private", tiny.oci_archive()).status_code == 201
        assert a.get("/v1/templates/a-private").json()["tenant"] == "tpl-a"
        assert_error(b.get("/v1/templates/a-private"), 404, "not_found")
        assert "a-private" not in [t["name"] for t in b.get("/v1/templates").json()["templates"]]
        assert_error(b.post("/v1/sandboxes", json={"template": "a-private"}), 400, "invalid_request")
        assert_error(b.delete("/v1/templates/a-private"), 404, "not_found")
        # Everyone's templates are everyone's to use, the admin's to delete.
        assert "base" in [t["name"] for t in b.get("/v1/templates").json()["templates"]]
        sb = create_sandbox(a, template="a-private")
        a.delete(f"/v1/sandboxes/{sb['id']}")
        assert client.get("/v1/templates/a-private").status_code == 200
        assert a.delete("/v1/templates/a-private").status_code == 204
    for name in ("tpl-a", "tpl-b"):
        client.delete(f"/v1/admin/tenants/{name}")


def test_templates_and_their_sandboxes_survive_a_restart(daemon_factory: Any, tmp_path: Path,
                                                          tiny: images.Image) -> None:
    data = tmp_path / "restart"
    d = daemon_factory(data_dir=data, args=["--teardown-on-exit", "false"])
    with d.client() as c:
        made = import_archive(c, "kept", tiny.oci_archive())
        assert made.status_code == 201
        sb = create_sandbox(c, template="kept")
        sh(c, sb["id"], "echo mine > /home/app/file")
        # A base sandbox adopted by the next daemon can still be snapshotted, and a snapshot of
        # one still goes over the host's system after the restart.
        based = create_sandbox(c)
        sh(c, based["id"], "echo base > /workspace/b")
        assert c.post(f"/v1/sandboxes/{based['id']}/snapshot",
                      json={"name": "bsnap"}).status_code == 201
    d.stop()
    d2 = daemon_factory(data_dir=data)
    with d2.client() as c:
        assert c.get("/v1/templates/kept").json()["status"] == "ready"
        assert sh(c, sb["id"], "cat /home/app/file; id -u") == "mine\n1234\n"
        from_base = create_sandbox(c, template="bsnap")
        assert sh(c, from_base["id"], "cat /workspace/b; ls /usr/bin/env") == "base\n/usr/bin/env\n"
        assert c.post(f"/v1/sandboxes/{based['id']}/snapshot",
                      json={"name": "bsnap2"}).status_code == 201
        for s in (based, from_base):
            c.delete(f"/v1/sandboxes/{s['id']}")
        for name in ("bsnap2", "bsnap"):
            assert c.delete(f"/v1/templates/{name}").status_code == 204
        sb2 = create_sandbox(c, template="kept")
        assert sh(c, sb2["id"], "ls /data") == "keep\n"
        # The collection at start (before this snapshot: they share a thread) keeps what a
        # template names: its layers, and its manifest and config.
        assert c.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": "k2"}).status_code == 201
        blobs = data / "images/blobs/sha256"
        assert (blobs / made.json()["digest"].removeprefix("sha256:")).exists()
        assert len(list(blobs.iterdir())) == 2
        for s in (sb, sb2):
            c.delete(f"/v1/sandboxes/{s['id']}")
        assert c.delete("/v1/templates/k2").status_code == 204


def test_a_directory_template_shows_its_owners_through_an_idmapped_layer(
        daemon_factory: Any, tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    root = templates / "tinydir"
    root.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(images.layer_tar(images.system_layer())), mode="r") as t:
        t.extractall(root, numeric_owner=True)
    d = daemon_factory(args=["--templates-dir", str(templates)])
    with d.client() as c:
        assert c.get("/v1/templates/tinydir").json()["kind"] == "directory"
        sb = create_sandbox(c, template="tinydir")
        assert sh(c, sb["id"], "stat -c '%u %g' /app/owned-by-app /etc/passwd").split() == \
            ["1234", "1234", "0", "0"]
        # Its root may change the template's files, in its own layer only.
        sh(c, sb["id"], "echo changed > /etc/os-release", user="root")
        assert (root / "etc/os-release").read_text() == "ID=tiny\n"
        assert sh(c, sb["id"], "id -u") == "1000\n"
        # A snapshot keeps the directory as its lowest layer, and what the sandbox changed over
        # it; the directory itself is untouched.
        r = c.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": "tinydir-snap"})
        assert r.status_code == 201 and r.json()["layers_count"] == 2, r.text
        c.delete(f"/v1/sandboxes/{sb['id']}")
        s2 = create_sandbox(c, template="tinydir-snap")
        assert sh(c, s2["id"], "cat /etc/os-release; stat -c '%u' /app/owned-by-app") == \
            "changed\n1234\n"
        c.delete(f"/v1/sandboxes/{s2['id']}")
        assert c.delete("/v1/templates/tinydir-snap").status_code == 204
        assert (root / "etc/os-release").read_text() == "ID=tiny\n"
    assert API_KEY


def test_an_images_symlinks_never_lead_the_sandboxs_setup_onto_the_host(
        client: httpx.Client) -> None:
    # /home an absolute symlink to a host directory anyone may write into: the setup makes
    # /home/user inside the sandbox's root (where the link leads there), never on the host.
    outside = Path(f"/tmp/sandstream-escape-{os.urandom(6).hex()}")
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    E = images.Entry
    entries = [e for e in images.system_layer() if not e.name.startswith("home")]
    entries += [E(str(outside).lstrip("/"), kind=tarfile.DIRTYPE, mode=0o755),
                E("home", kind=tarfile.SYMTYPE, link=str(outside))]
    name = f"links-{os.urandom(3).hex()}"
    try:
        archive = images.Image([images.layer_tar(entries)]).oci_archive()
        assert import_archive(client, name, archive).status_code == 201
        sb = create_sandbox(client, template=name)
        try:
            assert sh(client, sb["id"], f"ls -d /home/user {outside}/user").split() == \
                sorted(["/home/user", f"{outside}/user"])
        finally:
            client.delete(f"/v1/sandboxes/{sb['id']}")
        assert list(outside.iterdir()) == [], "the sandbox's setup wrote on the host"
    finally:
        client.delete(f"/v1/templates/{name}")
        for leaked in outside.iterdir():
            leaked.rmdir()
        outside.rmdir()


def test_a_snapshot_keeps_the_files_and_a_fork_starts_from_them(
        client: httpx.Client, daemon: Any, tiny: images.Image) -> None:
    if client.get("/v1/templates/tiny-oci").status_code != 200:
        assert import_archive(client, "tiny-oci", tiny.oci_archive()).status_code == 201
    sb = create_sandbox(client, template="tiny-oci", env={"MINE": "1"}, limits={"memory_mb": 256})
    snap2 = ""
    try:
        sh(client, sb["id"], "echo v1 > /home/app/state")
        sh(client, sb["id"], "echo root > /etc/motd; rm -r /data/keep /app/added", user="root")
        r = client.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": "snap1"})
        assert r.status_code == 201, r.text
        t = r.json()
        assert t["kind"] == "snapshot" and t["source"] == sb["id"] and t["layers_count"] == 3
        # The sandbox runs on; what it writes after the snapshot is not in it.
        sh(client, sb["id"], "echo v2 > /home/app/state")
        s2 = create_sandbox(client, template="snap1")
        try:
            assert sh(client, s2["id"], "cat /home/app/state /etc/motd; id -u; ls /app; ls /data") \
                == "v1\nroot\n1234\nhard\nlink-abs\nowned-by-app\nroot-only\n"
            assert sh(client, s2["id"], "stat -c '%u %g' /home/app/state /etc/motd").split() == \
                ["1234", "1234", "0", "0"]
        finally:
            client.delete(f"/v1/sandboxes/{s2['id']}")
        # A fork: a snapshot and a sandbox with the same settings, in one call.
        r = client.post(f"/v1/sandboxes/{sb['id']}/fork", json={"memory": False})
        assert r.status_code == 201, r.text
        fork = r.json()
        snap2 = fork["template"]
        assert fork["id"] != sb["id"] and fork["env"] == {"MINE": "1"}
        assert fork["limits"]["memory_mb"] == 256
        assert sh(client, fork["id"], "cat /home/app/state") == "v2\n"
        client.delete(f"/v1/sandboxes/{fork['id']}")
        assert_error(client.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": "snap1"}),
                     409, "conflict")
        assert_error(client.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={}), 400,
                     "invalid_request")
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
    for name in ("snap1", snap2):
        if name:
            assert client.delete(f"/v1/templates/{name}").status_code == 204


@pytest.mark.parametrize("template", ["base", "code-interpreter"])
def test_a_base_sandbox_is_snapshotted_and_forked_with_what_it_wrote(
        client: httpx.Client, template: str) -> None:
    sb = create_sandbox(client, template=template, env={"MINE": "1"})
    made: list[str] = []
    try:
        sh(client, sb["id"], "set -e; echo kept > /workspace/w; mkdir -p /data/app;"
                             " echo app > /data/app/f; echo t > /tmp/t; echo h > /home/user/h")
        sh(client, sb["id"], "echo 'custom line' >> /etc/environment; echo r > /root/r",
           user="root")
        r = client.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": f"bsnap-{template}"})
        assert r.status_code == 201, r.text
        made.append(f"bsnap-{template}")
        t = r.json()
        assert t["kind"] == "snapshot" and t["source"] == sb["id"] and t["layers_count"] == 1
        s2 = create_sandbox(client, template=f"bsnap-{template}")
        try:
            assert sh(client, s2["id"], "cat /workspace/w /data/app/f /tmp/t /home/user/h") == \
                "kept\napp\nt\nh\n"
            assert sh(client, s2["id"], "cat /root/r", user="root") == "r\n"
            # The host's system is over it again, read-only; what names the sandbox is its own;
            # the host's /etc files are written afresh.
            assert sh(client, s2["id"], "hostname; cat /etc/hostname") == \
                f"{s2['id']}\n{s2['id']}\n"
            assert s2["id"] in sh(client, s2["id"], "cat /etc/hosts")
            assert "custom line" not in sh(client, s2["id"], "cat /etc/environment || true")
            assert run(client, s2["id"], cmd="touch /usr/x")["exit_code"] != 0
            assert sh(client, s2["id"], "ls -ld / | cut -c1-10") == "drwxrwxrwt\n"
            if template == "code-interpreter":
                # The template's `python` goes along with the snapshot (and its PATH with it).
                assert sh(client, s2["id"], "python -c 'print(6*7)'") == "42\n"
            # A snapshot of that sandbox stacks another layer.
            sh(client, s2["id"], "echo second > /workspace/w2")
            r = client.post(f"/v1/sandboxes/{s2['id']}/snapshot",
                            json={"name": f"bsnap2-{template}"})
            assert r.status_code == 201 and r.json()["layers_count"] == 2, r.text
            made.append(f"bsnap2-{template}")
        finally:
            client.delete(f"/v1/sandboxes/{s2['id']}")
        s3 = create_sandbox(client, template=f"bsnap2-{template}")
        try:
            assert sh(client, s3["id"], "cat /workspace/w /workspace/w2") == "kept\nsecond\n"
        finally:
            client.delete(f"/v1/sandboxes/{s3['id']}")
        # A fork of the base sandbox: its files now, its settings.
        sh(client, sb["id"], "echo later > /workspace/w")
        r = client.post(f"/v1/sandboxes/{sb['id']}/fork", json={"memory": False})
        assert r.status_code == 201, r.text
        fork = r.json()
        made.append(fork["template"])
        try:
            assert fork["env"]["MINE"] == "1"
            assert sh(client, fork["id"], "cat /workspace/w; echo $MINE") == "later\n1\n"
            if template == "code-interpreter":
                assert sh(client, fork["id"], "python -c 'print(6*7)'") == "42\n"
        finally:
            client.delete(f"/v1/sandboxes/{fork['id']}")
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
        for name in reversed(made):
            assert client.delete(f"/v1/templates/{name}").status_code == 204
    assert_error(client.post("/v1/sandboxes/sb_nope/snapshot", json={"name": "b"}), 404, "not_found")


def tenant_client(admin: httpx.Client, d: Any, name: str, **quotas: int) -> httpx.Client:
    assert admin.post("/v1/admin/tenants",
                      json={"name": name, "quotas": quotas}).status_code == 201
    key = admin.post(f"/v1/admin/tenants/{name}/keys", json={}).json()["key"]
    return d.client(key)


def test_a_stored_layer_goes_only_to_who_holds_its_content(daemon_factory: Any) -> None:
    # Alice's private layer; Mallory knows its diff_id and claims it for a decoy of her own.
    secret = images.Image([images.layer_tar(
        images.system_layer() + [images.Entry("app/secret.txt", b"alice's secret\n")])])
    decoy_tar = images.layer_tar([images.Entry("decoy", b"x\n")])
    decoy = images.Image([decoy_tar], claimed_diff_ids=secret.diff_ids)
    d = daemon_factory()
    with d.client() as admin, tenant_client(admin, d, "alice") as alice, \
            tenant_client(admin, d, "mallory") as mallory:
        def refused() -> None:
            for archive in (decoy.oci_archive(), decoy.docker_archive()):
                err = assert_error(import_archive(mallory, "decoy", archive), 400,
                                   "invalid_request")
                assert "diff_id mismatch" in err["message"], err
            assert_error(mallory.get("/v1/templates/decoy"), 404, "not_found")

        refused()
        assert import_archive(alice, "secret", secret.oci_archive()).status_code == 201
        # Stored now, and still nobody's but the holder's: the decoy's blob must unpack to it.
        refused()
        assert_error(mallory.get("/v1/templates/secret"), 404, "not_found")
        # Who holds the layer shares it: the same content again takes no new layer.
        layers = layer_dirs(d.data_dir)
        same = images.Image(secret.layers, tag="mine:1")
        assert import_archive(mallory, "mine", same.docker_archive()).status_code == 201
        assert layer_dirs(d.data_dir) == layers
    assert leftovers(d.data_dir) == []


def test_template_storage_quota(daemon_factory: Any, tiny: images.Image) -> None:
    small = images.Image([images.layer_tar([images.Entry("a", b"a\n")])], user="")
    # Random bytes: 3 MiB that gzip cannot make smaller.
    big = images.Image([images.layer_tar([images.Entry("big", os.urandom(3 << 20))])], user="")
    d = daemon_factory()
    with d.client() as admin, tenant_client(admin, d, "thrifty", template_storage_mb=2) as t:
        assert import_archive(t, "small", small.oci_archive()).status_code == 201
        err = assert_error(import_archive(t, "big", big.oci_archive()), 429, "quota_exceeded")
        assert "template_storage_mb 2" in err["message"], err
        assert_error(t.get("/v1/templates/big"), 404, "not_found")
        # The admin has no quota, and the tenant's is its own.
        assert import_archive(admin, "big", big.oci_archive()).status_code == 201
        assert t.get("/v1/usage").status_code == 200
        r = admin.patch("/v1/admin/tenants/thrifty", json={"quotas": {"template_storage_mb": 1}})
        assert r.status_code == 200 and r.json()["quotas"]["template_storage_mb"] == 1
        # A snapshot counts too: its template is its image's layers (more than 1 MiB) and its own.
        assert sum(len(c) for c in tiny.compressed) > 1 << 20
        assert import_archive(admin, "tiny", tiny.oci_archive()).status_code == 201
        sb = create_sandbox(t, template="tiny")
        try:
            err = assert_error(t.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": "s"}),
                               429, "quota_exceeded")
            assert "template_storage_mb 1" in err["message"], err
        finally:
            t.delete(f"/v1/sandboxes/{sb['id']}")
        assert_error(t.get("/v1/templates/s"), 404, "not_found")


def test_a_snapshot_keeps_sparse_files_sparse_and_holds_at_most_the_sandboxs_disk(
        client: httpx.Client, daemon: Any, tiny: images.Image) -> None:
    if client.get("/v1/templates/tiny-oci").status_code != 200:
        assert import_archive(client, "tiny-oci", tiny.oci_archive()).status_code == 201
    sb = create_sandbox(client, template="tiny-oci", limits={"disk_mb": 64, "memory_mb": 256})
    try:
        # 3 GiB of holes in a 64 MiB disk: a snapshot would hold (and hash) all of it.
        sh(client, sb["id"], "truncate -s 3G /tmp/sparse")
        err = assert_error(client.post(f"/v1/sandboxes/{sb['id']}/snapshot",
                                       json={"name": "sparse-big"}), 413, "payload_too_large")
        assert "disk_mb" in err["message"], err
        assert_error(client.get("/v1/templates/sparse-big"), 404, "not_found")
        # Within the disk it is taken, and its holes stay holes in the layer.
        sh(client, sb["id"], "rm /tmp/sparse; truncate -s 48M /tmp/sparse; echo end >> /tmp/sparse")
        r = client.post(f"/v1/sandboxes/{sb['id']}/snapshot", json={"name": "sparse-small"})
        assert r.status_code == 201, r.text
        copies = list((daemon.data_dir / "images" / "layers" / "sha256").glob("*/tmp/sparse"))
        assert len(copies) == 1, copies
        st = copies[0].stat()
        assert st.st_size == (48 << 20) + 4
        assert st.st_blocks * 512 < (1 << 20), st
        s2 = create_sandbox(client, template="sparse-small")
        try:
            assert sh(client, s2["id"], "stat -c %s /tmp/sparse") == f"{(48 << 20) + 4}\n"
        finally:
            client.delete(f"/v1/sandboxes/{s2['id']}")
    finally:
        client.delete(f"/v1/sandboxes/{sb['id']}")
    for name in ("sparse-small",):
        client.delete(f"/v1/templates/{name}")
    assert leftovers(daemon.data_dir) == []
