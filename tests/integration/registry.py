"""A real registry on 127.0.0.1 for the pull tests: Debian's docker-registry (the CNCF
distribution registry), started on a free port with storage in the test's directory, images
pushed to it over its HTTP API; optionally with token auth, its tokens issued by a small token
service here that checks a username and password and signs JWTs (RS256, openssl) the registry
verifies against the service's certificate."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

import images

SERVICE = "sandstream-test-registry"
ISSUER = "sandstream-test-token-service"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def registry_binary() -> str:
    found = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    assert Path(found).exists(), "docker-registry is missing: scripts/install-deps test installs it"
    return found


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """GET /token?service=&scope= with Basic auth: a JWT for what the scope asks, or 401."""

    def __init__(self, directory: Path, username: str, password: str) -> None:
        self.key = directory / "token.key"
        self.cert = directory / "token.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=sandstream test token service", "-keyout", str(self.key),
                        "-out", str(self.cert)], check=True, capture_output=True)
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()
        self.username, self.password = username, password
        self.requests: list[dict[str, Any]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                service.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        signing_input = (_b64url(json.dumps(header).encode()) + "." +
                         _b64url(json.dumps(claims).encode()))
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing_input.encode(), check=True,
                                   capture_output=True).stdout
        return signing_input + "." + _b64url(signature)

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        from urllib.parse import parse_qs, urlparse
        query = parse_qs(urlparse(h.path).query)
        auth = h.headers.get("Authorization", "")
        self.requests.append({"query": query, "authorization": auth})
        expected = "Basic " + base64.b64encode(
            f"{self.username}:{self.password}".encode()).decode()
        if auth != expected:
            h.send_response(401)
            h.send_header("Content-Type", "application/json")
            h.end_headers()
            h.wfile.write(b'{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}')
            return
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        token = self.sign({"iss": ISSUER, "sub": self.username, "aud": SERVICE,
                           "exp": now + 300, "nbf": now - 10, "iat": now,
                           "jti": secrets.token_hex(8), "access": access})
        body = json.dumps({"token": token, "expires_in": 300}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Registry:
    """docker-registry serving `storage` on `address` (127.0.0.1):<port>; with `token`, behind
    its auth."""

    def __init__(self, directory: Path, storage: Path, token: TokenService | None = None,
                 address: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.host = f"{address}:{self.port}"
        self.url = f"http://{self.host}"
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(storage)},
                        "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        if token:
            config["auth"] = {"token": {"realm": token.url, "service": SERVICE,
                                        "issuer": ISSUER, "rootcertbundle": str(token.cert)}}
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"registry-{self.port}.json"  # YAML reads JSON
        path.write_text(json.dumps(config))
        self.log = directory / f"registry-{self.port}.log"
        self.proc = subprocess.Popen([registry_binary(), "serve", str(path)],
                                     stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(self.url + "/v2/", timeout=1).status_code in (200, 401):
                    return
            except httpx.TransportError:
                pass
            assert self.proc.poll() is None, f"docker-registry exited:\n{self.log.read_text()}"
            assert time.monotonic() < deadline, f"docker-registry did not start:\n{self.log.read_text()}"
            time.sleep(0.1)

    def push_blob(self, repo: str, blob: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        with httpx.Client(base_url=self.url, timeout=30) as c:
            r = c.post(f"/v2/{repo}/blobs/uploads/")
            assert r.status_code == 202, r.text
            location = r.headers["Location"]
            sep = "&" if "?" in location else "?"
            r = c.put(f"{location}{sep}digest={digest}", content=blob,
                      headers={"Content-Type": "application/octet-stream"})
            assert r.status_code == 201, r.text
        return digest

    def delete_blob(self, repo: str, blob: bytes) -> None:
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        r = httpx.delete(f"{self.url}/v2/{repo}/blobs/{digest}", timeout=30)
        assert r.status_code == 202, r.text

    def push_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        r = httpx.put(f"{self.url}/v2/{repo}/manifests/{reference}", content=body,
                      headers={"Content-Type": media_type}, timeout=30)
        assert r.status_code == 201, r.text
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def push(self, repo: str, tag: str, image: images.Image) -> str:
        """Pushes `image` (its blobs, then its manifest) as repo:tag; its manifest's digest."""
        for blob in [image.config, *image.compressed]:
            self.push_blob(repo, blob)
        return self.push_manifest(repo, tag, image.manifest,
                                  "application/vnd.oci.image.manifest.v1+json")

    def push_index(self, repo: str, tag: str, by_platform: dict[str, images.Image]) -> str:
        """An index of one image per "os/arch" platform, each pushed by digest."""
        manifests = []
        for platform, image in by_platform.items():
            digest = self.push(repo, "p-" + platform.replace("/", "-"), image)
            os_name, arch = platform.split("/")
            manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                              "digest": digest, "size": len(image.manifest),
                              "platform": {"os": os_name, "architecture": arch}})
        index = json.dumps({"schemaVersion": 2,
                            "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": manifests}).encode()
        return self.push_manifest(repo, tag, index, "application/vnd.oci.image.index.v1+json")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Front:
    """A registry of its own kind in front of `upstream`: Basic auth (USER:PASSWORD) on its API,
    and every blob redirected (307) to a "CDN", another port that serves the blob from upstream
    and records the Authorization header each request came with."""

    def __init__(self, upstream: Registry, username: str, password: str) -> None:
        self.basic = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
        self.cdn_authorizations: list[str] = []
        front = self

        def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            return server

        class Quiet(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def relay(self, r: httpx.Response) -> None:
                self.send_response(r.status_code)
                for key in ("Content-Type", "Docker-Content-Digest"):
                    if key in r.headers:
                        self.send_header(key, r.headers[key])
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

        class Cdn(Quiet):
            def do_GET(self) -> None:  # noqa: N802
                front.cdn_authorizations.append(self.headers.get("Authorization", ""))
                self.relay(httpx.get(upstream.url + self.path, timeout=30))

        class Api(Quiet):
            def do_GET(self) -> None:  # noqa: N802
                if self.headers.get("Authorization") != front.basic:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="front"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if "/blobs/" in self.path:
                    self.send_response(307)
                    self.send_header("Location", f"http://{front.cdn_host}{self.path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                accept = {"Accept": self.headers.get("Accept", "")}
                self.relay(httpx.get(upstream.url + self.path, headers=accept, timeout=30))

        self.cdn = serve(Cdn)
        self.api = serve(Api)
        self.cdn_host = f"127.0.0.1:{self.cdn.server_address[1]}"
        self.host = f"127.0.0.1:{self.api.server_address[1]}"

    def close(self) -> None:
        for server in (self.api, self.cdn):
            server.shutdown()
            server.server_close()


class Stalling:
    """A registry of one image (`image`, as repo "slow", tag "1") that serves its documents at
    once and its layers slowly: the first bytes, then nothing until release() (or `hold`
    seconds). `stalled` is set once a layer's download has begun."""

    def __init__(self, image: images.Image, hold: float = 120) -> None:
        self.release_event = threading.Event()
        self.stalled = threading.Event()
        blobs = {"sha256:" + hashlib.sha256(b).hexdigest(): b
                 for b in [image.config, *image.compressed]}
        layers = {"sha256:" + hashlib.sha256(b).hexdigest() for b in image.compressed}
        stalling = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def send(self, body: bytes, media_type: str = "application/octet-stream") -> None:
                self.send_response(200)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/v2/":
                    self.send(b"{}", "application/json")
                elif self.path == "/v2/slow/manifests/1":
                    self.send(image.manifest, "application/vnd.oci.image.manifest.v1+json")
                elif self.path.startswith("/v2/slow/blobs/") and self.path[15:] in blobs:
                    digest = self.path[15:]
                    body = blobs[digest]
                    if digest not in layers:
                        self.send(body)
                        return
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:16])
                    self.wfile.flush()
                    stalling.stalled.set()
                    stalling.release_event.wait(hold)
                    try:
                        self.wfile.write(body[16:])
                    except OSError:
                        pass  # the daemon gave up first
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = f"127.0.0.1:{self.server.server_address[1]}"

    def release(self) -> None:
        self.release_event.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
