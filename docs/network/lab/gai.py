import socket, time, sys
t = time.monotonic()
try:
    socket.getaddrinfo(sys.argv[1], 80, socket.AF_INET)
    r = "ok"
except socket.gaierror as e:
    r = f"gaierror {e.errno} {e.strerror}"
print(f"{sys.argv[1]}: {r} in {1000*(time.monotonic()-t):.1f} ms")
