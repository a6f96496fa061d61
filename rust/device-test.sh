#!/usr/bin/env bash
# On a GPU machine (no cargo needed): run the binaries rust/device-build.sh made.
#   bash rust/device-test.sh [DIR]      (default: .carry/rust), from any folder
# The tests of waits, held waits, cancellation and faults run on the real driver
# (CUDAFD_TEST_DRIVER=real, device 0), the fault test in a process of its own
# (a fault ends the context); the simulator's tests on the simulator built
# here. Then the Tokio example, and its fault demonstration last.
# Exit status 0 when every run passed; each run's output and rc are printed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/.carry/rust}
lib=$root/src/cudafd/_lib
[[ -f $lib/libcudafd.so && -f $lib/libcudafd_sim.so ]] || make -s -C "$root/native" || exit 2
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset CUDAFD_DRIVER
status=0
run() {
    echo "== $*"
    timeout 300 "$@"
    local rc=$?
    echo "== rc=$rc: $*"
    [[ $rc == 0 ]] || status=1
}
for t in waits cancel held fault; do
    skip=()  # a test that faults the device, which the simulator alone survives
    [[ $t == held ]] && skip=(--skip a_held_fence_takes_the_lead_when_the_leader_leaves)
    CUDAFD_TEST_DRIVER=real run "$bin/$t" --test-threads=1 "${skip[@]}"
done
CUDAFD_SIM_LIB=$lib/libcudafd_sim.so run "$bin/sim" --test-threads=1
run "$bin/cudafd-tokio"
run "$bin/cudafd-tokio" spin --tasks 2000 --streams 16
run "$bin/cudafd-tokio" --fault
echo "rust on the device: $([[ $status == 0 ]] && echo 'all passed' || echo FAILED)"
exit $status
