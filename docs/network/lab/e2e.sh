#!/bin/bash
# End-to-end check of the egress design, all inside namespaces this script makes and removes:
# nl-up plays the internet (HTTP + dnsmasq), nl-host plays the host (shared table, resolver),
# nl-sb1 has a CIDR policy, nl-sb3 a names-only policy. Prints "N passed, N failed".
cd /tmp/netlab || exit 1
pass=0; fail=0
ok()  { if "${@:2}" >/dev/null 2>&1; then pass=$((pass+1)); echo "ok   $1"; else fail=$((fail+1)); echo "FAIL $1"; fi; }
bad() { if "${@:2}" >/dev/null 2>&1; then fail=$((fail+1)); echo "FAIL $1 (should fail)"; else pass=$((pass+1)); echo "ok   $1"; fi; }
./topo.sh down >/dev/null 2>&1
ip netns add nl-host && ip -n nl-host link set lo up
./topo.sh up && ./topo.sh sandbox 1 && ./topo.sh sandbox 3 || { echo "setup failed"; exit 1; }
ip netns exec nl-host ./nftbench3 apply 1 10.200.0.3 10.200.0.2 198.18.0.0/15 198.18.3.0/24 - || exit 1
ip netns exec nl-host ./nftbench3 apply 3 10.200.0.7 10.200.0.6 - 198.18.3.0/24 - || exit 1
mkdir -p /etc/netns/nl-sb3 && printf 'nameserver 10.200.0.6\noptions ndots:1 timeout:1 attempts:2\n' > /etc/netns/nl-sb3/resolv.conf
ip netns exec nl-host setsid ./dnsproxy 3 10.200.0.6 198.18.0.53 nxdomain pypi.org '*.github.com' \
  rebind.pypi.org denied.example '!evil.github.com' > resolver.log 2>&1 < /dev/null & echo $! > resolver.pid
sleep 1
A="ip netns exec nl-sb1"; B="ip netns exec nl-sb3"; C="curl -sS -m 2 -o /dev/null -f"
ok  "cidr: allowed range reachable through NAT"     $A $C http://198.18.0.1/
bad "cidr: deny beats allow"                         $A $C http://198.18.3.30/
bad "cidr: public address outside the policy"        $A $C http://203.0.113.7/
bad "default deny: private range"                    $A $C http://10.0.0.5/
bad "default deny: host address (input)"             $A $C http://192.0.2.2:8081/
bad "default deny: host uplink inside allowed CIDR"  $A $C http://198.19.0.0:8081/
bad "default deny: daemon API on the gateway"        $A $C http://10.200.0.2:7070/
bad "host cannot connect into a sandbox"             ip netns exec nl-host $C http://10.200.0.3:80/
ip -n nl-sb1 addr add 10.200.0.9/32 dev eth0
bad "anti-spoof: other source address dropped"       $A $C --interface 10.200.0.9 http://198.18.0.1/
ip -n nl-sb1 addr del 10.200.0.9/32 dev eth0
bad "names: address not pinned before lookup"        $B $C http://198.18.1.10/
ok  "names: allowed name resolves and connects"      $B $C http://pypi.org/
ok  "names: its address is pinned afterwards"        $B $C http://198.18.1.10/
ok  "names: wildcard + CNAME chain pinned"           $B $C http://www.github.com/
bad "names: wildcard does not cover the apex"        $B $C http://github.com/
bad "names: deny pattern beats wildcard"             $B $C http://evil.github.com/
bad "names: unlisted name is NXDOMAIN"               $B getent hosts public.example
bad "names: private answer stays unreachable"        $B $C http://rebind.pypi.org/
bad "names: deny CIDR beats pinned answer"           $B $C http://denied.example/
bad "names: upstream DNS not reachable directly"     $B dig +short +time=1 +tries=1 @198.18.0.53 pypi.org
ok  "names: resolver answers over TCP"               $B dig +tcp +short +time=1 @10.200.0.6 pypi.org
ip netns exec nl-host nft flush set netdev ss_3 dns4
ip netns exec nl-host ./nftbench3 pin 3 198.18.1.10 2
(sleep 3; $B $C http://198.18.1.10/ 2>/dev/null && echo reconnected > expiry.txt || echo refused > expiry.txt) &
probe=$!
ok  "pin expiry: established download survives"      $B curl -sS -m 20 --limit-rate 40M -o /dev/null -f http://198.18.1.10/big.bin
wait $probe   # not a bare wait: the resolver is a background child too
ok  "pin expiry: new connection refused"             grep -q refused expiry.txt
./topo.sh down >/dev/null 2>&1
rm -rf /etc/netns/nl-sb3; rmdir /etc/netns 2>/dev/null
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
