"""``python -m cudafd include`` and ``python -m cudafd lib``: the folders a C,
C++ or Rust build needs, printed one per line, as ``pybind11 --includes`` does.

``include``: the folder holding ``cudafd.h`` (the wheel's ``cudafd/include``;
in a source checkout, its ``include/``). ``lib``: the folder holding the
``libcudafd.so`` this package loads (``$CUDAFD_LIBRARY``'s folder if set,
else ``cudafd/_lib``), where ``libcudafd_sim.so`` lies beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .._core import lib as _lib

HEADER = "cudafd.h"


def include_dir() -> Path | None:
    """The folder of cudafd.h, or None where this installation has none."""
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "include", package.parents[1] / "include"):
        if (folder / HEADER).is_file():
            return folder
    return None


def lib_dir() -> Path | None:
    """The folder of the libcudafd.so that cudafd loads, or None where it is not built."""
    for path in _lib.candidate_paths():
        candidate = Path(path)
        if candidate.is_absolute() and candidate.is_file():
            return candidate.parent
    return None


def run(what: str) -> int:
    folder = include_dir() if what == "include" else lib_dir()
    if folder is None:
        wanted = HEADER if what == "include" else f"{_lib.LIBRARY_NAME} (tried {', '.join(_lib.candidate_paths())})"
        print(f"cudafd: this installation has no {wanted}; `pip install cudafd` (or `make -C native` "
              "in a source checkout) provides it", file=sys.stderr)
        return 1
    print(folder)
    return 0
