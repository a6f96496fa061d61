#!/usr/bin/env bash
# One call on a GPU machine: build, the test suite on the real driver, the
# examples, the benchmarks. Logs go to $OUT (or ./device-out); a summary last.
#   bash bench/device_run.sh [tests] [bench] [examples]   (default: all three)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
want=${*:-tests bench examples}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ; python3 --version; } > "$OUT/env.txt" 2>&1
if [[ -d .whl ]]; then  # Python packages the GPU image lacks (trio), carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python3 -m pip install --no-build-isolation --no-deps . > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
make -s -C native > /tmp/make.log 2>&1 || { tail -20 /tmp/make.log; exit 1; }
summary=()
if [[ $want == *bench* ]]; then
  # The whole suite (python -m cudafd bench -h): it keeps its own limits (under 4 minutes);
  # bench.json, bench.txt and bench.png land in $OUT/bench. "--": the top-level CLI forwards the rest.
  timeout 300 python3 -m cudafd bench --out "$OUT/bench" > "$OUT/bench.log" 2>&1
  summary+=("bench: rc=$? $(tail -1 "$OUT/bench.log")" "$(sed -n '/^Await latency/,/^$/p;/^Targets/,/^$/p' "$OUT/bench/bench.txt" 2>/dev/null)")
  echo "== bench/await_breakdown.py" >> "$OUT/bench.log"
  timeout 120 python3 bench/await_breakdown.py >> "$OUT/bench.log" 2>&1
  summary+=("await breakdown:" "$(sed -n '/await_breakdown/,$p' "$OUT/bench.log")")
  # probes for the CPU and bubble figures (bench/README.md); one file: the device returns few
  { echo "== bench/scale_watch.py (and with a thread polling the gate)"
    timeout 60 python3 bench/scale_watch.py --gate 3 --only event,hostfunc,spin
    timeout 30 python3 bench/scale_watch.py --gate 3 --only hostfunc --observe
    echo "== bench/hostfunc_stall.py (which driver call blocks behind a gate)"
    timeout 60 python3 bench/hostfunc_stall.py --gate 2 --only base,bg_create
    make -s -C bench/c && echo "== bench/c/cudafd-enqueue-cost" && CUDAFD_DRIVER= timeout 120 bench/c/cudafd-enqueue-cost \
      --variants none,record_plain,record_blocking,cudafd_event,cudafd_spin,cudafd_hostfunc,writevalue >/dev/null; } > "$OUT/probes.txt" 2>&1
  summary+=("probes:" "$(cat "$OUT/probes.txt")")
fi
if [[ $want == *tests* ]]; then
  (cd tests && CUDAFD_TEST_DRIVER=real timeout 400 python3 -m pytest -q -p no:cacheprovider -n 4 --timeout 90 --ignore=test_native.py --ignore=test_bench.py --ignore=test_bench_lateness.py -rfEs) > "$OUT/pytest-real.log" 2>&1
  summary+=("pytest (real driver): $(tail -1 "$OUT/pytest-real.log")")
  # the benches' own tests alone: with the other workers' kernels on the GPU a quick bench can overrun its limits
  (cd tests && CUDAFD_TEST_DRIVER=real timeout 300 python3 -m pytest -q -p no:cacheprovider --timeout 240 test_bench.py test_bench_lateness.py -rfEs) > "$OUT/pytest-real-bench.log" 2>&1
  summary+=("pytest (real driver, the benches' tests): $(tail -1 "$OUT/pytest-real-bench.log")")
fi
if [[ $want == *examples* ]]; then  # everything lands in examples.txt (the device returns few files)
  ex="$OUT/examples.txt"; : > "$ex"
  run() { echo "== $*" >> "$ex"; timeout 120 "$@" >> "$ex" 2>&1; local rc=$?; summary+=("$*: rc=$rc $(tail -1 "$ex")"); }
  run python3 bench/fault_bystanders.py
  run python3 -m cudafd demo
  make -s -C examples/c-epoll LIBDIR="$PWD/src/cudafd/_lib" >> "$ex" 2>&1
  for m in event hostfunc spin; do run examples/c-epoll/cudafd-epoll $m --fault; done
  if [[ -x .carry/cudafd-tokio ]]; then  # built on a CPU machine from examples/tokio, carried here
    LD_LIBRARY_PATH="$PWD/src/cudafd/_lib" run .carry/cudafd-tokio --fault
  fi
  run python3 examples/http_service/service.py --bench --seconds 3
  run python3 examples/ray_serve/bench.py --seconds 10  # Ray Serve if importable, else the handler in-process
  for f in examples/*.py; do run python3 "$f"; done
fi
printf '%s\n' "${summary[@]}"
