"""Exposed ports: a server in a `loopback` sandbox reached through the daemon, by path
(/v1/sandboxes/{id}/ports/{port}/...) and by host ({port}-{id}.localhost): HTTP both ways,
unbuffered streams, WebSocket, the key never forwarded, and clear errors."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from helpers import API_KEY, Daemon, assert_error, create_sandbox, wait_until

PORT = 8000

# A test server of the sandbox's own (stdlib only): GET echoes the request, POST hashes the
# body, /stream sends five ticks 0.4 s apart, /ws is a WebSocket echo.
SERVER = r'''
import base64, hashlib, json, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def ws_echo(rfile, wfile):
    while True:
        head = rfile.read(2)
        if len(head) < 2:
            return
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", rfile.read(8))[0]
        mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(rfile.read(n)))
        if opcode == 9:
            opcode = 10
        n = len(data)
        size = bytes([n]) if n < 126 else b"\x7e" + struct.pack(">H", n) if n < 65536 \
            else b"\x7f" + struct.pack(">Q", n)
        wfile.write(bytes([0x80 | opcode]) + size + data)
        wfile.flush()
        if opcode == 8:
            return

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(5):
                line = f"tick {i}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.4)
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.startswith("/ws"):
            key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept",
                             base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
            self.end_headers()
            self.wfile.flush()
            ws_echo(self.rfile, self.wfile)
            self.close_connection = True
            return
        self.reply({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}})

    def do_POST(self):
        data = self.body()
        self.reply({"path": self.path, "length": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()})

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


def ports(sb: dict[str, Any], suffix: str = "") -> str:
    return f"/v1/sandboxes/{sb['id']}/ports{suffix}"


@pytest.fixture
def served(client: httpx.Client) -> dict[str, Any]:
    """A sandbox (network `loopback`, the default) running SERVER on PORT, exposed."""
    sb = create_sandbox(client)
    assert client.put(f"/v1/sandboxes/{sb['id']}/files/content", params={"path": "/workspace/server.py"},
                      content=SERVER.encode()).status_code == 201
    r = client.post(f"/v1/sandboxes/{sb['id']}/processes",
                    json={"argv": ["python3", "/workspace/server.py", str(PORT)]})
    assert r.status_code == 201, r.text
    r = client.get(ports(sb, f"/{PORT}/wait"), params={"timeout_seconds": 20})
    assert r.status_code == 200, r.text
    assert r.json() == {"port": PORT, "listening": True}
    r = client.post(ports(sb), json={"port": PORT})
    assert r.status_code == 201, r.text
    return sb


def preview(daemon: Daemon, sb: dict[str, Any], key: str | None = API_KEY) -> httpx.Client:
    """A client that reaches the daemon with the preview host of `sb`'s PORT."""
    port = daemon.url.rsplit(":", 1)[1]
    headers = {"Host": f"{PORT}-{sb['id']}.localhost:{port}"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Client(base_url=daemon.url, headers=headers, timeout=30)


def test_expose_list_get_close(daemon: Daemon, client: httpx.Client) -> None:
    """A port is exposed once (again: 200, the same), listed, described with both URLs, and
    closed; bad numbers are 400s."""
    sb = create_sandbox(client)
    r = client.post(ports(sb), json={"port": 3000})
    assert r.status_code == 201, r.text
    body = r.json()
    listen_port = daemon.url.rsplit(":", 1)[1]
    assert body["port"] == 3000
    assert body["url"] == f"http://3000-{sb['id']}.localhost:{listen_port}/"
    assert body["path_url"] == f"{daemon.url}/v1/sandboxes/{sb['id']}/ports/3000/"
    again = client.post(ports(sb), json={"port": 3000})
    assert again.status_code == 200 and again.json() == body
    assert client.get(ports(sb)).json() == {"ports": [body]}
    assert client.get(ports(sb, "/3000")).json() == body
    for bad in (0, 65536, -1, "80", None, 1.5):
        assert_error(client.post(ports(sb), json={"port": bad}), 400, "invalid_request")
    assert_error(client.get(ports(sb, "/70000")), 400, "invalid_request")
    assert client.delete(ports(sb, "/3000")).status_code == 204
    assert_error(client.delete(ports(sb, "/3000")), 404, "not_found")
    assert client.get(ports(sb)).json() == {"ports": []}
    assert_error(client.post("/v1/sandboxes/sb_0000000000000000/ports", json={"port": 1}), 404,
                 "not_found")


def test_http_through_the_path_form(client: httpx.Client, served: dict[str, Any]) -> None:
    """The upstream gets its own path and query (without access_token), never the key, and
    where the request came from."""
    r = client.get(ports(served, f"/{PORT}/echo/a%20b"), params={"x": "1", "access_token": API_KEY})
    assert r.status_code == 200, r.text
    seen = r.json()
    assert seen["path"] == "/echo/a%20b?x=1"
    assert "authorization" not in seen["headers"]
    assert seen["headers"]["x-forwarded-prefix"] == f"/v1/sandboxes/{served['id']}/ports/{PORT}"
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert seen["headers"]["connection"] == "close"


def test_bodies_go_both_ways(client: httpx.Client, served: dict[str, Any]) -> None:
    """A body of a few MiB, sized or chunked, arrives whole."""
    data = bytes(range(256)) * (12 * 1024)
    r = client.post(ports(served, f"/{PORT}/upload"), content=data)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/upload", "length": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()}

    def chunks() -> Any:
        for i in range(0, len(data), 100_000):
            yield data[i:i + 100_000]

    r = client.post(ports(served, f"/{PORT}/chunked"), content=chunks())
    assert r.status_code == 200, r.text
    assert r.json()["length"] == len(data)


def test_a_stream_arrives_as_it_is_written(client: httpx.Client, served: dict[str, Any]) -> None:
    """Each tick reaches the client when the server writes it, not when the response ends."""
    arrivals: list[float] = []
    t0 = time.monotonic()
    with client.stream("GET", ports(served, f"/{PORT}/stream")) as r:
        assert r.status_code == 200
        text = ""
        for chunk in r.iter_text():
            text += chunk
            arrivals.append(time.monotonic() - t0)
    assert text == "".join(f"tick {i}\n" for i in range(5))
    assert arrivals[0] < 1.0 and arrivals[-1] > 1.5, arrivals
    assert len(arrivals) >= 3, arrivals


def test_the_preview_host(daemon: Daemon, served: dict[str, Any]) -> None:
    """{port}-{id}.localhost reaches the same server with the page's own paths; no key is 401;
    ?access_token= becomes an HttpOnly cookie of that host (and leaves the URL), which then
    opens it and is never forwarded."""
    with preview(daemon, served) as c:
        r = c.get("/echo", params={"q": "v"})
        assert r.status_code == 200, r.text
        assert r.json()["path"] == "/echo?q=v"
        assert "authorization" not in r.json()["headers"]
    with preview(daemon, served, key=None) as c:
        assert_error(c.get("/echo"), 401, "unauthorized")
        r = c.get("/page", params={"access_token": API_KEY, "keep": "1"})
        assert r.status_code == 302, r.text
        assert r.headers["location"] == "/page?keep=1"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"sandstream_preview={API_KEY};") and "HttpOnly" in cookie
        r = c.get("/page?keep=1", headers={"Cookie": f"theirs=1; sandstream_preview={API_KEY}"})
        assert r.status_code == 200, r.text
        assert r.json()["headers"]["cookie"] == "theirs=1"
        assert_error(c.get("/page", headers={"Cookie": "sandstream_preview=wrong"}), 401, "unauthorized")


def test_websocket_both_forms(daemon: Daemon, served: dict[str, Any]) -> None:
    """A WebSocket upgrade goes through and echoes text and a 200 KB binary message."""
    base = daemon.url.replace("http://", "ws://")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    listen_port = int(daemon.url.rsplit(":", 1)[1])
    for url in [f"{base}/v1/sandboxes/{served['id']}/ports/{PORT}/ws",
                f"ws://{PORT}-{served['id']}.localhost:{listen_port}/ws"]:
        # The host form's name need not resolve: the socket goes to the daemon.
        sock = socket.create_connection(("127.0.0.1", listen_port), timeout=10)
        with connect(url, sock=sock, additional_headers=auth, open_timeout=10) as ws:
            ws.send("hello")
            assert ws.recv(timeout=10) == "hello"
            blob = bytes(range(256)) * 800
            ws.send(blob)
            assert ws.recv(timeout=10) == blob


def test_errors_are_clear(client: httpx.Client) -> None:
    """Not exposed: 404 naming how to expose it; nothing listening: 502 bad_gateway; wait past
    its timeout: 408; no key: 401."""
    sb = create_sandbox(client)
    err = assert_error(client.get(ports(sb, "/9/")), 404, "not_found")
    assert "not exposed" in err["message"]
    assert client.post(ports(sb), json={"port": 9}).status_code == 201
    err = assert_error(client.get(ports(sb, "/9/x")), 502, "bad_gateway")
    assert "port 9" in err["message"]
    t0 = time.monotonic()
    assert_error(client.get(ports(sb, "/9/wait"), params={"timeout_seconds": 0.5}), 408, "timeout")
    assert time.monotonic() - t0 < 5
    assert_error(client.get(ports(sb, "/9/wait"), params={"timeout_seconds": "x"}), 400,
                 "invalid_request")
    assert_error(httpx.get(f"{client.base_url}{ports(sb, '/9/x')}"), 401, "unauthorized")


def test_deleting_the_sandbox_ends_a_proxied_stream(daemon: Daemon, client: httpx.Client,
                                                    served: dict[str, Any]) -> None:
    """A stream in flight ends when its sandbox goes; the daemon holds nothing of it."""
    ended = threading.Event()

    def follow() -> None:
        with daemon.client() as c:
            try:
                with c.stream("GET", ports(served, f"/{PORT}/stream")) as r:
                    for _ in r.iter_bytes():
                        pass
            except httpx.HTTPError:
                pass
        ended.set()

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.3)
    assert client.delete(f"/v1/sandboxes/{served['id']}").status_code == 204
    assert ended.wait(10)
    t.join()
    assert_error(client.get(ports(served)), 404, "not_found")


def test_ports_survive_a_restart(daemon_factory: Any, tmp_path: Any) -> None:
    """The exposed ports are part of the sandbox's record: a daemon started again keeps them."""
    d = daemon_factory(args=["--teardown-on-exit", "false"], data_dir=tmp_path / "keep")
    with d.client() as c:
        sb = create_sandbox(c)
        assert c.post(ports(sb), json={"port": 5000}).status_code == 201
        before = c.get(ports(sb)).json()
    d.stop()
    d2 = daemon_factory(args=["--teardown-on-exit", "true"], data_dir=tmp_path / "keep")
    with d2.client() as c:
        assert wait_until(lambda: c.get(ports(sb)).status_code == 200, 10)
        after = c.get(ports(sb)).json()
        assert [p["port"] for p in after["ports"]] == [p["port"] for p in before["ports"]]
        assert after["ports"][0]["created_at"] == before["ports"][0]["created_at"]


def test_network_none_has_no_interface_up(client: httpx.Client) -> None:
    """`none`: not even loopback answers inside, and so no exposed port; `loopback` has lo
    only; other modes are a 400 that says what there is."""
    probe = ("import socket\n"
             "s = socket.socket()\n"
             "try:\n"
             "    s.bind(('127.0.0.1', 0)); s.listen(); c = socket.create_connection(s.getsockname(), 2)\n"
             "    print('connected')\n"
             "except OSError as e:\n"
             "    print('refused', e.errno)\n")
    none = create_sandbox(client, network="none")
    assert none["network"] == "none"
    r = client.post(f"/v1/sandboxes/{none['id']}/exec", json={"argv": ["python3", "-c", probe]})
    assert r.status_code == 200 and r.json()["stdout"].startswith("refused"), r.text
    up = ("import fcntl, socket, struct\n"
          "s = socket.socket()\n"
          "for _, name in socket.if_nameindex():\n"
          "    req = struct.pack('16sH14x', name.encode(), 0)\n"
          "    flags = struct.unpack('16sH14x', fcntl.ioctl(s, 0x8913, req))[1]\n"  # SIOCGIFFLAGS
          "    print(name, flags & 1)\n")  # IFF_UP
    r = client.post(f"/v1/sandboxes/{none['id']}/exec", json={"argv": ["python3", "-c", up]})
    assert r.json()["stdout"] == "lo 0\n", r.text
    assert client.post(ports(none), json={"port": 8000}).status_code == 201
    assert_error(client.get(ports(none, "/8000/")), 502, "bad_gateway")
    loop = create_sandbox(client)
    r = client.post(f"/v1/sandboxes/{loop['id']}/exec", json={"argv": ["python3", "-c", probe]})
    assert r.json()["stdout"] == "connected\n", r.text
    err = assert_error(client.post("/v1/sandboxes", json={"network": "wan"}), 400, "invalid_request")
    assert '"none"' in err["message"] and '"egress"' in err["message"]


def test_a_server_that_never_answers_is_let_go(client: httpx.Client) -> None:
    """A client that gives up on a server that never answers does not leave the relay, and its
    connection into the sandbox, open: the daemon lets go of it within a few seconds."""
    sb = create_sandbox(client)
    # It reads the request to its end (the client's side closing reaches it as EOF), never
    # answers, and notes when the daemon has closed its side too (a write fails).
    silent = ("import socket, threading, time\n"
              "def serve(c):\n"
              "    got = b''\n"
              "    while d := c.recv(65536):\n"
              "        got += d\n"
              "    if not got:\n"  # the wait's probe, which sends nothing
              "        return\n"
              "    try:\n"
              "        while True:\n"
              "            c.send(b' '); time.sleep(0.2)\n"
              "    except OSError:\n"
              "        open('/tmp/closed', 'w').write('closed')\n"
              "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.bind(('127.0.0.1', 7000)); s.listen()\n"
              "while True:\n"
              "    threading.Thread(target=serve, args=(s.accept()[0],)).start()\n")
    r = client.post(f"/v1/sandboxes/{sb['id']}/processes", json={"argv": ["python3", "-c", silent]})
    assert r.status_code == 201, r.text
    assert client.get(ports(sb, "/7000/wait"), params={"timeout_seconds": 20}).status_code == 200
    assert client.post(ports(sb), json={"port": 7000}).status_code == 201
    with pytest.raises(httpx.ReadTimeout):
        client.get(ports(sb, "/7000/never"), timeout=1)
    closed = lambda: client.get(f"/v1/sandboxes/{sb['id']}/files/content",  # noqa: E731
                                params={"path": "/tmp/closed"}).status_code == 200
    assert wait_until(closed, 15), "the daemon kept its connection to the silent server"


def test_public_url_shapes_the_urls(daemon_factory: Any) -> None:
    """Behind a proxy, the URLs handed out are the public ones, whatever Host the daemon saw."""
    d = daemon_factory(args=["--public-url", "https://sandstream.example.com",
                             "--preview-domain", "preview.example.com"])
    with d.client() as c:
        sb = create_sandbox(c)
        body = c.post(ports(sb), json={"port": 8080}).json()
    assert body["url"] == f"https://8080-{sb['id']}.preview.example.com/"
    assert body["path_url"] == f"https://sandstream.example.com/v1/sandboxes/{sb['id']}/ports/8080/"


def test_the_console_is_not_framed_and_path_previews_get_an_opaque_origin(
        daemon_factory: Any, tmp_path: Any) -> None:
    """The console (on the API's origin, as the path form of ports is) may not be framed; a
    page from a port's path form runs in an opaque origin and cannot widen a service worker's
    scope, while the preview host (an origin of its own) passes the sandbox's headers as they
    are."""
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("<!doctype html><title>console</title>")
    d = daemon_factory(args=["--web-dir", str(web)])
    r = httpx.get(f"{d.url}/", timeout=10)
    assert r.status_code == 200 and "console" in r.text, r.text
    assert r.headers["content-security-policy"] == "frame-ancestors 'none'", r.headers
    assert r.headers["x-frame-options"] == "DENY", r.headers
    with d.client() as c:
        sid = create_sandbox(c)["id"]
        site = ("from http.server import SimpleHTTPRequestHandler as H, ThreadingHTTPServer as S\n"
                "class W(H):\n"
                "    def end_headers(self):\n"
                "        self.send_header('Service-Worker-Allowed', '/')\n"
                "        super().end_headers()\n"
                "S(('0.0.0.0', 8001), W).serve_forever()\n")
        c.put(f"/v1/sandboxes/{sid}/files/content", params={"path": "/workspace/sw.js"},
              content=b"self.addEventListener('fetch', () => {});")
        c.post(f"/v1/sandboxes/{sid}/processes",
               json={"argv": ["python3", "-c", site], "cwd": "/workspace"})
        assert c.get(f"/v1/sandboxes/{sid}/ports/8001/wait",
                     params={"timeout_seconds": 20}).status_code == 200
        assert c.post(f"/v1/sandboxes/{sid}/ports", json={"port": 8001}).status_code in (200, 201)
        r = c.get(f"/v1/sandboxes/{sid}/ports/8001/sw.js")
        assert r.status_code == 200 and r.text.startswith("self."), r.text
        assert "service-worker-allowed" not in r.headers, r.headers
        policy = r.headers["content-security-policy"]
        assert policy.startswith("sandbox") and "allow-same-origin" not in policy, policy
        r = c.get("/sw.js", headers={"Host": f"8001-{sid}.localhost:{d.port}"})
        assert r.status_code == 200 and r.headers["service-worker-allowed"] == "/", r.headers
        assert "content-security-policy" not in r.headers, r.headers
