#!/usr/bin/env bash
# One wheel, every CPython: build this machine's wheel once,
# install that same file with the test extras into a fresh venv of each
# interpreter, and run the suite there on the simulator. The native
# libraries do not link against Python, so the wheel is tagged py3-none and
# must serve each of them unchanged.
#
#   tools/check_pythons.sh [PYTHON ...]   (default: every python3.N, N >= 10,
#                                          on PATH or under pyenv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pythons=("$@")
if [[ ${#pythons[@]} -eq 0 ]]; then
  for py in $(compgen -c python3. | grep -E '^python3\.[0-9]+$' | sort -u -V) \
            "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python3; do
    minor=$("$py" -c 'import sys; print(sys.version_info[1])' 2>/dev/null) || continue  # (a pyenv shim may not run)
    if (( minor >= 10 )); then pythons+=("$py"); fi
  done
fi
(( ${#pythons[@]} )) || { echo "no CPython 3.10 or newer found" >&2; exit 1; }
python3 -m pip wheel -q --no-deps -w "$work/dist" "$root" >"$work/build.log" 2>&1 \
  || { tail -20 "$work/build.log"; exit 1; }
wheel=$(echo "$work"/dist/cudafd-*.whl)
declare -A seen
for py in "${pythons[@]}"; do
  version=$("$py" -c 'import platform; print(platform.python_version())')
  [[ -z ${seen[$version]:-} ]] || continue
  seen[$version]=1
  venv="$work/venv-$version"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$wheel[test]" >"$work/install-$version.log" 2>&1 \
    || { tail -20 "$work/install-$version.log"; exit 1; }
  # from the source tree's root, as the README's test command runs: the tests
  # import the installed package (nothing puts src/ on the path)
  (cd "$root" && "$venv/bin/python" -m pytest -q -p no:cacheprovider) >"$work/pytest-$version.log" 2>&1 \
    || { tail -30 "$work/pytest-$version.log"; echo "Python $version: FAILED"; exit 1; }
  echo "Python $version: $(tail -n 1 "$work/pytest-$version.log")"
done
echo "one wheel, $(basename "$wheel"), passed the suite on ${#seen[@]} Pythons"
