"""torch.compile's Triton kernels as records: CachingAutotuner.run, which
the code Inductor generates calls for each launch, is wrapped; a launch in
a logged pass is one record, "inductor:<kernel name>"
(triton_poi_fused_add_0), filed as a Triton launch is (FORMAT.md, "Kernel
launches"): its tensors by the kernel's parameter names, its other values
(the numels), then the config that ran (its block sizes, num_warps,
num_stages) and the grid launched. Written when the launch returned or
raised. What run() does besides the launch (autotuning the first launch:
benchmarking every config, cloning the arguments) is not the model's work:
the thread records nothing while it runs.

Not seen here: a graph compiled with cpp_wrapper or by AOTInductor (C++
launches the kernels), and launches replayed from a CUDA graph
(mode="reduce-overhead": as every replay, counted by the pass, not seen).
"""
from __future__ import annotations

import functools
import operator
import sys
import time
from typing import Optional

from ...on_import import is_ours, mark
from ...recording.doors import LOGGING_KERNELS, LOGGING_TIME, MISSING, OPTIONS, launch_value, native_types, operation_key
from ...recording.messages import say_once
from .seam import PREFIX

_STATE = "_shapeprof_launch"  # on an autotuner: (its config, _Launch)
_off = False  # recording a launch failed once: launches are not recorded again


def _nothing(args: tuple) -> tuple:
    return ()


class _Launch:
    """What an autotuner's launches are described by, for its chosen config:
    the names of run()'s values, the config's own values, the grid's code."""
    __slots__ = ("operation", "names", "arg_names", "grid", "before_grid", "after_grid", "tails", "numels", "key")

    def __init__(self, autotuner, config, n_args: int) -> None:
        meta = autotuner.inductor_meta or {}
        signature = autotuner.triton_meta.get("signature", {})
        kwargs = dict(getattr(config, "kwargs", None) or {})
        # run()'s values: the kernel's parameters but its constexprs, then
        # the launcher's extra arguments
        names = [n for n, t in signature.items() if t != "constexpr" and n not in kwargs]
        names += list(meta.get("extra_launcher_args", ()))
        if len(names) != n_args:  # another layout: by position
            names = [f"arg{i}" for i in range(n_args)]
        self.names = tuple(names)
        self.arg_names = self.names + tuple(kwargs) + OPTIONS
        self.operation = f"{PREFIX}:" + str(meta.get("kernel_name") or getattr(autotuner.fn, "__name__", "?"))
        self.grid = _grid_code(autotuner, config)
        # what follows run()'s values, the same at every launch of this
        # config but the grid: the config's values, the grid, its options
        self.before_grid = tuple(kwargs.values())
        options = [MISSING] * (len(OPTIONS) - 1)
        for j, name in enumerate(("num_warps", "num_stages", "num_ctas", "maxnreg")):
            v = getattr(config, name, None) if config is not None else None
            if v is not None:
                options[j] = v
        self.after_grid = tuple(options)
        # those values by the launch's integer values (the numels its grid is computed from)
        self.tails: dict = {}
        self.numels = None
        self.operation, self.key = operation_key(self.operation, self.arg_names)

    def tail(self, args: tuple) -> tuple:
        """The values after run()'s, for a launch given args."""
        if self.numels is None:  # where the ints are (the numels): the kernel's signature places them
            at = [i for i, a in enumerate(args) if a.__class__ is int]
            self.numels = operator.itemgetter(*at) if at else _nothing
        numels = self.numels(args)
        tail = self.tails.get(numels)
        if tail is None:
            grid = ()
            if self.grid is not None:
                scope = dict(zip(self.names, args))
                try:
                    exec(self.grid, scope)
                    grid = (int(scope["grid_0"]), int(scope["grid_1"]), int(scope["grid_2"]))
                except Exception:
                    grid = ()
            tail = self.before_grid + (grid or MISSING,) + self.after_grid
            if len(self.tails) < 4096:
                self.tails[numels] = tail
        return tail


def _grid_code(autotuner, config):
    """The grid of a launch of this config, compiled once: Inductor's own
    expression of it (GridExpr, from the kernel's grid type), or None."""
    try:
        module = sys.modules[type(autotuner).__module__]
        expr = module.GridExpr.from_meta(autotuner.inductor_meta, config)
        text = "\n".join(list(expr.prefix) + [f"grid_0 = {expr.x_grid}", f"grid_1 = {expr.y_grid}",
                                              f"grid_2 = {expr.z_grid}"])
        return compile(text, "<inductor grid>", "exec")
    except Exception:
        return None


def patch_triton_heuristics(module) -> None:
    """torch._inductor.runtime.triton_heuristics was just imported: its
    autotuner's run() records the launches of logged passes."""
    cls = getattr(module, "CachingAutotuner", None)
    original = getattr(cls, "run", None) if cls is not None else None
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def run(self, *args, stream, **kwargs):
        native = sys.modules.get("sgl_shapeprof._C")
        mode = 0 if native is None or _off or kwargs.get("benchmark_run") else native.logging_flags()
        if not mode:
            return original(self, *args, stream=stream, **kwargs)
        paused = native.pause_thread()  # its autotuning's benchmarks and copies
        span = [time.perf_counter_ns()] if mode & LOGGING_TIME else []
        ext = native.cupti_region_begin() if mode & LOGGING_KERNELS else 0
        try:
            out = original(self, *args, stream=stream, **kwargs)
        except BaseException as e:
            if span:
                span.append(time.perf_counter_ns())
            if ext:
                native.cupti_region_end(ext)
                span.append(ext)
            if paused:
                native.resume_thread()
            _file_launch(native, self, args, mode, e, span)
            raise
        if span:
            span.append(time.perf_counter_ns())
        if ext:
            native.cupti_region_end(ext)
            span.append(ext)
        if paused:
            native.resume_thread()
        _file_launch(native, self, args, mode, None, span)
        return out

    mark(run, original)
    cls.run = run


def _file_launch(native, autotuner, args: tuple, mode: int, error: Optional[BaseException],
                 span: list) -> None:
    """Files one launch; never raises into it."""
    global _off
    try:
        launchers = autotuner.launchers
        config = getattr(launchers[0], "config", None) if len(launchers) == 1 else None
        state = autotuner.__dict__.get(_STATE)
        if state is None or state[0] is not config:
            native_types(native)
            state = autotuner.__dict__[_STATE] = (config, _Launch(autotuner, config, len(args)))
        launch: _Launch = state[1]
        err = None
        if error is not None:
            err = (type(error).__name__, str(error).encode("utf-8", "surrogatepass"))
        native.launch(launch.key, launch.operation, launch.arg_names, args + launch.tail(args), mode, err,
                      launch_value, *span)
    except Exception as e:
        _off = True
        say_once("inductor-record", f"cannot record an Inductor kernel launch ({type(e).__name__}: {e}); "
                                    f"such launches are recorded no further")
