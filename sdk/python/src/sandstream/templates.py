"""Templates: images imported as templates (`AsyncSandbox.import_template()`), snapshots and
forks of a sandbox (`sandbox.snapshot()`, `sandbox.fork()`), and the list of templates.

What both clients share, without I/O: the `Template` value, the requests of the templates API
and the chunks an archive file is sent in. `_async/templates.py` (and `_sync/templates.py`,
generated from it) send them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ._core import Call, ignore_body
from .models import SandboxInfo

# What an archive is sent as; the daemon takes an OCI image layout or a `docker save` tar.
ARCHIVE_HEADERS = {"Content-Type": "application/x-tar"}
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Template:
    """What a sandbox's root is made from: `base`, a directory template, an imported image or
    a snapshot of a sandbox."""

    name: str
    kind: str  # "base", "directory", "image" or "snapshot"
    status: str  # "ready", or "creating" while it is imported
    tenant: str | None = None  # its owner; None: everyone's
    source: str | None = None  # "archive", the reference pulled, the directory, or the sandbox
    # snapshotted
    digest: str | None = None  # the image manifest's
    tags: tuple[str, ...] = ()
    layers_count: int = 0
    size_bytes: int = 0
    env: tuple[str, ...] = ()  # the image's Env, under a sandbox's own
    working_dir: str | None = None  # a sandbox's default cwd
    user: str = ""  # whom processes run as, unless as root
    created_at: str | None = None
    memory: bool = False  # a snapshot with memory: its sandboxes start with the source's
    # processes and code contexts running where they were

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Template:
        """Parses a Template object."""
        def opt(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        return cls(name=str(data["name"]), kind=str(data["kind"]), status=str(data["status"]),
                   tenant=opt("tenant"), source=opt("source"), digest=opt("digest"),
                   tags=tuple(str(t) for t in data.get("tags") or []),
                   layers_count=int(data.get("layers_count") or 0),
                   size_bytes=int(data.get("size_bytes") or 0),
                   env=tuple(str(e) for e in data.get("env") or []),
                   working_dir=opt("working_dir"), user=str(data.get("user") or ""),
                   created_at=opt("created_at"), memory=bool(data.get("memory") or False))


def template_path(name: str) -> str:
    """`/v1/templates/{name}`."""
    return f"/v1/templates/{quote(name, safe='')}"


def import_template_call(name: str) -> Call[Template]:
    """`POST /v1/templates?name=` (the archive is the body)."""
    return Call("POST", "/v1/templates", Template.from_json, params={"name": name})


def pull_template_call(name: str, image: str, username: str | None,
                       password: str | None) -> Call[Template]:
    """`POST /v1/templates {"name", "image", "auth"?}`: a pull from a registry."""
    body: dict[str, Any] = {"name": name, "image": image}
    if username:
        body["auth"] = {"username": username, "password": password or ""}
    return Call("POST", "/v1/templates", Template.from_json, json=body)


def list_templates_call() -> Call[list[Template]]:
    """`GET /v1/templates`."""
    return Call("GET", "/v1/templates",
                lambda data: [Template.from_json(t) for t in data.get("templates", [])])


def get_template_call(name: str) -> Call[Template]:
    """`GET /v1/templates/{name}`."""
    return Call("GET", template_path(name), Template.from_json)


def delete_template_call(name: str) -> Call[None]:
    """`DELETE /v1/templates/{name}`."""
    return Call("DELETE", template_path(name), ignore_body)


def snapshot_call(sandbox_path: str, name: str, memory: bool = False) -> Call[Template]:
    """`POST .../snapshot {"name", "memory"?}`; "memory" is sent only when true (the daemon's
    default is false)."""
    body: dict[str, Any] = {"name": name}
    if memory:
        body["memory"] = True
    return Call("POST", sandbox_path + "/snapshot", Template.from_json, json=body)


def fork_body(name: str | None, memory: bool | None, count: int | None) -> dict[str, Any]:
    """The body of `POST .../fork`. `memory` None: true, unless `name` is given (a name is the
    template of a fork of files, which a fork with memory does not make): then false. "count"
    only when given, since it changes the answer's shape."""
    if memory is None:
        memory = name is None
    body: dict[str, Any] = {"memory": memory}
    if name is not None:
        body["name"] = name
    if count is not None:
        body["count"] = count
    return body


def _forks(data: dict[str, Any]) -> list[SandboxInfo]:
    """The forks in an answer: `{"sandboxes": [...]}` (with "count") or one sandbox object."""
    if "sandboxes" in data:
        return [SandboxInfo.from_json(s) for s in data["sandboxes"]]
    return [SandboxInfo.from_json(data)]


def fork_call(sandbox_path: str, name: str | None, memory: bool | None = None,
              count: int | None = None) -> Call[list[SandboxInfo]]:
    """`POST .../fork {"memory", "name"?, "count"?}`: the forks, one or `count` of them."""
    return Call("POST", sandbox_path + "/fork", _forks, json=fork_body(name, memory, count))


def archive_chunks(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The file at `path`, a MiB at a time: an archive is streamed, never held whole."""
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk
