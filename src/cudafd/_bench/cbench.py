"""The C-level section: build bench/c/latency.c against the libcudafd in use and run it.

bench/c lives in the source checkout, not in the installed package: it is
looked for beside the package's source tree, then under the current
directory. It is built with ``make`` into a temporary folder (nothing is
written into the checkout); no ``make``, no compiler, no checkout, or no
cudafd.h means the section is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .._core import kernels as _kernels, lib as _lib

__all__ = ["find_source", "run"]


def find_source() -> Path | None:
    """The bench/c folder of a source checkout, or None."""
    here = Path(__file__).resolve()
    for root in (here.parents[3], Path.cwd()):
        d = root / "bench" / "c"
        if (d / "latency.c").is_file() and (d / "Makefile").is_file() and (root / "include" / "cudafd.h").is_file():
            return d
    return None


def _why_not() -> str | None:
    if find_source() is None:
        return "bench/c not found (run from a source checkout of cudafd)"
    if shutil.which("make") is None:
        return "no `make` on PATH"
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on PATH"
    if _lib.try_load() is None:
        return "libcudafd.so does not load"
    return None


def run(p: dict, simulator: bool, timeout: float, log) -> dict:
    """Build and run the C benchmark; its JSON, or {"skipped": why} / {"error": what}."""
    why = _why_not()
    if why:
        return {"skipped": why}
    src = find_source()
    lib_path = _lib.loaded_path() or ""
    lib_dir = str(Path(lib_path).parent) if os.path.isabs(lib_path) else str(_lib.package_lib_dir())
    ptx = str(_kernels.PTX_PATH)
    env = dict(os.environ)
    if simulator:
        env["CUDAFD_DRIVER"] = _lib.sim_library_path()
    with tempfile.TemporaryDirectory(prefix="cudafd-bench-c-") as build:
        try:
            made = subprocess.run(
                ["make", "-s", "-C", str(src), f"DEST={build}", f"LIBDIR={lib_dir}", f"PTX={ptx}"],
                check=False,
                capture_output=True,
                text=True,
                timeout=min(90.0, timeout),
            )
        except subprocess.TimeoutExpired:
            return {"error": "the build timed out"}
        if made.returncode != 0:
            return {"skipped": f"the build failed: {(made.stderr or made.stdout).strip()[-400:]}"}
        args = [f"{build}/cudafd-bench-c", "--ptx", ptx]
        for name in ("rounds", "block", "warmup", "kernels", "batch", "repeats"):
            args += [f"--{name}", str(p[name])]
        log("    c: built; running")
        try:
            done = subprocess.run(args, check=False, stdout=subprocess.PIPE, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s", "timed_out": True}
    if done.returncode != 0:
        return {"error": f"exit status {done.returncode}"}
    try:
        out = json.loads(done.stdout)
    except ValueError as exc:
        return {"error": f"unreadable output ({exc}): {done.stdout[-300:]!r}"}
    out["errors"] = {
        **out.pop("latency_errors", {}),
        **{f"bubble {k}": v for k, v in out.get("bubble", {}).get("errors", {}).items()},
    }
    return out
