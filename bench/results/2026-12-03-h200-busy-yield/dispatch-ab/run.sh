#!/bin/bash
# A/B of two source trees on the throughput workload: processes alternate
# between the trees (old: .ab-old/src, tree 48cf458; new: src), each running
# bench/throughput_ab.py for a few rounds (its ways take turns in every round).
out=$1; n=${2:-5}; rounds=${3:-3}
mkdir -p $out/ab .ab-old/src/cudafd/_lib
cp src/cudafd/_lib/*.so .ab-old/src/cudafd/_lib/
for i in $(seq 1 $n); do
  for loop in asyncio uvloop; do
    for tree in old new; do
      if [ $tree = old ]; then pp=.ab-old/src; else pp=src; fi
      PYTHONPATH=$pp timeout 60 python3 bench/throughput_ab.py --loop $loop --rounds $rounds \
        --out $out/ab/$tree-$loop-$i.json > $out/ab/$tree-$loop-$i.log 2>&1 || echo "fail $tree $loop $i"
    done
  done
done
python3 - $out/ab <<'PY'
import json, glob, sys, statistics as st
d = sys.argv[1]
for loop in ("asyncio", "uvloop"):
    for tree in ("old", "new"):
        xs, per, q = [], [], []
        for f in sorted(glob.glob(f"{d}/{tree}-{loop}-*.json")):
            m = json.load(open(f))["methods"]
            for rc, ry, rq in zip(m["cudafd_event"]["rounds"], m["bound_yield"]["rounds"], m["bound_query"]["rounds"]):
                per.append(1e6 / rc["awaits_per_s"] - 1e6 / ry["awaits_per_s"])
                q.append(1e6 / rq["awaits_per_s"] - 1e6 / ry["awaits_per_s"])
            xs.append(m["cudafd_event"]["x_sleep0"])
        print(f"{loop:8s} {tree}: x sleep0 per process {['%.2f' % x for x in xs]} median {st.median(xs):.3f}; "
              f"us per await over launch+yield: cudafd {st.median(per):.2f}, one query {st.median(q):.2f} ({len(per)} rounds)")
PY
