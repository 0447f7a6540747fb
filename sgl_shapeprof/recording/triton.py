"""Triton kernel launches: recorded while a logged pass is open (on any
thread), as one record each in the same file (docs/FORMAT.md, "Kernel
launches").

Every launch, plain, autotuned (`@triton.autotune`), under heuristics or
under Triton's interpreter (TRITON_INTERPRET=1), ends in the innermost
kernel object's `run(*args, grid, warmup, **kwargs)`, with the config that
was chosen among its keyword arguments: JITFunction.run, or
InterpretedFunction.run under the interpreter (the same signature in Triton
3.6 to 3.9). That method is replaced only while some logged pass is open
(enter() at a logged pass's begin, leave() once none is open): outside
them Triton's own functions are in place, at no cost. The autotuner's
benchmarking (Autotuner._bench: every config, each run many times, and
do_bench's buffers) is not the model's work: nothing it launches or runs is
recorded, only the launch of the config it chose.

A launch is recorded when its run() returned (or raised): the record is
written whole, with what it ran with (num_warps from the compiled kernel).
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from typing import Callable, Dict, Optional, Tuple

from .messages import say_once
from .pauses import pause_thread, resume_thread

# Launch options kept as their own arguments; any other keyword that is not
# a kernel parameter goes into "launch_options", as text.
OPTIONS = ("grid", "num_warps", "num_stages", "num_ctas", "maxnreg", "launch_options")
PREFIX = "triton:"  # a launch's operation: "triton:<module>.<qualname>" (FORMAT.md)

_lock = threading.Lock()
_installed: Dict[Tuple[type, str], Callable] = {}  # (class, method) -> Triton's own
_local = threading.local()  # .bench: this thread is inside the autotuner's benchmarking
# id(kernel object) -> (a weak reference to it, its _Kernel): by identity, as
# hashing a JITFunction hashes its source's cache key
_kernels: Dict[int, Tuple["weakref.ref", "_Kernel"]] = {}
_by_operation: Dict[str, "_Kernel"] = {}
_dtypes: dict = {}
_devices: dict = {}
_C = None
_Tensor = None
_MISSING = object()
_off = False  # recording a launch failed once: launches are not recorded again


def installed() -> bool:
    return bool(_installed)


def _targets():
    """(class, method name, wrapper maker) present in this process's Triton."""
    mods = sys.modules
    jit = mods.get("triton.runtime.jit")
    interp = mods.get("triton.runtime.interpreter")
    tuner = mods.get("triton.runtime.autotuner")
    if jit is not None and hasattr(jit, "JITFunction"):
        yield jit.JITFunction, "run", _launcher
    if interp is not None and hasattr(interp, "InterpretedFunction"):
        yield interp.InterpretedFunction, "run", _interpreted
    if tuner is not None and hasattr(tuner, "Autotuner"):
        yield tuner.Autotuner, "_bench", _benchmark


def enter() -> None:
    """A logged pass began: launches are recorded from here (Triton loaded)."""
    global _C, _Tensor
    if _installed or _off or "triton.runtime.jit" not in sys.modules:
        return
    with _lock:
        if _installed:
            return
        try:
            if _C is None:
                import torch

                from .. import _C as native
                _C, _Tensor = native, torch.Tensor
            for cls, name, wrap in _targets():
                original = cls.__dict__.get(name)
                if original is None or getattr(original, "_shapeprof_original", None) is not None:
                    continue
                wrapper = wrap(original)
                wrapper._shapeprof_original = original
                setattr(cls, name, wrapper)
                _installed[(cls, name)] = original
        except Exception as e:  # another Triton: its launches are not recorded
            _uninstall()
            say_once("triton-hook", f"cannot record Triton launches with this Triton ({e})")


def leave(logging: Callable[[], bool]) -> None:
    """A logged pass ended: Triton's own functions back, unless some logged
    pass is still open (logging(), asked under the lock that enter() takes)."""
    if not _installed:
        return
    with _lock:
        if _installed and not logging():
            _uninstall()


def _uninstall() -> None:
    for (cls, name), original in list(_installed.items()):
        setattr(cls, name, original)
    _installed.clear()


def _launcher(original, interpreted: bool = False):
    @functools.wraps(original)
    def run(self, *args, grid, warmup, **kwargs):
        mode = 0 if warmup or _off or getattr(_local, "bench", 0) else _C.launch_mode()
        if not mode:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        # The interpreter copies each tensor argument to host memory and back
        # around the kernel (aten.copy_ and the like): on a GPU these copies
        # do not happen, so they are not recorded.
        paused = interpreted and pause_thread()
        try:
            kernel = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        except BaseException as e:
            if paused:
                resume_thread()
            _record(self, args, kwargs, grid, None, mode, e)
            raise
        if paused:
            resume_thread()
        _record(self, args, kwargs, grid, kernel, mode, None)
        return kernel
    return run


def _interpreted(original):
    return _launcher(original, True)


def _benchmark(original):
    @functools.wraps(original)
    def _bench(self, *args, **kwargs):
        _local.bench = getattr(_local, "bench", 0) + 1
        paused = pause_thread()  # do_bench's own operators too
        try:
            return original(self, *args, **kwargs)
        finally:
            if paused:
                resume_thread()
            _local.bench -= 1
    return _bench


class _Kernel:
    """A kernel's parameters, and its key in the core (this object)."""
    __slots__ = ("operation", "params", "index", "slots", "arg_names", "__weakref__")

    def __init__(self, fn) -> None:
        sig = inspect.signature(fn)
        self.params = tuple(sig.parameters)
        self.index = {name: i for i, name in enumerate(self.params)}
        # per parameter, its default, or _MISSING: a launch's values start from these
        self.slots = [_MISSING if p.default is inspect.Parameter.empty else p.default
                      for p in sig.parameters.values()]
        self.arg_names = self.params + OPTIONS
        module = getattr(fn, "__module__", None) or "?"
        self.operation = f"{PREFIX}{module}.{getattr(fn, '__qualname__', None) or fn.__name__}"


def _kernel(obj) -> _Kernel:
    entry = _kernels.get(id(obj))
    if entry is not None and entry[0]() is obj:
        return entry[1]
    k = _Kernel(obj.fn)
    # one operation name, one entry in the core (the summary counts by name):
    # another kernel object of the same function shares it
    same = _by_operation.get(k.operation)
    if same is not None and same.arg_names == k.arg_names:
        k = same
    elif same is not None:
        n = 2
        while f"{k.operation}#{n}" in _by_operation:
            n += 1
        k.operation = f"{k.operation}#{n}"
    _by_operation.setdefault(k.operation, k)
    _kernels[id(obj)] = (weakref.ref(obj), k)
    return k


def _tensor(i: int, t, mode: int) -> tuple:
    code = _dtypes.get(t.dtype)
    if code is None:
        code = _dtypes[t.dtype] = _C.dtype_code(str(t.dtype))
    if not mode & 2:
        return (i, code, tuple(t.shape))
    device = t.device
    dev = _devices.get(device.type)
    if dev is None:
        dev = _devices[device.type] = _C.device_code(device.type)
    index = device.index
    return (i, code, tuple(t.shape), tuple(t.stride()), t.storage_offset(), dev,
            -1 if index is None else index)


_PLAIN = (int, float, bool, str, type(None))


def _value(v):
    """A non-tensor value as the core takes it: None, bool, int, float, str,
    a tuple of ints; Triton's constexpr by its value, its dtypes by name
    ("bf16"); anything else is written as its type's name."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    mod = type(v).__module__ or ""
    if mod.startswith("triton"):
        inner = getattr(v, "value", v)
        if inner is not v:
            return _value(inner)
        return str(v)
    if isinstance(v, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    return v


def _record(obj, args, kwargs, grid, kernel, mode: int, error: Optional[BaseException]) -> None:
    """Files one launch; never raises into the launch. Per launch (the hot
    path of this file): list and tuple work only, no per-launch dicts."""
    global _off
    try:
        k = _kernel(obj)
        values = k.slots.copy()
        n = len(values)
        values[:len(args)] = args[:n]
        extra = None
        if kwargs:
            index = k.index
            for name, v in kwargs.items():
                i = index.get(name)
                if i is not None:
                    values[i] = v
                elif extra is None:
                    extra = {name: v}
                else:
                    extra[name] = v
        Tensor = _Tensor
        items = [_tensor(i, v, mode) if isinstance(v, Tensor)
                 else (i, v if v.__class__ in _PLAIN else _value(v))
                 for i, v in enumerate(values) if v is not _MISSING]
        if callable(grid):
            try:
                grid = grid({name: v for name, v in zip(k.params, values) if v is not _MISSING})
            except Exception:
                grid = None
        if grid is not None:
            items.append((n, tuple(int(g) for g in grid)))
        meta = getattr(kernel, "metadata", None)  # the compiled kernel's (not the interpreter's)
        if extra is not None or meta is not None:
            extra = extra or {}
            for j, name in enumerate(OPTIONS[1:5], 1):
                v = extra.pop(name, None)
                if v is None and meta is not None:
                    v = getattr(meta, name, None)
                if v is not None:
                    items.append((n + j, _value(v)))
            if extra:
                items.append((n + 5, ", ".join(f"{name}={v!r}" for name, v in sorted(extra.items()))))
        err = None
        if error is not None:
            err = (type(error).__name__, str(error).encode("utf-8", "surrogatepass"))
        _C.launch(k, k.operation, k.arg_names, tuple(items), err)
    except Exception as e:
        say_once("triton-record", f"cannot record a Triton launch ({type(e).__name__}: {e}); "
                                  f"launches are recorded no further")
        _off = True
