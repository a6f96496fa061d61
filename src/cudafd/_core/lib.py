"""The one place that loads the native core, libcudafd.so, and chooses the CUDA driver.

Loading (ctypes only, no Python C-API, so one build serves every Python 3):

* ``$CUDAFD_LIBRARY``, if set, is the only path tried;
* else ``<package>/_lib/libcudafd.so`` (where ``pip install .`` and
  ``make -C native`` put it), then the plain soname ``libcudafd.so`` (the
  dynamic linker's search path, for system-wide installs).

The library must report ``cudafd_abi_version() == ABI_VERSION``. Every function of
``include/cudafd.h`` gets its argtypes/restype declared here, so callers never
pass a Python int where a pointer is expected. A failure raises
:class:`LibraryError` listing every path tried, why each failed, and what to do.

Driver choice. The core loads the CUDA driver itself (``libcuda.so.1`` by
default, ``$CUDAFD_DRIVER`` if set). :func:`use_driver` / :func:`use_simulator`
(or ``$CUDAFD_SIMULATOR=1``) change that before first use. The Python-side
driver bindings (``driver.py``) ask :func:`driver_path` for the path the core
actually loaded and dlopen the very same path, which returns the same handle:
the simulator's state (contexts, streams) is shared between the core and Python.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p
from pathlib import Path

from .errors import E_STATE, CudafdError, LibraryError, from_rc, register_name_lookup

__all__ = [
    "ABI_VERSION",
    "Completion",
    "load",
    "try_load",
    "loaded",
    "sim_library_path",
    "use_driver",
    "use_simulator",
    "driver_path",
    "committed_driver_path",
    "raise_for",
]

ABI_VERSION = 4
LIBRARY_NAME = "libcudafd.so"
SIM_LIBRARY_NAME = "libcudafd_sim.so"
DEFAULT_DRIVER = "libcuda.so.1"

# Mechanism numbers (CUDAFD_MECH_*) and stat count (CUDAFD_STAT_COUNT).
MECH_EVENT = 0
MECH_HOSTFUNC = 1
MECH_SPIN = 2
MECH_SYNCFD = 3
NATIVE_MECHANISMS = {"event": MECH_EVENT, "hostfunc": MECH_HOSTFUNC, "spin": MECH_SPIN, "syncfd": MECH_SYNCFD}
STAT_COUNT = 12

# Options (CUDAFD_OPT_*) and the bounds of max_lateness (CUDAFD_MAX_LATENESS_*).
OPT_WATCHDOG_NS = 0
OPT_MAX_LATENESS_NS = 1
MAX_LATENESS_DEFAULT_NS = 400_000
MAX_LATENESS_MIN_NS = 1_000
MAX_LATENESS_MAX_NS = 10_000_000_000


class Completion(ctypes.Structure):
    """``cudafd_completion``: {uint64 token; int64 status}."""

    _fields_ = [("token", c_uint64), ("status", c_int64)]


# name: (restype, argtypes)
_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "cudafd_abi_version": (c_int, []),
    "cudafd_version": (c_char_p, []),
    "cudafd_last_error": (c_char_p, []),
    "cudafd_last_cuda_error": (c_int, []),
    "cudafd_set_driver": (c_int, [c_char_p]),
    "cudafd_driver_load": (c_int, []),
    "cudafd_driver_path": (c_char_p, []),
    "cudafd_driver_version": (c_int, [POINTER(c_int)]),
    "cudafd_cuda_error_name": (c_char_p, [c_int]),
    "cudafd_set_option": (c_int, [c_int, c_int64]),
    "cudafd_get_option": (c_int, [c_int, POINTER(c_int64)]),
    "cudafd_mechanism_available": (c_int, [c_int]),
    "cudafd_notifier_create": (c_int, [c_int, POINTER(c_void_p)]),
    "cudafd_notifier_fd": (c_int, [c_void_p]),
    "cudafd_notifier_set_max_lateness": (c_int, [c_void_p, c_int64]),
    "cudafd_ask_token": (c_int, [c_void_p, c_uint64, POINTER(c_int64)]),
    "cudafd_notifier_set_asking": (c_int, [c_void_p, c_int]),
    "cudafd_prepare": (c_int, [c_void_p, c_size_t]),
    "cudafd_watch_stream": (c_int, [c_void_p, c_size_t, POINTER(c_uint64)]),
    "cudafd_watch_event": (c_int, [c_void_p, c_size_t, POINTER(c_uint64)]),
    "cudafd_watch_stream_fence": (c_int, [c_void_p, c_size_t, POINTER(c_uint64), POINTER(c_int)]),
    "cudafd_watch_event_fence": (c_int, [c_void_p, c_size_t, POINTER(c_uint64), POINTER(c_int)]),
    "cudafd_syncfd_report": (c_char_p, []),
    "cudafd_cancel": (c_int, [c_void_p, c_uint64]),
    "cudafd_stream_done": (c_int, [c_size_t]),
    "cudafd_stream_key": (c_uint64, [c_size_t]),
    "cudafd_event_done": (c_int, [c_size_t]),
    "cudafd_drain": (c_int, [c_void_p, POINTER(Completion), c_int]),
    "cudafd_notifier_pending": (c_int, [c_void_p]),
    "cudafd_notifier_close": (c_int, [c_void_p]),
    "cudafd_notifier_destroy": (None, [c_void_p]),
    "cudafd_stat_name": (c_char_p, [c_int]),
    "cudafd_stats": (c_int, [POINTER(c_int64), c_int]),
    "cudafd_release_idle": (c_int, []),
}

_lock = threading.RLock()
_core: ctypes.CDLL | None = None
_core_path: str | None = None
_UNSET = object()
_choice: object = _UNSET  # what use_driver() asked for: a path, None (default), or _UNSET
_bound_driver: str | None = None  # the path the Python driver bindings bound (note_bound_driver)


def package_lib_dir() -> Path:
    """``<package>/_lib``, where the build puts both native libraries."""
    return Path(__file__).resolve().parent.parent / "_lib"


def candidate_paths() -> list[str]:
    """The paths load() tries, in order."""
    override = os.environ.get("CUDAFD_LIBRARY")
    if override:
        return [override]
    return [str(package_lib_dir() / LIBRARY_NAME), LIBRARY_NAME]


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)  # AttributeError if missing: caught by load()
        fn.restype = restype
        fn.argtypes = argtypes


def _open(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    try:
        abi = lib.cudafd_abi_version
    except AttributeError as exc:
        raise OSError(f"{path} is not libcudafd (no cudafd_abi_version)") from exc
    abi.restype = c_int
    abi.argtypes = []
    version = abi()
    if version != ABI_VERSION:
        raise OSError(f"{path} has ABI version {version}, this package needs {ABI_VERSION} (a stale build: rebuild it)")
    try:
        _declare(lib)
    except AttributeError as exc:
        raise OSError(f"{path} lacks {exc}") from exc
    return lib


def load() -> ctypes.CDLL:
    """Load libcudafd.so once (thread-safe) and return it; raise LibraryError if impossible.

    The driver choice made by use_driver()/use_simulator()/$CUDAFD_SIMULATOR
    is handed to the core right after it loads.
    """
    global _core, _core_path
    lib = _core
    if lib is not None:
        return lib
    with _lock:
        if _core is not None:
            return _core
        tried: list[str] = []
        for path in candidate_paths():
            try:
                lib = _open(path)
            except OSError as exc:
                text = str(exc)
                tried.append(f"  {text}" if text.startswith(path) else f"  {path}: {text}")
                continue
            _apply_choice(lib)
            _core, _core_path = lib, path
            register_name_lookup(_core_error_name)
            return lib
        hint = (
            "the native core is built by `pip install .` (or `make -C native` in a source "
            "checkout); or set CUDAFD_LIBRARY to the path of libcudafd.so"
        )
        raise LibraryError("cannot load libcudafd.so; tried:\n" + "\n".join(tried) + "\n" + hint)


def try_load() -> ctypes.CDLL | None:
    """load(), or None where the core cannot load."""
    try:
        return load()
    except LibraryError:
        return None


def loaded() -> ctypes.CDLL | None:
    """The core if it is already loaded; never tries to load it."""
    return _core


def loaded_path() -> str | None:
    """The path libcudafd.so was loaded from, or None."""
    return _core_path


def _core_error_name(code: int) -> str | None:
    lib = _core
    if lib is None:
        return None
    raw = lib.cudafd_cuda_error_name(code)
    return raw.decode() if raw else None


def last_error(lib: ctypes.CDLL) -> str:
    """``cudafd_last_error()`` of the calling thread, decoded."""
    raw = lib.cudafd_last_error()
    return raw.decode(errors="replace") if raw else ""


def raise_for(lib: ctypes.CDLL, rc: int, where: str = "") -> None:
    """Raise the exception for a negative native return code (no-op for rc >= 0)."""
    if rc >= 0:
        return
    raise from_rc(rc, last_error(lib), where, lib.cudafd_last_cuda_error())


# ---- driver choice ----------------------------------------------------------


def sim_library_path() -> str:
    """Path of the simulated driver, libcudafd_sim.so.

    Next to the core in use if $CUDAFD_LIBRARY points elsewhere (a sanitizer
    build keeps both in one folder), else ``<package>/_lib/libcudafd_sim.so``.
    """
    override = os.environ.get("CUDAFD_LIBRARY")
    if override:
        beside = Path(override).resolve().parent / SIM_LIBRARY_NAME
        if beside.exists():
            return str(beside)
    return str(package_lib_dir() / SIM_LIBRARY_NAME)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _wanted_driver() -> str | None:
    """The explicit choice (use_driver, $CUDAFD_SIMULATOR), or None for the core's default."""
    if _choice is not _UNSET:
        return _choice  # type: ignore[return-value]
    if _env_flag("CUDAFD_SIMULATOR"):
        return sim_library_path()
    return None


def default_driver_path() -> str:
    """The driver the core loads when nothing was chosen: $CUDAFD_DRIVER, else libcuda.so.1."""
    return os.environ.get("CUDAFD_DRIVER") or DEFAULT_DRIVER


def _apply_choice(lib: ctypes.CDLL) -> None:
    want = _wanted_driver()
    if want is None and _choice is _UNSET:
        return  # the core applies its own default ($CUDAFD_DRIVER or libcuda.so.1)
    rc = lib.cudafd_set_driver(os.fsencode(want) if want else None)
    raise_for(lib, rc, "choosing the CUDA driver")


def use_driver(path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None) -> None:
    """Choose the CUDA driver library (a path or soname) before cudafd first uses one.

    ``path`` is a str, bytes or os.PathLike; ``None`` restores the default
    ($CUDAFD_DRIVER, else ``libcuda.so.1``).
    Calling it again with the driver already in use is a no-op; choosing a
    different one after a driver was loaded raises :class:`CudafdError`
    (one process has one driver). Raises TypeError for something that is
    not a path, ValueError for ``""`` (or ``b""``).
    """
    global _choice
    want = os.fsdecode(path) if path is not None else None  # (the core takes it encoded: a str here)
    if want == "":
        raise ValueError("use_driver() takes the path or soname of a CUDA driver library, not ''; None chooses the default")
    with _lock:
        current = committed_driver_path()
        if current is not None:
            target = want if want is not None else default_driver_path()
            if not _same_library(current, target):
                raise CudafdError(
                    f"the CUDA driver {current} is already loaded; call cudafd.use_driver() "
                    "(or use_simulator()) before anything else in cudafd touches the GPU",
                    rc=E_STATE,
                )
            _choice = want
            return
        _choice = want
        if _core is not None:
            rc = _core.cudafd_set_driver(os.fsencode(want) if want else None)
            raise_for(_core, rc, "choosing the CUDA driver")


def use_simulator() -> None:
    """use_driver(sim_library_path()): run on the simulated GPU of libcudafd_sim.so."""
    path = sim_library_path()
    if not os.path.exists(path):
        raise LibraryError(f"the simulator {path} is not built: `pip install .` or `make -C native` builds it")
    use_driver(path)


def _same_library(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def committed_driver_path() -> str | None:
    """The driver already loaded by the core or by the Python bindings, else None.

    Never loads anything.
    """
    if _bound_driver is not None:
        return _bound_driver
    if _core is not None:
        raw = _core.cudafd_driver_path()
        if raw:
            return os.fsdecode(raw)
    return None


def note_bound_driver(path: str) -> None:
    """Called by the driver bindings (driver.get()) once they bound ``path``:
    from then on that is the process's driver (committed_driver_path)."""
    global _bound_driver
    _bound_driver = path


def driver_path() -> str:
    """The driver path to use from Python: the one the core loaded (loading it now).

    With the core available this is ``cudafd_driver_path()`` after
    ``cudafd_driver_load()`` (raising the core's error if that failed), so both
    sides use one dlopen handle. Without the core, the Python-side choice:
    use_driver()/use_simulator(), $CUDAFD_DRIVER, else ``libcuda.so.1``.
    """
    lib = try_load()
    if lib is None:
        want = _wanted_driver()
        return want if want is not None else default_driver_path()
    raw = lib.cudafd_driver_path()
    if not raw:
        rc = lib.cudafd_driver_load()
        raise_for(lib, rc, "loading the CUDA driver")
        raw = lib.cudafd_driver_path()
    return os.fsdecode(raw)
