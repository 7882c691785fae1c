"""The files API: read, write, list, stat, mkdir, delete, move, watch, size limits, and every
way out of the sandbox's root (`..`, absolute paths, symlinks planted inside) failing."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx

from helpers import Daemon, assert_error, create_sandbox, run


def files(sb: dict[str, Any], suffix: str = "") -> str:
    """The files route of a sandbox."""
    return f"/v1/sandboxes/{sb['id']}/files{suffix}"


def write(c: httpx.Client, sb: dict[str, Any], path: str, data: bytes, **params: str) -> httpx.Response:
    """PUT .../files/content?path=..."""
    return c.put(files(sb, "/content"), params={"path": path, **params}, content=data)


def test_write_read_roundtrip(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Bytes written come back exactly, with a type from the extension and the size."""
    data = bytes(range(256)) * 1000
    r = write(client, sandbox, "/workspace/blob.bin", data)
    assert r.status_code == 201, r.text
    info = r.json()
    assert (info["path"], info["type"], info["size"]) == ("/workspace/blob.bin", "file", len(data))
    got = client.get(files(sandbox, "/content"), params={"path": "/workspace/blob.bin"})
    assert got.status_code == 200
    assert got.content == data
    assert got.headers["content-type"] == "application/octet-stream"
    assert int(got.headers["content-length"]) == len(data)
    # Overwriting an existing file is 200 and replaces its content.
    r = write(client, sandbox, "/workspace/blob.bin", b"short")
    assert r.status_code == 200 and r.json()["size"] == 5
    txt = write(client, sandbox, "notes/a.txt", "héllo\n".encode())
    assert txt.status_code == 201 and txt.json()["path"] == "/workspace/notes/a.txt"
    got = client.get(files(sandbox, "/content"), params={"path": "/workspace/notes/a.txt"})
    assert got.headers["content-type"].startswith("text/plain") and got.text == "héllo\n"


def test_written_files_belong_to_user(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A file the API writes is owned by `user` inside, honours `mode`, and the sandbox can use it."""
    r = write(client, sandbox, "/workspace/deep/er/run.sh", b"#!/bin/sh\necho ran\n", mode="0755")
    assert r.status_code == 201, r.text
    assert r.json()["mode"] == "0755"
    res = run(client, sandbox["id"], cmd="stat -c '%U %G %a' /workspace/deep/er/run.sh /workspace/deep; "
                                        "/workspace/deep/er/run.sh")
    assert res["stdout"] == "user user 755\nuser user 755\nran\n", res


def test_streamed_upload(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """A chunked upload (no Content-Length) is written as it arrives."""
    parts = [b"a" * 100_000, b"b" * 100_000, b"c" * 7]

    def body() -> Any:
        yield from parts

    r = client.put(files(sandbox, "/content"), params={"path": "/tmp/up.txt"}, content=body())
    assert r.status_code == 201, r.text
    assert r.json()["size"] == 200_007
    res = run(client, sandbox["id"], cmd="md5sum < /tmp/up.txt")
    import hashlib
    assert res["stdout"].split()[0] == hashlib.md5(b"".join(parts)).hexdigest()


def test_list_stat_mkdir_move_delete(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """The directory operations and their answers."""
    r = client.post(files(sandbox, "/mkdir"), json={"path": "/workspace/d/e"})
    assert r.status_code == 201 and r.json()["type"] == "directory", r.text
    assert write(client, sandbox, "/workspace/d/f.txt", b"12345").status_code == 201
    run(client, sandbox["id"], cmd="ln -s f.txt /workspace/d/link")
    listing = client.get(files(sandbox), params={"path": "/workspace/d"}).json()
    assert listing["path"] == "/workspace/d" and listing["truncated"] is False
    by_name = {e["name"]: e for e in listing["entries"]}
    assert set(by_name) == {"e", "f.txt", "link"}
    assert by_name["e"]["type"] == "directory"
    assert by_name["f.txt"]["type"] == "file" and by_name["f.txt"]["size"] == 5
    assert by_name["link"]["type"] == "symlink" and by_name["link"]["target"] == "f.txt"
    assert by_name["f.txt"]["mtime"].endswith("Z")
    st = client.get(files(sandbox, "/stat"), params={"path": "/workspace/d/f.txt"}).json()
    assert st["size"] == 5 and st["mode"] == "0644"

    mv = client.post(files(sandbox, "/move"), json={"from": "/workspace/d/f.txt", "to": "/workspace/d/e/g.txt"})
    assert mv.status_code == 200 and mv.json()["path"] == "/workspace/d/e/g.txt", mv.text
    assert write(client, sandbox, "/workspace/d/h.txt", b"x").status_code == 201
    clash = client.post(files(sandbox, "/move"), json={"from": "/workspace/d/h.txt", "to": "/workspace/d/e/g.txt"})
    assert_error(clash, 409, "conflict")
    ok = client.post(files(sandbox, "/move"),
                     json={"from": "/workspace/d/h.txt", "to": "/workspace/d/e/g.txt", "overwrite": True})
    assert ok.status_code == 200

    not_empty = client.delete(files(sandbox), params={"path": "/workspace/d"})
    assert_error(not_empty, 409, "conflict")
    assert client.delete(files(sandbox), params={"path": "/workspace/d", "recursive": "1"}).status_code == 204
    gone = client.get(files(sandbox, "/stat"), params={"path": "/workspace/d"})
    assert_error(gone, 404, "not_found")


def test_clear_errors(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Missing files, directories read as files, missing paths: 404 and 400 with messages."""
    assert_error(client.get(files(sandbox, "/content"), params={"path": "/nope"}), 404, "not_found")
    assert_error(client.get(files(sandbox, "/content"), params={"path": "/workspace"}), 400, "invalid_request")
    assert_error(client.get(files(sandbox, "/content")), 400, "invalid_request")
    assert_error(client.get(files(sandbox), params={"path": "/etc/hostname"}), 400, "invalid_request")
    ro = write(client, sandbox, "/usr/bin/evil", b"x")
    assert_error(ro, 400, "invalid_request")
    assert_error(client.get("/v1/sandboxes/sb_0000000000000000/files", params={"path": "/"}), 404, "not_found")


def test_upload_limit(daemon_factory: Any) -> None:
    """An upload over max_file_bytes is 413, announced or streamed, and leaves no file."""
    d: Daemon = daemon_factory(args=["--max-file-bytes", "1000"])
    with d.client() as c:
        sb = create_sandbox(c)
        assert write(c, sb, "/workspace/ok", b"x" * 1000).status_code == 201
        assert_error(write(c, sb, "/workspace/big", b"x" * 1001), 413, "payload_too_large")

        def body() -> Any:
            for _ in range(10):
                yield b"y" * 500

        r = c.put(files(sb, "/content"), params={"path": "/workspace/big2"}, content=body())
        assert_error(r, 413, "payload_too_large")
    with d.client() as c:
        left = run(c, sb["id"], cmd="ls /workspace")
        assert left["stdout"].split() == ["ok"], left


def test_path_escapes_fail(client: httpx.Client, sandbox: dict[str, Any], daemon: Daemon) -> None:
    """`..`, absolute host paths and symlinks planted inside (to /, to the host's data dir, to
    /proc magic links) never reach the host; each fails clearly or stays inside the sandbox."""
    host_secret = daemon.data_dir / "host-secret.txt"
    host_secret.write_text("host only\n")
    data_dir = str(daemon.data_dir)

    # `..` above the root is refused outright.
    for path in ("/../etc/passwd", "/workspace/../../etc/passwd", "../../../../etc/hostname"):
        r = client.get(files(sandbox, "/content"), params={"path": path})
        err = assert_error(r, 400, "invalid_request")
        assert "root" in err["message"], err
    # Absolute host paths name the sandbox's own files, which do not include the host's.
    assert_error(client.get(files(sandbox, "/content"), params={"path": str(host_secret)}), 404, "not_found")
    assert_error(client.get(files(sandbox, "/content"), params={"path": data_dir + "/sandstream.db"}),
                 404, "not_found")

    run(client, sandbox["id"], cmd=f"ln -s / /workspace/rootlink; ln -s {data_dir} /workspace/datalink; "
                                   "ln -s /proc/1/root /workspace/magic; ln -s ../../../../../.. /workspace/up")
    # A symlink to / is the sandbox's root: its /etc/hostname is the sandbox's, not the host's.
    r = client.get(files(sandbox, "/content"), params={"path": "/workspace/rootlink/etc/hostname"})
    assert r.status_code == 200 and r.text.strip() == sandbox["id"], r.text
    r = client.get(files(sandbox, "/content"), params={"path": "/workspace/up/etc/hostname"})
    assert r.status_code == 200 and r.text.strip() == sandbox["id"], r.text
    # A symlink to the host's data directory resolves inside the sandbox, where it does not exist.
    r = client.get(files(sandbox, "/content"), params={"path": "/workspace/datalink/host-secret.txt"})
    assert_error(r, 404, "not_found")
    assert_error(client.get(files(sandbox), params={"path": "/workspace/datalink"}), 404, "not_found")
    # Writing through it fails the same way and never creates anything on the host.
    assert_error(write(client, sandbox, "/workspace/datalink/planted.txt", b"planted"), 404, "not_found")
    assert not (daemon.data_dir / "planted.txt").exists()
    # /proc magic links are refused, and /proc itself is not served.
    err = assert_error(client.get(files(sandbox, "/content"), params={"path": "/workspace/magic/etc/hostname"}),
                       400, "invalid_request")
    assert "ELOOP" in err["message"], err
    assert_error(client.get(files(sandbox, "/content"), params={"path": "/proc/1/status"}),
                 400, "invalid_request")
    assert_error(write(client, sandbox, "/proc/sys/kernel/hostname", b"x"), 400, "invalid_request")
    # Moving or deleting through `..` is refused too; the host file is untouched.
    mv = client.post(files(sandbox, "/move"), json={"from": "/workspace/../../x", "to": "/workspace/y"})
    assert_error(mv, 400, "invalid_request")
    assert_error(client.delete(files(sandbox), params={"path": "/.."}), 400, "invalid_request")
    assert host_secret.read_text() == "host only\n"
    # Normal files keep working alongside.
    assert write(client, sandbox, "/workspace/normal.txt", b"fine").status_code == 201
    assert client.get(files(sandbox, "/content"), params={"path": "/workspace/normal.txt"}).text == "fine"


def test_permissions_of_user(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """The API acts as `user` unless ?user=root: root's private files stay private."""
    run(client, sandbox["id"], cmd="echo secret > /root/s; chmod 600 /root/s", user="root")
    assert_error(client.get(files(sandbox, "/content"), params={"path": "/root/s"}), 400, "invalid_request")
    r = client.get(files(sandbox, "/content"), params={"path": "/root/s", "user": "root"})
    assert r.status_code == 200 and r.text == "secret\n"


def test_watch(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """The watch stream reports creates, modifications, moves and deletes under a directory."""
    run(client, sandbox["id"], cmd="mkdir -p /workspace/w/sub")
    events: list[tuple[str, dict[str, Any]]] = []
    ready = threading.Event()
    done = threading.Event()

    def follow() -> None:
        with client.stream("GET", files(sandbox, "/watch"), params={"path": "/workspace/w"}) as r:
            assert r.status_code == 200
            name = ""
            for line in r.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    if name == "ready":
                        ready.set()
                        continue
                    events.append((name, json.loads(line[6:])))
                    if name == "delete" and events[-1][1]["path"].endswith("b.txt"):
                        done.set()
                        return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert ready.wait(10)
    run(client, sandbox["id"], cmd="echo 1 > /workspace/w/a.txt; echo 2 >> /workspace/w/a.txt; "
                                   "echo 3 > /workspace/w/sub/deep.txt; mv /workspace/w/a.txt /workspace/w/b.txt; "
                                   "rm /workspace/w/b.txt")
    assert done.wait(10), events
    kinds = [(n, e["path"]) for n, e in events]
    assert ("create", "/workspace/w/a.txt") in kinds
    assert ("modify", "/workspace/w/a.txt") in kinds
    assert ("create", "/workspace/w/sub/deep.txt") in kinds
    moves = [e for n, e in events if n == "move"]
    assert moves and moves[0]["from"] == "/workspace/w/a.txt" and moves[0]["path"] == "/workspace/w/b.txt"
    assert kinds[-1] == ("delete", "/workspace/w/b.txt")


def test_watch_missing_directory(client: httpx.Client, sandbox: dict[str, Any]) -> None:
    """Watching what does not exist is a 404 before any stream starts."""
    assert_error(client.get(files(sandbox, "/watch"), params={"path": "/workspace/none"}), 404, "not_found")


def test_files_of_host_stay_unreachable(client: httpx.Client, sandbox: dict[str, Any], tmp_path: Path) -> None:
    """A file that exists only on the host, by absolute path, is not found inside."""
    secret = tmp_path / "only-on-host.txt"
    secret.write_text("x")
    assert_error(client.get(files(sandbox, "/stat"), params={"path": str(secret)}), 404, "not_found")
