"""Triton's door: kernel launches recorded while a logged pass is open (on
any thread), as one record each in the same file (docs/FORMAT.md, "Kernel
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

Unlike the other doors, importing Triton wraps nothing: its runtime modules'
patch (the seam's doors) registers enter() and leave() with recording's
passes (recording/doors.py's pass_door), which call them as logged passes
begin and end.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
import weakref
from typing import Callable, Dict, Optional, Tuple

from ...on_import import is_ours, mark
from ...recording.doors import LOGGING_KERNELS, LOGGING_TIME, MISSING, OPTIONS, launch_types, launch_value, native_types, operation_key, pass_door
from ...recording.messages import say_once
from ...recording.pauses import pause_thread, resume_thread
from .seam import AUTOTUNER, INTERPRETER, JIT, PACKAGE, PREFIX

_lock = threading.Lock()
_installed: Dict[Tuple[type, str], Callable] = {}  # (class, method) -> Triton's own
_local = threading.local()  # .bench: this thread is inside the autotuner's benchmarking
# id(kernel object) -> (a weak reference to it, its _Kernel): by identity, as
# hashing a JITFunction hashes its source's cache key
_kernels: Dict[int, Tuple["weakref.ref", "_Kernel"]] = {}
_C = None
_types_given = False  # triton.language's dtype and constexpr, to launch_value
_off = False  # recording a launch failed once: launches are not recorded again


def _targets():
    """(class, method name, wrapper maker) present in this process's Triton."""
    mods = sys.modules
    jit = mods.get(JIT)
    interp = mods.get(INTERPRETER)
    tuner = mods.get(AUTOTUNER)
    if jit is not None and hasattr(jit, "JITFunction"):
        yield jit.JITFunction, "run", _launcher
    if interp is not None and hasattr(interp, "InterpretedFunction"):
        yield interp.InterpretedFunction, "run", _interpreted
    if tuner is not None and hasattr(tuner, "Autotuner"):
        yield tuner.Autotuner, "_bench", _benchmark


def enter() -> None:
    """A logged pass began: launches are recorded from here (Triton loaded).
    Installs what is missing (Triton's interpreter may load later than its
    JIT), under the lock that leave() holds while it checks and undoes: a
    pass beginning while another ends never finds the wrappers on their
    way out."""
    global _C, _types_given
    if _off or JIT not in sys.modules:
        return
    with _lock:
        try:
            if _C is None:
                from ... import _C as native
                native_types(native)
                _C = native
            if not _types_given:
                tl = sys.modules.get("triton.language")
                if tl is not None:
                    launch_types(getattr(tl, "dtype", None), PACKAGE)
                    _types_given = True
            for cls, name, wrap in _targets():
                if (cls, name) in _installed:
                    continue
                original = cls.__dict__.get(name)
                if original is None or is_ours(original):
                    continue
                wrapper = wrap(original)
                mark(wrapper, original)
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


def patch_runtime_module(module) -> None:
    """Triton's JIT or interpreter imported (the seam's doors): launches are
    recorded in logged passes from here, from the import on should one be
    open (`sgl-shapeprof record` opens its whole-run pass before the
    script imports anything)."""
    pass_door(enter, leave)


def _uninstall() -> None:
    for (cls, name), original in list(_installed.items()):
        setattr(cls, name, original)
    _installed.clear()


def _launcher(original, interpreted: bool = False):
    @functools.wraps(original)
    def run(self, *args, grid, warmup, **kwargs):
        mode = 0 if warmup or _off or getattr(_local, "bench", 0) else _C.logging_flags()
        if not mode:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        # The interpreter copies each tensor argument to host memory and back
        # around the kernel (aten.copy_ and the like): on a GPU these copies
        # do not happen, so they are not recorded.
        paused = interpreted and pause_thread()
        # a callable grid: the one Triton computes is the one launched (called once, by Triton)
        launched, given = [], grid
        if callable(grid):
            def grid(meta):
                shape = given(meta)
                launched.append(shape)
                return shape
        else:
            launched.append(grid)
        span = [time.perf_counter_ns()] if mode & LOGGING_TIME else []
        ext = _C.cupti_region_begin() if mode & LOGGING_KERNELS else 0
        try:
            kernel = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        except BaseException as e:
            if span:
                span.append(time.perf_counter_ns())
            if ext:
                _C.cupti_region_end(ext)
                span.append(ext)
            if paused:
                resume_thread()
            _file_launch(self, args, kwargs, launched, None, mode, e, span)
            raise
        if span:
            span.append(time.perf_counter_ns())
        if ext:
            _C.cupti_region_end(ext)
            span.append(ext)
        if paused:
            resume_thread()
        _file_launch(self, args, kwargs, launched, kernel, mode, None, span)
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
    """A kernel object's parameters (their defaults its own), and the key
    its launches are filed under in the core (shared by every kernel object
    of one operation name: the summary counts by name)."""
    __slots__ = ("operation", "params", "index", "slots", "arg_names", "key", "options")

    def __init__(self, fn) -> None:
        sig = inspect.signature(fn)
        self.params = tuple(sig.parameters)
        self.index = {name: i for i, name in enumerate(self.params)}
        # per parameter, its default, or MISSING: a launch's values start from these
        self.slots = [MISSING if p.default is inspect.Parameter.empty else p.default
                      for p in sig.parameters.values()] + [MISSING] * len(OPTIONS)
        self.arg_names = self.params + OPTIONS
        self.options = (None, ())  # (a compiled kernel's metadata, its launch options read from it)
        module = getattr(fn, "__module__", None) or "?"
        self.operation = f"{PREFIX}:{module}.{getattr(fn, '__qualname__', None) or fn.__name__}"
        self.key = None


def _kernel(obj) -> _Kernel:
    entry = _kernels.get(id(obj))
    if entry is not None and entry[0]() is obj:
        return entry[1]
    k = _Kernel(obj.fn)
    # another kernel of this name with other parameters: another operation (#2)
    k.operation, k.key = operation_key(k.operation, k.arg_names)
    _kernels[id(obj)] = (weakref.ref(obj), k)
    return k


def _file_launch(obj, args, kwargs, grid, kernel, mode: int, error: Optional[BaseException],
                 span: list) -> None:
    """Files one launch; never raises into the launch. Per launch (the hot
    path of this file): a list of its values, one per parameter and launch
    option, described natively (_C.launch)."""
    global _off
    try:
        k = _kernel(obj)
        values = k.slots.copy()  # the parameters' defaults, then the options, missing
        n = len(k.params)
        values[:min(len(args), n)] = args[:n]  # positionals past its parameters: not its values
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
        if grid:  # [the grid launched], or [] when Triton computed none (it raised first)
            g = grid[-1]
            if g.__class__ is not tuple:  # a tuple goes as it is (its ints read natively)
                try:
                    g = tuple(int(x) for x in g)
                except (TypeError, ValueError):
                    g = MISSING
            values[n] = g
        meta = getattr(kernel, "metadata", None)  # the compiled kernel's (not the interpreter's)
        if extra is None and meta is not None:  # the common case: the options read once per kernel
            if k.options[0] is not meta:
                k.options = (meta, tuple(getattr(meta, name, None) for name in OPTIONS[1:5]))
            for j, v in enumerate(k.options[1], 1):
                if v is not None:
                    values[n + j] = v
        elif extra is not None:
            extra = extra or {}
            for j, name in enumerate(OPTIONS[1:5], 1):
                v = extra.pop(name, None)
                if v is None and meta is not None:
                    v = getattr(meta, name, None)
                if v is not None:
                    values[n + j] = v
            if extra:
                values[n + 5] = ", ".join(f"{name}={v!r}" for name, v in sorted(extra.items()))
        err = None
        if error is not None:
            err = (type(error).__name__, str(error).encode("utf-8", "surrogatepass"))
        _C.launch(k.key, k.operation, k.arg_names, tuple(values), mode, err, launch_value, *span)
    except Exception as e:
        say_once("triton-record", f"cannot record a Triton launch ({type(e).__name__}: {e}); "
                                  f"launches are recorded no further")
        _off = True
