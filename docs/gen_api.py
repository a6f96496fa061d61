"""Write docs/api.md from the package's docstrings.

    PYTHONPATH=src python3 docs/gen_api.py          # rewrite docs/api.md
    PYTHONPATH=src python3 docs/gen_api.py --check  # exit 1 if it is stale

tests/test_docs.py runs the check, so the reference cannot drift from the code.
"""
from __future__ import annotations

import inspect
import os
import sys

import cudafd
import cudafd.sim

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "api.md")

SECTIONS = [
    ("Waiting", ["wait", "prepare", "fence", "Fence", "Notifier", "jax_ready"]),
    ("Errors", ["CudafdError", "CudaError", "ClosedError", "InvalidStateError", "LibraryError"]),
    ("Driver and accounting", ["use_driver", "use_simulator", "stats", "MECHANISMS"]),
]
SIM = ["Device", "Stream", "Event", "stats"]


def signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def entry(qualname: str, obj, level: int = 3) -> list[str]:
    lines = [f"{'#' * level} `{qualname}{signature(obj) if callable(obj) else ''}`", ""]
    doc = inspect.getdoc(obj) if (callable(obj) or inspect.isclass(obj)) else None
    if doc:
        lines += [doc, ""]
    elif not callable(obj):
        lines += [f"`{obj!r}`", ""]
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        for name, member in vars(obj).items():
            if name.startswith("_") and name not in ("__await__", "__enter__"):
                continue
            if isinstance(member, property):
                d = inspect.getdoc(member)
                lines += [f"- `{name}` (property){': ' + d.splitlines()[0] if d else ''}"]
            elif callable(member) and inspect.getdoc(member):
                lines += entry(f"{qualname}.{name}", member, level + 1)
        lines.append("")
    return lines


def render() -> str:
    lines = [
        "# Python API reference",
        "",
        "Generated from the docstrings by `docs/gen_api.py`; do not edit by hand.",
        "The C API is `include/cudafd.h` (see `docs/c-api.md`).",
        "",
    ]
    for title, names in SECTIONS:
        lines += [f"## {title}", ""]
        for name in names:
            lines += entry(f"cudafd.{name}", getattr(cudafd, name))
    lines += ["## The simulator: `cudafd.sim`", "", inspect.getdoc(cudafd.sim) or "", ""]
    for name in SIM:
        lines += entry(f"cudafd.sim.{name}", getattr(cudafd.sim, name))
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        with open(OUT) as f:
            if f.read() != text:
                print("docs/api.md is stale: run PYTHONPATH=src python3 docs/gen_api.py", file=sys.stderr)
                return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
