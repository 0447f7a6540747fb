"""SGLang worker hooks.

Two ways in, both doing nothing unless SGLANG_PROFILE_SHAPES=1:

- the patches in patches/ add to each worker's __init__ (3-5 lines)::

      if os.environ.get("SGLANG_PROFILE_SHAPES") == "1":
          from sgl_shapeprof.integrations.sglang import attach_llm_worker
          attach_llm_worker(self)

- zero-edit mode: the package's start-up hook (sgl_shapeprof_autohook.pth)
  calls install_import_hooks(), which does the same when SGLang's worker
  modules are imported.

attach_*_worker() creates the profiler from the env vars once per process
(LLM: dedupe off by default; diffusion: on), with the worker's rank, and wraps
the worker's forward method so that each call is one forward pass, labelled
with its phase (the batch's forward mode: extend, decode, idle, ...).
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional

from ..profiler import ShapeProfiler, _say, from_env
from . import SGLANG_DIFFUSION_WORKER, SGLANG_LLM_WORKER

_ATTACHED = "_sgl_shapeprof"
_depth = threading.local()


def llm_phase(batch: Any = None, forward_batch: Any = None) -> Optional[str]:
    """'extend', 'decode', 'idle', ... from the batch's ForwardMode."""
    for obj in (batch, forward_batch):
        mode = getattr(obj, "forward_mode", None)
        if mode is not None:
            name = getattr(mode, "name", None) or str(mode)
            return name.lower()
    return None


def llm_tp_rank(worker: Any) -> Optional[int]:
    value = getattr(worker, "tp_rank", None)
    if isinstance(value, int):
        return value
    try:  # SGLang 0.5.2x keeps parallel state in runtime_context
        from sglang.srt.runtime_context import get_parallel
        return int(get_parallel().tp_rank)
    except Exception:
        pass
    runner = getattr(worker, "model_runner", None)
    value = getattr(runner, "tp_rank", None)
    return value if isinstance(value, int) else None


def profile_calls(fn: Callable, profiler: ShapeProfiler, phase_of: Callable[..., Optional[str]]) -> Callable:
    """fn, with each outermost call made one forward pass."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(_depth, "n", 0)
        if depth:  # a forward inside a forward: one pass
            return fn(*args, **kwargs)
        try:
            phase = phase_of(*args, **kwargs)
        except Exception:
            phase = None
        _depth.n = 1
        profiler.start_forward_pass(phase)
        try:
            return fn(*args, **kwargs)
        finally:
            profiler.end_forward_pass()
            _depth.n = 0
    wrapper.__sgl_shapeprof_wrapped__ = True
    return wrapper


def _attach(worker: Any, method: str, rank: Optional[int], dedupe_default: bool,
            phase_of: Callable[..., Optional[str]]) -> Optional[ShapeProfiler]:
    # The instance's own dict: worker classes may answer any attribute.
    attached = vars(worker).get(_ATTACHED)
    if attached is not None:  # patched and zero-edit both
        return attached
    try:
        profiler = from_env(rank=rank, dedupe_default=dedupe_default)
        if profiler is None:
            return None
        bound = getattr(worker, method)
        setattr(worker, method, profile_calls(bound, profiler, phase_of))
        setattr(worker, _ATTACHED, profiler)
        return profiler
    except Exception as e:  # never stop the server
        _say(f"cannot attach to {type(worker).__name__}: {e}; profiling is off")
        return None


def attach_llm_worker(worker: Any) -> Optional[ShapeProfiler]:
    """For sglang.srt.managers.tp_worker.TpModelWorker (call at the end of
    __init__). Draft workers' passes are labelled 'draft_<mode>'."""
    draft = bool(getattr(worker, "is_draft_worker", False))

    def phase_of(batch=None, forward_batch=None, *args, **kwargs):
        phase = llm_phase(batch, forward_batch)
        return f"draft_{phase}" if draft and phase else phase

    return _attach(worker, "forward_batch_generation", llm_tp_rank(worker), False, phase_of)


def attach_diffusion_worker(worker: Any) -> Optional[ShapeProfiler]:
    """For sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker (call at
    the end of __init__). Each request is a pass, 'warmup' or 'generate'."""
    def phase_of(batch=None, *args, **kwargs):
        reqs = batch if isinstance(batch, (list, tuple)) else [batch]
        warm = any(getattr(r, "is_warmup", False) for r in reqs if r is not None)
        return "warmup" if warm else "generate"

    rank = getattr(worker, "rank", None)
    return _attach(worker, "execute_forward", rank if isinstance(rank, int) else None, True, phase_of)


def _wrap_init(cls: type, attach: Callable[[Any], Any]) -> None:
    init = cls.__init__
    if getattr(init, "__sgl_shapeprof_wrapped__", False):
        return

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        attach(self)
    __init__.__sgl_shapeprof_wrapped__ = True
    cls.__init__ = __init__


def patch_llm_module(module: Any) -> None:
    _wrap_init(module.TpModelWorker, attach_llm_worker)


def patch_diffusion_module(module: Any) -> None:
    _wrap_init(module.GPUWorker, attach_diffusion_worker)


TARGETS = {SGLANG_LLM_WORKER: patch_llm_module, SGLANG_DIFFUSION_WORKER: patch_diffusion_module}
