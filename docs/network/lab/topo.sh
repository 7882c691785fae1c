#!/bin/bash
# Lab topology, all in namespaces made here (nothing touches the real host's interfaces):
#   nl-up   "the internet": 198.19.0.1/31 to nl-host; on lo: 198.18.0.1 (HTTP), 198.18.0.53 (DNS),
#           198.18.1.10 (pypi.org), 198.18.2.20 (api.github.com), 198.18.3.30 (denied subnet),
#           203.0.113.7 (public, never allowed), 10.0.0.5 (a private address a name resolves to)
#   nl-host "the host": uplink 198.19.0.0/31, default route via nl-up; a host address
#           192.0.2.2/32 on lo and a fake daemon API on 0.0.0.0:7070; the shared nft table;
#           ip_forward=1 (in this netns only)
#   nl-sb1  a sandbox: eth0 10.200.0.3/31 <-> ss-1 10.200.0.2/31 in nl-host
set -e
up() {
  ip netns add nl-up
  ip -n nl-host link add up0 type veth peer name eth0 netns nl-up
  ip -n nl-host addr add 198.19.0.0/31 dev up0
  ip -n nl-host link set up0 up
  ip -n nl-host route add default via 198.19.0.1
  ip -n nl-host addr add 192.0.2.2/32 dev lo
  ip -n nl-up addr add 198.19.0.1/31 dev eth0
  ip -n nl-up link set eth0 up
  ip -n nl-up link set lo up
  for a in 198.18.0.1 198.18.0.53 198.18.1.10 198.18.2.20 198.18.3.30 203.0.113.7 10.0.0.5; do
    ip -n nl-up addr add $a/32 dev lo
  done
  ip netns exec nl-host sysctl -qw net.ipv4.ip_forward=1
  ip netns exec nl-host nft -f /tmp/netlab/sandstream.nft
  mkdir -p /tmp/netlab/www && echo "hello from upstream" > /tmp/netlab/www/index.html
  head -c 200000000 /dev/zero > /tmp/netlab/www/big.bin
  ip netns exec nl-up setsid python3 -m http.server 80 --bind 0.0.0.0 --directory /tmp/netlab/www \
    >/tmp/netlab/http.log 2>&1 < /dev/null & echo $! > /tmp/netlab/http.pid
  ip netns exec nl-up dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
    --listen-address=198.18.0.53 --port=53 --pid-file=/tmp/netlab/dnsmasq.pid --user=root \
    --log-facility=/tmp/netlab/dnsmasq.log --log-queries \
    --address=/pypi.org/198.18.1.10 --address=/files.pythonhosted.org/198.18.1.10 \
    --address=/api.github.com/198.18.2.20 --host-record=github.com,198.18.2.20 \
    --address=/denied.example/198.18.3.30 --address=/public.example/203.0.113.7 \
    --address=/rebind.pypi.org/10.0.0.5 --local-ttl=30 \
    --cname=www.github.com,github.com
  # the fake daemon API on the host
  ip netns exec nl-host setsid socat TCP-LISTEN:7070,fork,reuseaddr SYSTEM:'echo api' \
    >/dev/null 2>&1 < /dev/null & echo $! > /tmp/netlab/api.pid
  # another host service, not the API
  ip netns exec nl-host setsid socat TCP-LISTEN:8081,fork,reuseaddr SYSTEM:'echo hostsvc' \
    >/dev/null 2>&1 < /dev/null & echo $! > /tmp/netlab/hostsvc.pid
}
sandbox() {  # sandbox ID: netns nl-sbID, veth ss-ID, 10.200.0.(2ID)/31 <-> .(2ID+1)
  local id=$1 g=$((2*$1)) a=$((2*$1+1))
  ip netns add nl-sb$id
  ip -n nl-host link add ss-$id type veth peer name eth0 netns nl-sb$id
  ip -n nl-host addr add 10.200.0.$g/31 dev ss-$id
  ip -n nl-host link set ss-$id up
  ip -n nl-sb$id addr add 10.200.0.$a/31 dev eth0
  ip -n nl-sb$id link set eth0 up
  ip -n nl-sb$id link set lo up
  ip -n nl-sb$id route add default via 10.200.0.$g
}
down() {
  for f in http dnsmasq api hostsvc resolver iperf; do
    [ -f /tmp/netlab/$f.pid ] && { kill $(tr -d "\\0" < /tmp/netlab/$f.pid) 2>/dev/null || true; }; rm -f /tmp/netlab/$f.pid
  done
  for ns in $(ip netns list | awk '/^nl-/{print $1}'); do ip netns del $ns; done
  rm -f /tmp/netlab/www/big.bin
}
"$@"
