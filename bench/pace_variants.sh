#!/usr/bin/env bash
# The poller's pacing, variant by variant: each variant is the native core
# built with some of its compile-time knobs changed (PACE_RANK,
# PACE_STEP_BACK_DIV in native/core/pacing.c; CFD_PACE_SPIN_NS in
# internal.h), then bench/thread_cost.py with that library (CPU per thread
# and the poller's wakes, per 2 ms wait) and the demo (mixed 10 us - 3 ms
# kernels: how late completions are noticed).
#   bash bench/pace_variants.sh [name=-DKNOB=value ...]   (default: base and three variants)
set -uo pipefail
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
python3 -m pip install --no-build-isolation --no-deps . > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
if (($# == 0)); then
  set -- base= rank1=-DPACE_RANK=1 spin100=-DCFD_PACE_SPIN_NS=100000 back256=-DPACE_STEP_BACK_DIV=256
fi
for v in "$@"; do
  name=${v%%=*} defs=${v#*=}
  make -s -C native DEST="/tmp/pace-$name" CFLAGS="-O2 -g $defs" || exit 1
  echo "== $name ($defs)"
  CUDAFD_LIBRARY="/tmp/pace-$name/libcudafd.so" timeout 90 python3 bench/thread_cost.py --waits 400
  CUDAFD_LIBRARY="/tmp/pace-$name/libcudafd.so" timeout 60 python3 -m cudafd demo | grep -E "^done|wake overhead"
done 2>&1 | tee "$OUT/pace_variants.txt"
