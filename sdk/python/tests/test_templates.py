"""Templates against the real daemon: an image archive imported from bytes and from a file,
sandboxes made from it, a snapshot and a fork of its files, listing and deleting, with both
clients. Forks and snapshots with memory: test_forks.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sandstream import AsyncSandbox, Sandbox, Template
from sandstream.errors import Conflict, InvalidRequest, NotFound, RouteNotImplemented

from .conftest import Daemon

# The integration tests' small images, built in memory.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "integration"))
import images  # noqa: E402


def test_import_create_snapshot_fork_and_delete(daemon: Daemon, tmp_path: Path) -> None:
    archive = tmp_path / "tiny.tar"
    archive.write_bytes(images.tiny_image().docker_archive())
    t = Sandbox.import_template("sdk-tiny", archive)
    assert isinstance(t, Template) and t.kind == "image" and t.user == "app"
    assert t.layers_count == 2 and "GREETING=from-image" in t.env
    assert "sdk-tiny" in [x.name for x in Sandbox.list_templates()]
    assert Sandbox.get_template("sdk-tiny") == t
    with Sandbox.create("sdk-tiny") as sb:
        assert sb.exec("id -u; pwd").stdout == "1234\n/app\n"
        sb.exec("echo kept > /home/app/f")
        snap = sb.snapshot("sdk-snap")
        assert snap.kind == "snapshot" and snap.source == sb.id and snap.layers_count == 3
        assert not snap.memory and not t.memory
        # An image's sandbox cannot be checkpointed: only its files can be forked.
        with pytest.raises(RouteNotImplemented, match="image"):
            sb.fork()
        with sb.fork(memory=False) as forked:
            assert forked.id != sb.id and forked.info.template.startswith("fork-")
            assert forked.exec("cat /home/app/f").stdout == "kept\n"
        with pytest.raises(Conflict):
            Sandbox.delete_template("sdk-tiny")
    with Sandbox.create("sdk-snap") as again:
        assert again.exec("cat /home/app/f").stdout == "kept\n"
    for name in ("sdk-snap", "sdk-tiny"):
        Sandbox.delete_template(name)
    with pytest.raises(NotFound):
        Sandbox.get_template("sdk-tiny")
    leftovers = [x.name for x in Sandbox.list_templates() if x.name.startswith("fork-")]
    for name in leftovers:
        Sandbox.delete_template(name)


def test_a_bad_archive_raises_invalid_request(daemon: Daemon) -> None:
    with pytest.raises(InvalidRequest, match="digest"):
        Sandbox.import_template("sdk-bad", images.tiny_image().oci_archive(corrupt_layer=True))
    with pytest.raises(NotFound):
        Sandbox.get_template("sdk-bad")


async def test_the_async_client_imports_from_bytes(daemon: Daemon) -> None:
    t = await AsyncSandbox.import_template("sdk-async", images.tiny_image().oci_archive())
    assert t.status == "ready"
    async with await AsyncSandbox.create("sdk-async") as sb:
        assert (await sb.exec("ls /opaque")).stdout == "upper-only\n"
    await AsyncSandbox.delete_template("sdk-async")


def test_pull_from_a_registry_with_both_clients(tmp_path: Path) -> None:
    import asyncio

    from sandstream.errors import NotFound as Missing

    from registry import Registry

    from .conftest import API_KEY, start_daemon

    registry = Registry(tmp_path / "registry", tmp_path / "storage")
    try:
        registry.push("tiny", "1", images.tiny_image())
        d = start_daemon(tmp_path / "data", args=["--registry-plain-http", registry.host])
        try:
            where = {"base_url": d.url, "api_key": API_KEY}
            t = Sandbox.pull_template("sdk-pulled", f"{registry.host}/tiny:1", **where)
            assert t.kind == "image" and t.source == f"{registry.host}/tiny:1"
            with Sandbox.create("sdk-pulled", **where) as sb:
                assert sb.exec("id -u; pwd").stdout == "1234\n/app\n"

            async def pull_async() -> Template:
                return await AsyncSandbox.pull_template("sdk-pulled-async",
                                                        f"{registry.host}/tiny:1", **where)

            assert asyncio.run(pull_async()).digest == t.digest
            with pytest.raises(Missing):
                Sandbox.pull_template("sdk-none", f"{registry.host}/none:1", **where)
        finally:
            d.stop()
    finally:
        registry.close()
