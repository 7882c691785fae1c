#!/bin/bash
# Reproduces the memo's measurements, inside a namespace "nl-host" made and removed here
# (nothing touches the real host's interfaces or ruleset). One CPU-heavy thing at a time.
#   ITER=50 ./bench.sh nft | veth | pasta | all
cd /tmp/netlab || exit 1
ITER=${ITER:-50}
H="ip netns exec nl-host"
fresh() { ip netns del nl-host 2>/dev/null; ip netns add nl-host && ip -n nl-host link set lo up; }
nft_runs() {
  fresh
  $H nft -f base.nft                                   # shape A: inet table, chain per sandbox, vmap
  for pf in 0 500; do for m in nl lib exec; do $H ./nftbench $m $ITER $pf; done; done
  for pf in 1000 2000; do $H ./nftbench nl $ITER $pf; done
  NOVMAP=1 $H ./nftbench nl $ITER 1000
  $H nft delete table inet ss; $H nft -f base2.nft    # shape B: shared concatenated sets
  for pf in 0 500 2000; do for m in nl lib exec; do $H ./nftbench2 $m $ITER $pf; done; done
  for pf in 0 500 2000; do $H ./nftbench2 breakdown 20 $pf; done
  $H nft delete table inet ss2                        # shape C (recommended): netdev table per sandbox
  ( for i in $(seq 1 $ITER) $(seq 10000 12049); do echo "link add ss-$i type veth peer name sp-$i"; done ) > mkdevs.batch
  $H ip -batch mkdevs.batch
  for pf in 0 500 2000; do for m in nl lib exec; do $H ./nftbench3 $m $ITER $pf; done; done
  for v in SETSONLY=1 NOHOOK=1; do env $v $H ./nftbench3 nl $ITER 500; done
  ip netns del nl-host   # the kernel deletes the 2,000 veth pairs in the background
}
veth_runs() {
  fresh; $H nft -f sandstream.nft
  for m in nl ipb ip; do $H ./vethbench $m $ITER; done
  $H ./vethbench_nft nlnft $ITER
  NSDEL=1 $H ./vethbench nl $ITER
  ID_BASE=1000 $H ./vethbench nl $((ITER * 3)) > churn-bg.txt 2>&1 & bg=$!
  sleep 0.5; $H ./vethbench nl $ITER; wait $bg; cat churn-bg.txt
  ip netns del nl-host
}
pasta_runs() {
  fresh
  ip netns add nl-up
  ip -n nl-host link add up0 type veth peer name eth0 netns nl-up
  ip -n nl-host addr add 198.19.0.0/31 dev up0; ip -n nl-host link set up0 up
  ip -n nl-host route add default via 198.19.0.1
  $H ./pastabench $ITER up0 198.18.0.1
  ip netns del nl-up; ip netns del nl-host
}
case "$1" in
  nft) nft_runs ;; veth) veth_runs ;; pasta) pasta_runs ;;
  all) nft_runs; veth_runs; pasta_runs ;;
  *) echo "usage: $0 nft|veth|pasta|all"; exit 2 ;;
esac
