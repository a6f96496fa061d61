#!/usr/bin/env bash
# On a machine with cargo: build what a GPU machine without cargo needs to run
# the cudafd crate's tests and the Tokio example against its real driver.
#   bash rust/device-build.sh [DEST]     (default: .carry/rust at the repository root)
# DEST then holds the test binaries waits, cancel, held, fault, sim, the measurements
# await_latency and many_streams, and the example cudafd-tokio (release builds, no debug info;
# the example by default also copied to .carry/cudafd-tokio, where
# bench/device_run.sh looks for it). Run them there with
# rust/device-test.sh DEST. They need the GPU machine's own libcudafd.so
# (make -C native), found through LD_LIBRARY_PATH; nothing else.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
dest=${1:-$root/.carry/rust}
mkdir -p "$dest"
export CARGO_TARGET_DIR=$here/target CARGO_PROFILE_RELEASE_DEBUG=0
cd "$here"
# Every integration-test executable, named by its test target.
cargo test --offline --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys
dest = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        path = dest + "/" + m["target"]["name"]
        shutil.copy2(m["executable"], path)
        print(path)
' "$dest"
# The Tokio measurements (not tests; run them by hand there).
cargo build --offline --release --quiet --example await_latency --example many_streams
for m in await_latency many_streams; do
    cp "$CARGO_TARGET_DIR/release/examples/$m" "$dest/$m"
    echo "$dest/$m"
done
(cd "$root/examples/tokio" && cargo build --offline --release --quiet)
cp "$CARGO_TARGET_DIR/release/cudafd-tokio" "$dest/cudafd-tokio"
echo "$dest/cudafd-tokio"
if [[ $# == 0 ]]; then  # where bench/device_run.sh looks for the example
    cp "$dest/cudafd-tokio" "$root/.carry/cudafd-tokio"
    echo "$root/.carry/cudafd-tokio"
fi
du -sh "$dest"
