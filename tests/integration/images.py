"""Small OCI images built in memory for the template tests: a root of a few host binaries and
the libraries they load, owners and modes as an image would have them, a second layer with a
whiteout and an opaque directory, and an image config (Env, WorkingDir, User). Written as an
OCI image layout tar or as a `docker save` tar."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass, field

# What the tests run inside: a shell and the tools they read the root with.
BINARIES = ["/bin/sh", "/bin/cat", "/bin/ls", "/usr/bin/id", "/usr/bin/stat", "/bin/touch",
            "/bin/echo", "/usr/bin/env", "/bin/rm", "/bin/pwd", "/usr/bin/sleep", "/bin/mkdir",
            "/usr/bin/truncate"]


def _libraries(paths: list[str]) -> list[str]:
    libs: set[str] = set()
    for path in paths:
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            for p in parts:
                if p.startswith("/"):
                    libs.add(p)
    return sorted(libs)


@dataclass
class Entry:
    """One tar entry: a file (data), a directory, a symlink or a hard link."""
    name: str
    data: bytes | None = None
    kind: bytes = tarfile.REGTYPE
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    link: str = ""


def layer_tar(entries: list[Entry]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = e.kind
            info.mode = e.mode
            info.uid, info.gid = e.uid, e.gid
            info.mtime = 1_700_000_000
            if e.kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = e.link
            if e.kind == tarfile.REGTYPE:
                data = e.data or b""
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def host_file(path: str) -> Entry:
    with open(os.path.realpath(path), "rb") as f:
        data = f.read()
    return Entry(path.lstrip("/"), data, mode=os.stat(path).st_mode & 0o7777)


def system_layer(user: str = "app", uid: int = 1234) -> list[Entry]:
    """A root in which the binaries run: their files, libraries and an /etc naming `user`."""
    dirs = ["bin", "usr", "usr/bin", "lib", "lib64", "lib/x86_64-linux-gnu", "etc", "tmp", "app",
            "data", "data/keep", "opaque", "home", f"home/{user}"]
    entries = [Entry(d, kind=tarfile.DIRTYPE, mode=0o755) for d in dirs]
    entries[dirs.index("tmp")].mode = 0o1777
    entries[dirs.index(f"home/{user}")].uid = uid
    entries[dirs.index(f"home/{user}")].gid = uid
    for path in BINARIES + _libraries(BINARIES):
        entries.append(host_file(path))
    entries += [
        Entry("etc/passwd", f"root:x:0:0:root:/root:/bin/sh\n{user}:x:{uid}:{uid}::/home/{user}:/bin/sh\n".encode()),
        Entry("etc/group", f"root:x:0:\n{user}:x:{uid}:\n".encode()),
        Entry("etc/os-release", b"ID=tiny\n"),
        Entry("app/owned-by-app", b"app's\n", uid=uid, gid=uid),
        Entry("app/root-only", b"secret\n", mode=0o600),
        Entry("app/link-abs", kind=tarfile.SYMTYPE, link="/etc/os-release"),
        Entry("app/hard", kind=tarfile.LNKTYPE, link="etc/os-release"),
        Entry("data/gone", b"removed by the next layer\n"),
        Entry("data/keep/file", b"kept\n"),
        Entry("opaque/lower-only", b"hidden by the next layer\n"),
    ]
    return entries


def top_layer() -> list[Entry]:
    """A layer over system_layer: a whiteout, an opaque directory, a new file."""
    return [
        Entry("data", kind=tarfile.DIRTYPE, mode=0o755),
        Entry("data/.wh.gone"),
        Entry("opaque", kind=tarfile.DIRTYPE, mode=0o755),
        Entry("opaque/.wh..wh..opq"),
        Entry("opaque/upper-only", b"from the top layer\n"),
        Entry("app/added", b"top\n"),
    ]


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Image:
    """An image's blobs: layer tars (uncompressed), their gzip, the config and the manifest."""
    layers: list[bytes]
    env: list[str] = field(default_factory=lambda: ["PATH=/usr/bin:/bin", "GREETING=from-image"])
    working_dir: str = "/app"
    user: str = "app"
    tag: str = "tiny:1"
    # What the config says the layers unpack to, when not what they do (a lie, for the tests).
    claimed_diff_ids: list[str] | None = None

    def __post_init__(self) -> None:
        self.compressed = [gzip.compress(t, mtime=0) for t in self.layers]
        config = {
            "architecture": "amd64", "os": "linux",
            "config": {"Env": self.env, "WorkingDir": self.working_dir, "User": self.user,
                       "Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers",
                       "diff_ids": self.claimed_diff_ids or [_sha(t) for t in self.layers]},
        }
        self.config = json.dumps(config).encode()
        self.manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": _sha(self.config), "size": len(self.config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": _sha(c), "size": len(c)} for c in self.compressed],
        }).encode()

    @property
    def diff_ids(self) -> list[str]:
        return [_sha(t) for t in self.layers]

    def oci_archive(self, corrupt_layer: bool = False) -> bytes:
        """An OCI image layout, as a tar."""
        index = json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _sha(self.manifest), "size": len(self.manifest),
            "annotations": {"org.opencontainers.image.ref.name": self.tag}}]}).encode()
        files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
        for blob in [self.manifest, self.config, *self.compressed]:
            files["blobs/sha256/" + _sha(blob)[7:]] = blob
        if corrupt_layer:
            name = "blobs/sha256/" + _sha(self.compressed[-1])[7:]
            files[name] = files[name][:-1] + bytes([files[name][-1] ^ 1])
        return _tar(files)

    def docker_archive(self) -> bytes:
        """What `docker save` writes (its classic layout)."""
        files: dict[str, bytes] = {}
        names = []
        for t in self.layers:
            name = _sha(t)[7:] + "/layer.tar"
            files[name] = t
            names.append(name)
        config_name = _sha(self.config)[7:] + ".json"
        files[config_name] = self.config
        files["manifest.json"] = json.dumps(
            [{"Config": config_name, "RepoTags": [self.tag], "Layers": names}]).encode()
        return _tar(files)


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tiny_image(**kwargs) -> Image:
    """Two layers: a small root, then a whiteout, an opaque directory and a new file."""
    return Image([layer_tar(system_layer()), layer_tar(top_layer())], **kwargs)


def hostile_layer(entry: Entry, before: list[Entry] | None = None) -> Image:
    """An image whose one layer holds `entry` (after `before`)."""
    return Image([layer_tar([*(before or []), entry])])
