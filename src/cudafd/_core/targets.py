"""Turning whatever the caller waits on into a raw CUDA stream or event handle.

A target is either a stream, meaning "all work enqueued on it so far", or a
recorded event, meaning "its latest record". Recognised:

* anything with ``__cuda_stream__`` (a method returning ``(version, handle)``,
  or, as older cuda.core had it, an attribute holding that tuple): cuda.core
  streams, newer CuPy streams, ``cudafd.sim.Stream``, ...
* torch: ``torch.cuda.Stream`` / ``ExternalStream`` (``.cuda_stream``) and
  ``torch.cuda.Event`` (``.cuda_event``; torch creates the CUevent lazily at the
  first record, so an unrecorded torch event is 0: already complete);
* CuPy: ``cupy.cuda.Stream`` / ``ExternalStream`` and ``cupy.cuda.Event`` (``.ptr``);
* numba-cuda: streams and events (``.handle``: a ctypes ``c_void_p`` or a
  cuda.bindings object);
* cuda.core ``Event`` (``.handle``); cuda.bindings ``CUstream`` / ``CUevent``
  (``int(obj)``); ``cudafd.sim.Event``;
* a plain ``int``: a stream handle (0 = the legacy default stream of the
  current context);
* a CUDA ``torch.Tensor`` or a ``cupy.ndarray``, as a convenience for "the
  work that produced it". Exactly: all work enqueued so far on the *current*
  stream of the array's device in the calling thread (frameworks do not
  record which stream produced an array). Work enqueued on other streams is
  not covered: wait on that stream, or on an event recorded after the work.

Default streams and events of a framework's device. A framework's default
stream has the handle 0 (or CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), which
the driver takes as the default stream of the *current* context. For a torch
or CuPy stream, tensor or array, the Target therefore carries its device's
primary context (the frameworks' own) unless that is the current context
(the current one may be another device's, or another context of the same
device: PyCUDA's, the caller's own), which the Notifier makes current around
the calls that name the handle; every other stream carries its context
itself (cuStreamGetCtx). An event's context cannot be asked of the driver,
and the core makes the current one wait for it; a torch event knows its
device, so its Target carries that device's context too, and its wait stays
on its device.

Dispatch is on the module names along the object's type's MRO, cached per
type, so no framework is ever imported here and subclasses work.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Literal

__all__ = ["Target", "resolve", "ACCEPTED"]

Kind = Literal["stream", "event", "done"]

ACCEPTED = (
    "a CUDA stream (an object with __cuda_stream__, torch.cuda.Stream, cupy.cuda.Stream, a "
    "numba-cuda stream, a cuda.core Stream, cuda.bindings.driver.CUstream, cudafd.sim.Stream, "
    "or an int stream handle) or a recorded event (torch.cuda.Event, cupy.cuda.Event, a "
    "numba-cuda event, a cuda.core Event, cuda.bindings.driver.CUevent, cudafd.sim.Event), "
    "or a CUDA torch.Tensor / cupy.ndarray (the current stream of its device)"
)


class Target:
    """A resolved wait target.

    ``kind`` is "stream", "event", or "done" (nothing to wait for: an
    unrecorded torch event). ``handle`` is the CUstream/CUevent as an int.
    ``keep`` is the caller's object, held while the wait is pending so the
    stream or event it owns is not destroyed under the wait. ``ctx`` is the
    CUcontext to make current while watching an event, where the target knows
    it (0: the caller's current context, as the native core requires for
    events), or while naming a framework's default stream with another context
    current (module docstring; 0: the handle's own or the current one).
    """

    __slots__ = ("kind", "handle", "keep", "ctx")

    def __init__(self, kind: Kind, handle: int, keep: object, ctx: int = 0) -> None:
        self.kind = kind
        self.handle = handle
        self.keep = keep
        self.ctx = ctx

    def __repr__(self) -> str:
        return f"Target({self.kind!r}, {self.handle:#x}, keep={type(self.keep).__name__})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Target):
            return NotImplemented
        return (self.kind, self.handle) == (other.kind, other.handle) and self.keep is other.keep

    __hash__ = None  # type: ignore[assignment]


def handle_int(h: object, what: str = "handle") -> int:
    """A handle as a nonnegative int: ints, ctypes c_void_p (``.value``), cuda.bindings objects (``int()``)."""
    if isinstance(h, (bool, float, complex, str, bytes, bytearray)):  # int() would take them, wrongly
        raise TypeError(f"{what} must be an integer handle, not {type(h).__qualname__}")
    if isinstance(h, int):
        value = int(h)
    elif h is None:
        value = 0
    elif hasattr(h, "value") and not hasattr(h, "__int__"):  # ctypes c_void_p and friends
        value = h.value or 0  # type: ignore[attr-defined]
    else:
        try:
            value = int(h)  # type: ignore[call-overload]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}: cannot read a CUDA handle from {type(h).__qualname__}") from exc
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{what} must be a 64-bit handle (0 <= h < 2**64), got {value}")
    return value


# ---- per-kind resolvers ------------------------------------------------------


def _cuda_stream_protocol(obj: object) -> Target:
    proto = obj.__cuda_stream__  # type: ignore[attr-defined]
    if callable(proto):
        proto = proto()
    try:
        _version, handle = proto
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{type(obj).__qualname__}.__cuda_stream__ must give (version, handle), got {proto!r}") from exc
    return _stream(handle_int(handle, "__cuda_stream__ handle"), obj, obj)


def _int_handle(obj: object) -> Target:
    value = operator.index(obj)  # type: ignore[arg-type]
    if not 0 <= value < 1 << 64:
        raise ValueError(f"a stream handle must be a 64-bit handle (0 <= h < 2**64), got {value}")
    return Target("stream", value, obj)


DEFAULT_STREAMS = (0, 1, 2)  # the legacy default stream (0, CU_STREAM_LEGACY) and CU_STREAM_PER_THREAD


def _ordinal(obj: object) -> int | None:
    """The device index a framework object names: ``device_index`` / ``device_id`` (torch and
    CuPy streams), or ``device`` with ``index`` (a torch.device), ``device_id`` (cuda.core) or
    ``id`` (a CuPy Device); None if it names none."""
    try:
        device = getattr(obj, "device", None)
        for owner, names in ((obj, ("device_index", "device_id")), (device, ("index", "device_id", "id"))):
            for name in names:
                value = getattr(owner, name, None)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    return value
    except Exception:  # noqa: BLE001 - a property that fails: no device known
        return None
    return None


# device ordinal -> its primary context's handle, as last found active: a primary
# context released and retained again keeps its handle (docs/design.md)
_PRIMARY: dict[int, int] = {}


def _device_ctx(obj: object) -> int:
    """The primary context of the device ``obj`` names (module docstring), or 0 where that
    is the current context, is not active, or no device is named."""
    ordinal = _ordinal(obj)
    if ordinal is None:
        return 0
    from . import driver as _driver

    drv = _driver.get()
    drv.init()
    current = drv.current_ctx()
    if current and _PRIMARY.get(ordinal) == current:  # the common case: one driver call
        return 0
    primary = drv.primary_ctx(ordinal)
    if primary:
        _PRIMARY[ordinal] = primary
    return 0 if primary == current else primary


def _stream(handle: int, keep: object, named_by: object) -> Target:
    """A stream target: a default-stream handle names the current context's stream, so it
    carries the context of the device ``named_by`` names, unless that is the current one."""
    return Target("stream", handle, keep, _device_ctx(named_by) if handle in DEFAULT_STREAMS else 0)


def _torch_stream(obj: object) -> Target:
    return _stream(handle_int(obj.cuda_stream, "torch cuda_stream"), obj, obj)  # type: ignore[attr-defined]


def _torch_event(obj: object) -> Target:
    """A torch event: the waiters make its device's context current (not the caller's)."""
    handle = handle_int(obj.cuda_event, "torch cuda_event")  # type: ignore[attr-defined]
    if not handle:
        return Target("done", 0, obj)
    return Target("event", handle, obj, _device_ctx(obj))


def _ptr_stream(obj: object) -> Target:
    return _stream(handle_int(obj.ptr, "cupy ptr"), obj, obj)  # type: ignore[attr-defined]


def _ptr_event(obj: object) -> Target:
    return Target("event", handle_int(obj.ptr, "cupy ptr"), obj)  # type: ignore[attr-defined]


def _handle_stream(obj: object) -> Target:
    return Target("stream", handle_int(obj.handle, "stream handle"), obj)  # type: ignore[attr-defined]


def _handle_event(obj: object) -> Target:
    return Target("event", handle_int(obj.handle, "event handle"), obj)  # type: ignore[attr-defined]


def _torch_tensor(obj: object) -> Target:
    """A CUDA tensor: the current stream of its device, now (torch's streams are per thread)."""
    if not getattr(obj, "is_cuda", False):
        raise TypeError("a CPU tensor has no GPU work to wait for: pass a CUDA tensor or a stream")
    import torch

    stream = torch.cuda.current_stream(obj.device)  # type: ignore[attr-defined]
    return _stream(handle_int(stream.cuda_stream, "torch cuda_stream"), (obj, stream), obj)


def _cupy_array(obj: object) -> Target:
    """A CuPy array: the current stream of its device, now (CuPy's streams are per thread)."""
    import cupy

    with obj.device:  # type: ignore[attr-defined]
        stream = cupy.cuda.get_current_stream()
    return _stream(handle_int(stream.ptr, "cupy ptr"), (obj, stream), obj)


def _cudafd_event(obj: object) -> Target:
    return Target("event", handle_int(obj.handle, "event handle"), obj, obj.context)  # type: ignore[attr-defined]


def _int_stream(obj: object) -> Target:
    return Target("stream", handle_int(obj, "CUstream"), obj)


def _int_event(obj: object) -> Target:
    return Target("event", handle_int(obj, "CUevent"), obj)


Resolver = Callable[[object], Target]


def _rejected(message: str) -> Resolver:
    def reject(obj: object) -> Target:
        raise TypeError(message)

    return reject


def _not_accepted(tp: type) -> Resolver:
    return _rejected(f"cudafd cannot wait on {tp.__module__}.{tp.__qualname__}: expected {ACCEPTED}")


def _by_module(tp: type) -> Resolver | None:
    """Resolver for a framework type, chosen by the module and name of a class in its MRO."""
    for cls in tp.__mro__:
        module = getattr(cls, "__module__", "") or ""
        root = module.partition(".")[0]
        name = cls.__name__
        if root == "torch":
            if name in ("Tensor", "TensorBase"):
                return _torch_tensor
            if hasattr(cls, "cuda_stream"):
                return _torch_stream
            if hasattr(cls, "cuda_event"):
                return _torch_event
        elif root in ("cupy", "cupy_backends"):
            if name in ("Stream", "ExternalStream", "_BaseStream", "BaseStream"):
                return _ptr_stream
            if name == "Event":
                return _ptr_event
            if name == "ndarray":
                return _cupy_array
        elif root in ("numba", "numba_cuda"):
            if name.endswith("Stream"):
                return _handle_stream
            if name.endswith("Event"):
                return _handle_event
        elif root == "cuda":  # cuda.core, cuda.bindings (and the old cuda.cuda)
            if name == "CUstream":
                return _int_stream
            if name == "CUevent":
                return _int_event
            if name == "Event" and "core" in module:
                return _handle_event
        elif root == "cudafd":
            if name == "Event":
                return _cudafd_event
    return None


def _resolver_for(tp: type) -> Resolver:
    if tp is bool:
        return _rejected(f"cudafd cannot wait on a bool: expected {ACCEPTED}")
    found = _by_module(tp)  # first: a framework's own resolver knows its streams' devices
    if found is not None:
        return found
    if hasattr(tp, "__cuda_stream__"):
        return _cuda_stream_protocol
    if issubclass(tp, int) or hasattr(tp, "__index__"):  # int subclasses, numpy integers
        return _int_handle
    return _not_accepted(tp)


_cache: dict[type, Resolver] = {int: _int_handle}

# Raw stream handles already resolved: a Target of an int holds nothing of
# the caller's (its keep is the int), so it can be shared, and a hot path
# may look here before calling resolve(). Bounded, never evicted.
INT_TARGETS: dict[int, Target] = {}
INT_TARGETS_MAX = 4096


def resolve(target: object) -> Target:
    """Resolve a wait target to a Target (see the module docstring for what is accepted).

    Raises TypeError for anything else (None, bool, float, str, arbitrary
    objects) and ValueError for a negative handle. The caller's object is
    kept in ``Target.keep``.
    """
    tp = type(target)
    if tp is int and 0 <= target < 1 << 64:  # type: ignore[operator]  # a raw CUstream: the common case, no call
        t = INT_TARGETS.get(target)  # type: ignore[call-overload]
        if t is None:
            t = Target("stream", target, target)  # type: ignore[arg-type]
            if len(INT_TARGETS) < INT_TARGETS_MAX:
                INT_TARGETS[target] = t  # type: ignore[index]
        return t
    resolver = _cache.get(tp)
    if resolver is None:
        resolver = _resolver_for(tp)
        if len(_cache) < 256:  # bounded: types are few, but never grow without limit
            _cache[tp] = resolver
    return resolver(target)
