# Median round trip of N A queries for NAME to SERVER (UDP), one at a time.
import socket, struct, sys, time, random, statistics
server, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def query(qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
rtts = []
for i in range(n):
    qid = random.randrange(65536)
    t = time.perf_counter()
    s.sendto(query(qid), (server, 53))
    data, _ = s.recvfrom(4096)
    rtts.append((time.perf_counter() - t) * 1e6)
    assert struct.unpack(">H", data[:2])[0] == qid
rtts.sort()
print(f"{server} {name}: n={n} median={statistics.median(rtts):.0f} us p90={rtts[int(n*0.9)]:.0f} us")
