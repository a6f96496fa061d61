#!/usr/bin/env bash
# The aarch64 wheel as a user gets it, on an x86-64 Debian host, as root:
# build it (tools/build_wheels.sh), install it into a fresh venv of Debian's
# arm64 Python run under qemu-user, run the demo there, and build and run a C
# program (tests/test_packaging.py's) against the header and library the
# venv holds, with the cross compiler.
#
#   tools/check_aarch64_wheel.sh [WHEEL]      (default: build one)
#
# Needs what .ci/aarch64 installs (gcc-aarch64-linux-gnu, qemu-user-static with
# its binfmt entry, mmdebstrap) and, to build, what tools/build_wheels.sh needs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=${1:-}
if [[ -z $wheel ]]; then
  ARCHS=aarch64 NO_ISOLATION=1 "$root/tools/build_wheels.sh" "$work/dist" >"$work/build.log" 2>&1 \
    || { tail -20 "$work/build.log"; exit 1; }
  wheel=$(echo "$work"/dist/cudafd-*aarch64*.whl)
fi
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
mmdebstrap --quiet --variant=extract --include=python3,python3-venv --architectures=arm64 "$suite" "$work/root"
export QEMU_LD_PREFIX="$work/root"
py=$(cd "$work/root/usr/bin" && ls python3.* | grep -E '^python3\.[0-9]+$' | head -n1)
"$work/root/usr/bin/$py" -m venv --without-pip "$work/venv"
python3 -m pip --python "$work/venv/bin/python" install -q --no-index --no-deps "$wheel"
mkdir "$work/run" && cd "$work/run"  # nothing of the source tree can be imported from here
"$work/venv/bin/python" -c 'import platform, cudafd; assert platform.machine() == "aarch64"; print("aarch64:", cudafd.__file__)'
"$work/venv/bin/python" -m cudafd demo --waits 2000 --streams 8
include=$("$work/venv/bin/python" -m cudafd include)
lib=$("$work/venv/bin/python" -m cudafd lib)
python3 - "$root/tests/test_packaging.py" <<'PY' >smoke.c
import re, sys
print(re.search(r'C_PROGRAM = r"""(.*?)"""', open(sys.argv[1]).read(), re.S).group(1))
PY
aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -I "$include" -o smoke smoke.c \
  -L "$lib" "-Wl,-rpath,$lib" -lcudafd -ldl
CUDAFD_DRIVER="$lib/libcudafd_sim.so" ./smoke
echo "aarch64 wheel: $(basename "$wheel"): installed, demo and C program ran"
