"""Templates pulled from a registry by reference: a real registry (docker-registry) the tests
start on 127.0.0.1, with and without token auth; the image it serves becomes a template whose
sandboxes see the image; layers the store has are not downloaded again; an index is read for
linux/amd64; what the policy or the registry refuses is a clear error, and nothing is left in
the store."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import images
from helpers import assert_error, create_sandbox, run
from registry import Front, Registry, Stalling, TokenService
from sse import SseEvent, iter_sse
from test_templates import import_archive, layer_dirs, leftovers, sh, tenant_client

USER, PASSWORD = "puller", "s3cret-pass"


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("registry-storage")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, storage: Path) -> Iterator[Registry]:
    """A plain registry holding tiny:1, the same image again as tiny:again, and an index."""
    r = Registry(tmp_path_factory.mktemp("registry"), storage)
    tiny = images.tiny_image()
    r.push("tiny", "1", tiny)
    r.push("tiny", "again", tiny)
    other = images.Image([images.layer_tar([images.Entry("etc/os-release",
                                                         b"ID=arm-only\n")])])
    r.push_index("multi", "1", {"linux/arm64": other, "linux/amd64": tiny})
    yield r
    r.close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, storage: Path,
            registry: Registry) -> Iterator[tuple[Registry, TokenService]]:
    """The same storage behind token auth: a token only for USER with PASSWORD."""
    directory = tmp_path_factory.mktemp("guarded")
    token = TokenService(directory, USER, PASSWORD)
    r = Registry(directory, storage, token=token)
    yield r, token
    r.close()
    token.close()


@pytest.fixture
def puller(daemon_factory: Any, registry: Registry, guarded: tuple[Registry, TokenService]) -> Any:
    """A daemon that may pull over plain HTTP from both test registries and the token service
    (a realm is reached as a registry is: over plain HTTP only when named)."""
    token_host = guarded[1].url.split("/")[2]
    hosts = f"{registry.host},{guarded[0].host},{token_host}"
    return daemon_factory(args=["--registry-plain-http", hosts])


def pull(c: httpx.Client, name: str, image: str, **extra: Any) -> httpx.Response:
    return c.post("/v1/templates", json={"name": name, "image": image, **extra}, timeout=120)


def test_an_image_pulled_by_reference_is_a_template_its_sandboxes_see(
        puller: Any, registry: Registry) -> None:
    with puller.client() as c:
        r = pull(c, "pulled", f"{registry.host}/tiny:1")
        assert r.status_code == 201, r.text
        t = r.json()
        tiny = images.tiny_image()
        assert t["kind"] == "image" and t["status"] == "ready" and t["layers_count"] == 2
        assert t["source"] == f"{registry.host}/tiny:1"
        assert t["tags"] == [f"{registry.host}/tiny:1"]
        assert t["digest"] == "sha256:" + hashlib.sha256(tiny.manifest).hexdigest()
        assert t["user"] == "app" and t["working_dir"] == "/app"
        sb = create_sandbox(c, template="pulled")
        # The image's config, its owners, and the upper layer's whiteout.
        assert sh(c, sb["id"], "id -u; pwd; echo $GREETING").split() == [
            "1234", "/app", "from-image"]
        assert sh(c, sb["id"], "stat -c '%u %g' /app/owned-by-app").split() == ["1234", "1234"]
        gone = run(c, sb["id"], cmd="test -e /app/doomed")
        assert gone["exit_code"] != 0
        assert "top" in sh(c, sb["id"], "cat /app/added")
        c.delete(f"/v1/sandboxes/{sb['id']}")


def test_progress_streams_and_layers_in_the_store_are_not_downloaded_again(
        puller: Any, registry: Registry) -> None:
    with puller.client() as c:
        def events(name: str, image: str) -> list[Any]:
            with c.stream("POST", "/v1/templates", json={"name": name, "image": image},
                          headers={"Accept": "text/event-stream"}, timeout=120) as r:
                assert r.status_code == 200
                return [e for e in iter_sse(r) if isinstance(e, SseEvent)]

        first = events("first", f"{registry.host}/tiny:1")
        assert first[-1].event == "template", first[-1]
        steps = [e.json()["step"] for e in first if e.event == "progress"]
        assert steps.count("download") >= 2 and "unpack" in steps and "done" in steps
        layers = layer_dirs(puller.data_dir)
        # The same layers under another tag: nothing downloaded, nothing new stored.
        second = events("second", f"{registry.host}/tiny:again")
        assert second[-1].event == "template"
        steps = [e.json()["step"] for e in second if e.event == "progress"]
        assert "download" not in steps and "unpack" not in steps and steps.count("done") == 2
        assert layer_dirs(puller.data_dir) == layers


def test_an_index_is_read_for_linux_amd64_and_a_digest_pins_the_image(
        puller: Any, registry: Registry) -> None:
    with puller.client() as c:
        r = pull(c, "multi", f"{registry.host}/multi:1")
        assert r.status_code == 201, r.text
        tiny = images.tiny_image()
        assert r.json()["digest"] == "sha256:" + hashlib.sha256(tiny.manifest).hexdigest()
        pinned = f"{registry.host}/tiny@{r.json()['digest']}"
        r = pull(c, "pinned", pinned)
        assert r.status_code == 201, r.text
        assert r.json()["source"] == pinned
        wrong = f"{registry.host}/tiny@sha256:{'0' * 64}"
        assert_error(pull(c, "wrong", wrong), 404, "not_found")


def test_token_auth_with_credentials(puller: Any,
                                     guarded: tuple[Registry, TokenService]) -> None:
    reg, token = guarded
    image = f"{reg.host}/tiny:1"
    with puller.client() as c:
        r = pull(c, "anon", image)
        assert_error(r, 502, "bad_gateway")
        assert "token service answered HTTP 401" in r.json()["error"]["message"]
        r = pull(c, "badpass", image, auth={"username": USER, "password": "wrong"})
        assert_error(r, 502, "bad_gateway")
        assert "refused the credentials" in r.json()["error"]["message"]
        r = pull(c, "authed", image, auth={"username": USER, "password": PASSWORD})
        assert r.status_code == 201, r.text
        # The token was asked for this repository's pull, for this registry's service.
        asked = token.requests[-1]["query"]
        assert asked["scope"] == ["repository:tiny:pull"]
        assert asked["service"] == ["sandstream-test-registry"]
        # The credentials are not kept with the template.
        assert PASSWORD not in r.text
        assert PASSWORD not in c.get("/v1/templates/authed").text


def test_the_policy_refuses_plain_http_and_private_addresses_it_is_not_told_of(
        daemon_factory: Any, registry: Registry) -> None:
    d = daemon_factory()
    with d.client() as c:
        # Not named in registry_plain_http: HTTPS, and 127.0.0.1 is no public address.
        r = pull(c, "private", f"{registry.host}/tiny:1")
        assert_error(r, 403, "forbidden")
        assert "not a public address" in r.json()["error"]["message"]
        assert "registry_private_hosts" in r.json()["error"]["message"]
        r = pull(c, "named", f"localhost:{registry.port}/tiny:1")
        assert_error(r, 403, "forbidden")
        assert c.get("/v1/templates/private").status_code == 404
        assert layer_dirs(d.data_dir) == set() and leftovers(d.data_dir) == []


def test_bad_pulls_are_clear_errors_and_leave_nothing(
        daemon_factory: Any, registry: Registry) -> None:
    d = daemon_factory(args=["--registry-plain-http", registry.host,
                             "--registry-allow", registry.host, "--max-image-bytes", "1000"])
    with d.client() as c:
        for body, status, code, words in [
            ({"name": "x"}, 400, "invalid_request", "image is required"),
            ({"name": "x", "image": "Not/Valid"}, 400, "invalid_request", "repository"),
            ({"name": "x", "image": f"{registry.host}/tiny:1", "extra": 1}, 400,
             "invalid_request", "unknown field 'extra'"),
            ({"name": "x", "image": f"{registry.host}/tiny:1", "auth": {"password": "p"}}, 400,
             "invalid_request", "auth.username"),
            ({"image": f"{registry.host}/tiny:1"}, 400, "invalid_request", "name is required"),
            # Not allowed: refused before its name is even resolved.
            ({"name": "x", "image": "registry.invalid/app:1"}, 403, "forbidden",
             "registry_allow"),
            ({"name": "x", "image": "python:3.12"}, 403, "forbidden", "registry_allow"),
            ({"name": "x", "image": f"{registry.host}/nothing:1"}, 404, "not_found",
             "has no image"),
            ({"name": "x", "image": f"{registry.host}/tiny:1"}, 413, "payload_too_large",
             "max_image_bytes"),
        ]:
            r = c.post("/v1/templates", json=body, timeout=60)
            assert_error(r, status, code)
            assert words in r.json()["error"]["message"], (body, r.text)
        r = c.post("/v1/templates", content=b"{not json", timeout=30,
                   headers={"Content-Type": "application/json"})
        assert_error(r, 400, "invalid_json")
        assert not [t for t in c.get("/v1/templates").json()["templates"] if t["kind"] == "image"]
        assert layer_dirs(d.data_dir) == set() and leftovers(d.data_dir) == []


def test_a_registry_that_cannot_serve_a_layer_leaves_nothing(
        daemon_factory: Any, registry: Registry) -> None:
    # A manifest whose second layer the registry no longer serves (deleted from the repository).
    tiny = images.tiny_image()
    registry.push("broken", "1", tiny)
    registry.delete_blob("broken", tiny.compressed[1])
    d = daemon_factory(args=["--registry-plain-http", registry.host])
    with d.client() as c:
        r = pull(c, "broken", f"{registry.host}/broken:1")
        assert_error(r, 404, "not_found")
        layer = "sha256:" + hashlib.sha256(tiny.compressed[1]).hexdigest()
        assert f"layer {layer}" in r.json()["error"]["message"]
        assert c.get("/v1/templates/broken").status_code == 404
        assert layer_dirs(d.data_dir) == set() and leftovers(d.data_dir) == []


def test_basic_auth_and_redirected_blobs_never_get_the_credentials(
        daemon_factory: Any, registry: Registry) -> None:
    front = Front(registry, USER, PASSWORD)
    try:
        d = daemon_factory(args=["--registry-plain-http", f"{front.host},{front.cdn_host}"])
        with d.client() as c:
            r = pull(c, "nocreds", f"{front.host}/tiny:1")
            assert_error(r, 502, "bad_gateway")
            assert "wants credentials" in r.json()["error"]["message"]
            r = pull(c, "front", f"{front.host}/tiny:1",
                     auth={"username": USER, "password": PASSWORD})
            assert r.status_code == 201, r.text
        # The config and both layers came from the CDN, and not one request there carried the
        # registry's credentials.
        assert len(front.cdn_authorizations) == 3
        assert front.cdn_authorizations == ["", "", ""]
    finally:
        front.close()


def test_cli_template_pull_with_a_password_from_stdin(
        puller: Any, guarded: tuple[Registry, TokenService]) -> None:
    import subprocess

    from test_cli import CLI, cli_env

    env = {k: v for k, v in cli_env(puller.url).items() if k != "SANDSTREAM_REGISTRY_PASSWORD"}
    image = f"{guarded[0].host}/tiny:1"
    made = subprocess.run([CLI, "template", "pull", "cli-pulled", image, "--username", USER,
                           "--json"], env=env, input=PASSWORD.encode() + b"\n",
                          capture_output=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["source"] == image
    refused = subprocess.run([CLI, "template", "pull", "cli-refused", image, "--username", USER],
                             env={**env, "SANDSTREAM_REGISTRY_PASSWORD": "wrong"},
                             capture_output=True, timeout=120)
    assert refused.returncode == 2 and b"refused the credentials" in refused.stderr


def test_a_stored_layer_is_reused_only_for_a_blob_its_registry_served_for_it(
        puller: Any, registry: Registry) -> None:
    tiny = images.tiny_image()
    with puller.client() as c:
        # In the store from an archive: no registry has served its blobs.
        assert import_archive(c, "tiny-archive", tiny.oci_archive()).status_code == 201
        # A decoy whose config claims tiny's base layer: its own blob is downloaded and found
        # not to be it.
        decoy = images.Image([images.layer_tar([images.Entry("decoy", b"x\n")])],
                             claimed_diff_ids=tiny.diff_ids[:1])
        registry.push("decoy", "1", decoy)
        err = assert_error(pull(c, "decoy", f"{registry.host}/decoy:1"), 400, "invalid_request")
        assert "diff_id mismatch" in err["message"], err
        assert c.get("/v1/templates/decoy").status_code == 404

        def steps(name: str, image: str) -> list[str]:
            with c.stream("POST", "/v1/templates", json={"name": name, "image": image},
                          headers={"Accept": "text/event-stream"}, timeout=120) as r:
                assert r.status_code == 200
                events = [e for e in iter_sse(r) if isinstance(e, SseEvent)]
            assert events[-1].event == "template", events[-1]
            return [e.json()["step"] for e in events if e.event == "progress"]

        # The real blobs are downloaded once (the layers are stored: verified, not unpacked),
        # and from then on this registry's blobs are not downloaded again.
        first = steps("pulled", f"{registry.host}/tiny:1")
        assert first.count("download") >= 2 and "unpack" not in first, first
        again = steps("again", f"{registry.host}/tiny:again")
        assert "download" not in again and again.count("done") == 2, again
    assert leftovers(puller.data_dir) == []


def test_one_tenants_stalled_pull_does_not_hold_another_tenants_import(
        daemon_factory: Any) -> None:
    stalling = Stalling(images.Image([images.layer_tar([images.Entry("slow", b"s\n")])],
                                      user=""))
    try:
        d = daemon_factory(args=["--registry-plain-http", stalling.host])
        with d.client() as admin, tenant_client(admin, d, "mallory") as mallory, \
                tenant_client(admin, d, "alice") as alice:
            slow: dict[str, httpx.Response] = {}
            t = threading.Thread(
                target=lambda: slow.update(r=pull(mallory, "slow", f"{stalling.host}/slow:1")))
            t.start()
            try:
                assert stalling.stalled.wait(60), "the pull never reached its layer"
                # Mallory's pull is held by its registry (until released): Alice's import goes on.
                small = images.Image([images.layer_tar([images.Entry("a", b"a\n")])], user="")
                r = alice.post("/v1/templates", params={"name": "quick"},
                               content=small.oci_archive(),
                               headers={"Content-Type": "application/x-tar"}, timeout=60)
                assert r.status_code == 201, r.text
                assert t.is_alive() and not slow, "the stalled pull ended before it was released"
            finally:
                stalling.release()
                t.join(120)
            assert slow["r"].status_code == 201, slow["r"].text
    finally:
        stalling.close()


def test_a_pull_past_pull_timeout_seconds_fails(daemon_factory: Any) -> None:
    # The registry holds the layer for 60 s, as long as the stall limit: only the pull's own
    # deadline can end it sooner.
    stalling = Stalling(images.Image([images.layer_tar([images.Entry("slow", b"s\n")])],
                                     user=""), hold=60)
    try:
        d = daemon_factory(args=["--registry-plain-http", stalling.host,
                                 "--pull-timeout-seconds", "3"])
        with d.client() as c:
            started = time.monotonic()
            err = assert_error(pull(c, "slow", f"{stalling.host}/slow:1"), 502, "bad_gateway")
            assert time.monotonic() - started < 50
            assert "pull_timeout_seconds (3)" in err["message"], err
            assert c.get("/v1/templates/slow").status_code == 404
        assert layer_dirs(d.data_dir) == set() and leftovers(d.data_dir) == []
    finally:
        stalling.close()
