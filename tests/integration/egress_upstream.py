"""The egress tests' "internet", run inside the upstream network namespace the tests create:
a DNS server on 198.18.0.53:53 (UDP) that answers from a fixed table and leaves CNAMEs
unresolved, as many real upstreams do, and an HTTP server on port 80 of every address that
answers with the address it was reached on. With an address and a port, only that HTTP server
(a service of the tests' host namespace).

    python3 egress_upstream.py [ADDRESS PORT]
"""

from __future__ import annotations

import socket
import socketserver
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DNS_ADDRESS = "198.18.0.53"
A_RECORDS = {
    "pypi.org": "198.18.1.10",
    "files.pypi.org": "198.18.1.11",
    "github.com": "198.18.1.20",
    "api.github.com": "198.18.1.21",
    "private.pypi.org": "10.99.0.1",
    "denied.pypi.org": "198.18.3.1",
    "evil.test": "198.18.1.30",
}
CNAMES = {"www.github.com": "github.com"}
TTL = 60


def encode_name(name: str) -> bytes:
    out = b""
    for label in name.split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def answer(query: bytes) -> bytes | None:
    if len(query) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", query[:6])
    if qdcount != 1:
        return None
    pos, labels = 12, []
    while pos < len(query) and query[pos] != 0:
        n = query[pos]
        labels.append(query[pos + 1:pos + 1 + n].decode(errors="replace"))
        pos += 1 + n
    qtype, _qclass = struct.unpack("!HH", query[pos + 1:pos + 5])
    question = query[12:pos + 5]
    name = ".".join(labels).lower()
    records = b""
    count = 0
    rcode = 0
    if name in CNAMES:
        target = encode_name(CNAMES[name])
        records += encode_name(name) + struct.pack("!HHIH", 5, 1, TTL, len(target)) + target
        count += 1
    elif name in A_RECORDS and qtype == 1:
        addr = socket.inet_aton(A_RECORDS[name])
        records += encode_name(name) + struct.pack("!HHIH", 1, 1, TTL, 4) + addr
        count += 1
    elif name not in A_RECORDS:
        rcode = 3
    header = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, count, 0, 0)
    return header + question + records


def serve_dns() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((DNS_ADDRESS, 53))
    while True:
        data, peer = sock.recvfrom(4096)
        reply = answer(data)
        if reply:
            sock.sendto(reply, peer)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = f"upstream {self.connection.getsockname()[0]} saw {self.client_address[0]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Server(ThreadingHTTPServer):
    def server_bind(self) -> None:
        # Not HTTPServer's, which looks its address up in DNS (getfqdn) and would wait for the
        # host's resolver, unreachable from here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


if __name__ == "__main__":
    if len(sys.argv) == 3:
        Server((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
    threading.Thread(target=serve_dns, daemon=True).start()
    Server(("0.0.0.0", 80), Handler).serve_forever()
