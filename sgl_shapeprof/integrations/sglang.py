"""SGLang worker wrappers.

Two ways in, both doing nothing unless SGLANG_PROFILE_SHAPES=1:

- the patches in patches/ add to each worker's __init__ (3-5 lines)::

      if os.environ.get("SGLANG_PROFILE_SHAPES") == "1":
          from sgl_shapeprof.integrations.sglang import attach_llm_worker
          attach_llm_worker(self)

- zero-edit mode: the package's start-up hook (sgl_shapeprof_autohook.pth)
  calls install_worker_patcher(), which does the same when SGLang's worker
  modules are imported.

attach_*_worker() creates the profiler from the env vars once per process
(LLM: dedupe off by default; diffusion: on), with the worker's rank, and wraps
the worker's forward method so that each call is one forward pass, labelled
with its phase (the batch's forward mode: extend, decode, idle, ...).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ..profiler import ShapeProfiler, _say, from_env
from . import SGLANG_DIFFUSION_WORKER, SGLANG_LLM_WORKER

_ATTACHED = "_sgl_shapeprof"


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


def _reopen_for(result: Any, profiler: ShapeProfiler) -> None:
    """SGLang's overlap scheduler may sample a batch after its forward
    returned (result.delay_sample_func, called before the next batch's
    forward): those ops belong to the pass, so the call reopens it."""
    sample = getattr(result, "delay_sample_func", None)
    if not callable(sample) or getattr(sample, "__sgl_shapeprof_wrapped__", False):
        return

    @functools.wraps(sample)
    def sample_in_pass(*args, **kwargs):
        profiler.reopen_forward_pass()
        try:
            return sample(*args, **kwargs)
        finally:
            profiler.end_forward_pass()
    sample_in_pass.__sgl_shapeprof_wrapped__ = True
    try:
        result.delay_sample_func = sample_in_pass
    except Exception:  # a result we cannot change: sampled unprofiled
        pass


def _phase(phase_of: Callable[..., Optional[str]], args, kwargs) -> Optional[str]:
    try:
        return phase_of(*args, **kwargs)
    except Exception:
        return None


def profile_calls(fn: Callable, profiler: ShapeProfiler, phase_of: Callable[..., Optional[str]]) -> Callable:
    """fn, with each call made one forward pass (a forward inside a forward
    is part of the outer pass: the profiler nests passes itself)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        profiler.start_forward_pass(_phase(phase_of, args, kwargs))
        try:
            result = fn(*args, **kwargs)
        finally:
            profiler.end_forward_pass()
        _reopen_for(result, profiler)
        return result
    wrapper.__sgl_shapeprof_wrapped__ = True
    return wrapper


def _batch_len(batch=None, *args, **kwargs) -> Optional[int]:
    return len(batch) if isinstance(batch, (list, tuple)) else None


def profile_yields(fn: Callable, profiler: ShapeProfiler, phase_of: Callable[..., Optional[str]],
                   count_of: Callable[..., Optional[int]] = _batch_len) -> Callable:
    """fn, a generator function whose work runs as it is iterated: the work
    up to each item it yields is one forward pass. count_of(*args) is how
    many items it yields (one per request), when known: the work after the
    last one (up to StopIteration) then goes into the last item's pass
    instead of a pass of its own."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        phase = _phase(phase_of, args, kwargs)
        try:
            expected = count_of(*args, **kwargs)
        except Exception:
            expected = None
        items = fn(*args, **kwargs)
        done = 0
        while True:
            if expected is not None and done >= expected > 0:
                profiler.reopen_forward_pass()
            else:
                profiler.start_forward_pass(phase)
            try:
                item = next(items)
            except StopIteration:
                return
            finally:
                profiler.end_forward_pass()
            done += 1
            yield item
    wrapper.__sgl_shapeprof_wrapped__ = True
    return wrapper


def _attach(worker: Any, methods: dict, rank: Optional[int], dedupe_default: bool,
            phase_of: Callable[..., Optional[str]]) -> Optional[ShapeProfiler]:
    """methods: {name: profile_calls or profile_yields}; absent ones are skipped."""
    # The instance's own dict: worker classes may answer any attribute.
    attached = vars(worker).get(_ATTACHED)
    if attached is not None:  # patched and zero-edit both
        return attached
    try:
        profiler = from_env(rank=rank, dedupe_default=dedupe_default)
        if profiler is None:
            return None
        for name, wrap in methods.items():
            bound = getattr(worker, name, None)
            if callable(bound):
                setattr(worker, name, wrap(bound, profiler, phase_of))
        setattr(worker, _ATTACHED, profiler)
        return profiler
    except Exception as e:  # never stop the server
        _say(f"cannot attach to {type(worker).__name__}: {e}; profiling is off")
        return None


# Every way SGLang 0.5.23 runs a model forward on a TpModelWorker: generation
# (also speculative verify: batch None, forward_batch given), PD-multiplexed
# split prefill (--enable-pdmux), and embedding/reward models.
LLM_FORWARDS = {"forward_batch_generation": profile_calls,
                "forward_batch_split_prefill": profile_calls,
                "forward_batch_embedding": profile_calls}
# GPUWorker (CPUWorker on CPU): one request or group; and the generator that
# yields one output per request (grouped AR + per-request DiT, multi-output).
DIFFUSION_FORWARDS = {"execute_forward": profile_calls,
                      "execute_forward_sequentially": profile_yields}


def attach_llm_worker(worker: Any) -> Optional[ShapeProfiler]:
    """For sglang.srt.managers.tp_worker.TpModelWorker (call at the end of
    __init__). Draft workers' passes are labelled 'draft_<mode>'."""
    draft = bool(getattr(worker, "is_draft_worker", False))

    def phase_of(batch=None, forward_batch=None, *args, **kwargs):
        phase = llm_phase(batch, forward_batch)
        return f"draft_{phase}" if draft and phase else phase

    return _attach(worker, LLM_FORWARDS, llm_tp_rank(worker), False, phase_of)


def is_warmup_request(req: Any) -> bool:
    """As GPUWorker decides: Req.is_warmup, or the torch.compile pre-warm
    prompts marked extra["server_internal_prewarm"]."""
    if req is None:
        return False
    if getattr(req, "is_warmup", False):
        return True
    extra = getattr(req, "extra", None)
    return bool(isinstance(extra, dict) and extra.get("server_internal_prewarm"))


def attach_diffusion_worker(worker: Any) -> Optional[ShapeProfiler]:
    """For sglang.multimodal_gen.runtime.managers.gpu_worker.GPUWorker (call at
    the end of __init__). Each request is a pass, 'warmup' or 'generate'."""
    def phase_of(batch=None, *args, **kwargs):
        reqs = batch if isinstance(batch, (list, tuple)) else [batch]
        return "warmup" if any(is_warmup_request(r) for r in reqs) else "generate"

    rank = getattr(worker, "rank", None)
    return _attach(worker, DIFFUSION_FORWARDS, rank if isinstance(rank, int) else None, True, phase_of)


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
