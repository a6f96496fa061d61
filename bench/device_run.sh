#!/usr/bin/env bash
# One call on a GPU machine: build, the test suite on the real driver, the
# examples, the benchmarks. Logs go to $OUT (or ./device-out); a summary last.
#   bash bench/device_run.sh [tests] [bench] [examples]   (default: all three)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/device-out}; mkdir -p "$OUT"
want=${*:-tests bench examples}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ; python3 --version; } > "$OUT/env.txt" 2>&1
python3 -m pip install --no-build-isolation --no-deps . > /tmp/install.log 2>&1 || { tail -20 /tmp/install.log; exit 1; }
make -s -C native > /tmp/make.log 2>&1 || { tail -20 /tmp/make.log; exit 1; }
summary=()
if [[ $want == *tests* ]]; then
  (cd tests && CUDAFD_TEST_DRIVER=real timeout 400 python3 -m pytest -q -p no:cacheprovider --ignore=test_native.py -rfE) > "$OUT/pytest-real.log" 2>&1
  summary+=("pytest (real driver): $(tail -1 "$OUT/pytest-real.log")")
fi
if [[ $want == *examples* ]]; then
  timeout 60 python3 bench/fault_probe.py > "$OUT/fault-probe.txt" 2>&1; summary+=("fault probe: $(tail -1 "$OUT/fault-probe.txt")")
  timeout 60 python3 -m cudafd demo > "$OUT/demo.txt" 2>&1; summary+=("demo: $(grep -E '^done|overhead' "$OUT/demo.txt" | tr '\n' ' ')")
  make -s -C examples/c-epoll LIBDIR="$PWD/src/cudafd/_lib" > "$OUT/examples.txt" 2>&1
  for m in event hostfunc spin; do
    echo "== examples/c-epoll/cudafd-epoll $m --fault" >> "$OUT/examples.txt"
    timeout 60 examples/c-epoll/cudafd-epoll $m --fault >> "$OUT/examples.txt" 2>&1; summary+=("c-epoll $m: rc=$? $(tail -1 "$OUT/examples.txt")")
  done
  if [[ -x .carry/cudafd-tokio ]]; then  # built on a CPU machine from examples/tokio, carried here
    echo "== examples/tokio (cudafd-tokio --fault)" >> "$OUT/examples.txt"
    LD_LIBRARY_PATH="$PWD/src/cudafd/_lib" timeout 60 .carry/cudafd-tokio --fault >> "$OUT/examples.txt" 2>&1; summary+=("tokio: rc=$? $(tail -1 "$OUT/examples.txt")")
  fi
fi
if [[ $want == *bench* ]]; then
  # The whole suite (python -m cudafd bench -h): it keeps its own limits (under 4 minutes);
  # bench.json, bench.txt and bench.png land in $OUT/bench. "--": the top-level CLI forwards the rest.
  timeout 300 python3 -m cudafd bench -- --out "$OUT/bench" > "$OUT/bench.log" 2>&1
  summary+=("bench: rc=$? $(tail -1 "$OUT/bench.log")" "$(sed -n '/^Await latency/,/^$/p;/^Targets/,/^$/p' "$OUT/bench/bench.txt" 2>/dev/null)")
fi
printf '%s\n' "${summary[@]}"
