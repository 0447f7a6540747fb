"""SGLang's workers: each forward call one pass, labelled with its phase.

attach_*_worker() creates the profiler from the env vars once per process
(LLM: dedupe off by default; diffusion: on), with the worker's rank, and wraps
the worker's forward method so that each call is one forward pass, labelled
with its phase (the batch's forward mode: extend, decode, idle, ...).
patch_*_module() wraps a worker class's __init__ to do so: the start-up hook
(startup_hook.py) calls them when SGLang imports its worker modules.

Custom ops: while a logged pass or capture is open, SGLang's register_custom_op
ops take the dispatcher on the logged thread, so that they are recorded (see
"SGLang's custom ops" below).
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any, Callable, Optional

from ... import thread_logging
from ...on_import import is_ours, mark
from ...recording.messages import say_once
from ...recording.profiler import ShapeProfiler
from ...records.worker import ROLES, Worker
from .seam import CUSTOM_OP as SGLANG_CUSTOM_OP
from ..passes import attach, call_quietly, wrap_init

def llm_phase(batch: Any = None, forward_batch: Any = None) -> Optional[str]:
    """'extend', 'decode', 'idle', ... from the batch's ForwardMode."""
    for obj in (batch, forward_batch):
        mode = getattr(obj, "forward_mode", None)
        if mode is not None:
            name = getattr(mode, "name", None) or str(mode)
            return name.lower()
    return None


def llm_identity(worker: Any) -> Optional[Worker]:
    """This worker's place in the deployment, from SGLang's own parallel
    state (sglang.srt.runtime_context.get_parallel(), as SGLang's profiler
    names its traces): TP, PP, DP (its replicas times attention-DP groups:
    num_dp_ranks) and MoE EP ranks and sizes, attention DP where it is on,
    and the disaggregation role (get_disagg().disaggregation_mode).
    None when SGLang's state cannot be read (from_env then uses the TP rank
    alone)."""
    try:
        from sglang.srt.runtime_context import get_parallel
        par = get_parallel()
    except Exception:
        return None

    def read(name: str, default: Optional[int]) -> Optional[int]:
        try:  # unpublished fields raise
            value = getattr(par, name)
        except Exception:
            return default
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else default
    tp_rank = read("tp_rank", None)
    if tp_rank is None:
        return None
    dp_size = read("num_dp_ranks", 1) or 1
    attn_dp = read("attn_dp_size", None)
    try:  # disaggregated serving: "prefill" or "decode" ("null" when not)
        from sglang.srt.runtime_context import get_disagg
        role = str(get_disagg().disaggregation_mode)
    except Exception:
        role = None
    return Worker(tp_rank=tp_rank, tp_size=read("tp_size", 1) or 1,
                  pp_rank=read("pp_rank", 0) or 0, pp_size=read("pp_size", 1) or 1,
                  dp_rank=(read("dp_rank", 0) or 0) if dp_size > 1 else 0, dp_size=dp_size,
                  ep_rank=read("moe_ep_rank", 0) or 0, ep_size=read("moe_ep_size", 1) or 1,
                  attn_dp_rank=read("attn_dp_rank", None) if attn_dp and attn_dp > 1 else None,
                  attn_dp_size=attn_dp if attn_dp and attn_dp > 1 else None,
                  role=role if role in ROLES else None, source="sglang get_parallel()")


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


# ---- SGLang's custom ops -------------------------------------------------------
# register_custom_op (sglang.srt.utils.custom_op) calls an op's Python function
# itself, skipping the dispatcher, for plain CUDA tensors under no_grad, unless
# one of its gates fires (compiling, a dispatch or function mode, torch's
# profiler, grad). Our fallback is in the dispatcher: on a GPU it would never
# see SGLang's fused kernels (MoE experts, activations, KV-cache writes, norms).
# While a logged pass or capture of ours is open (any thread), the "profiler
# on" gate also answers "this thread is logged", so those calls go through the
# dispatcher as under torch.profiler or a TorchDispatchMode; when none is open
# the gate is SGLang's own function again, so its fast path is untouched.
_CUSTOM_OP_GATE = "_profiling"
_gate_lock = threading.Lock()
_gate_users = 0                     # logged passes and captures open, all threads
_gate_installed: Any = None         # (module, SGLang's gate, ours) while installed
_gate_failed = False                # said once; SGLang's own gate from then on


def _route_custom_ops() -> bool:
    """Called when a logged pass or capture starts; True if
    _unroute_custom_ops() must follow at its end."""
    global _gate_users, _gate_installed, _gate_failed
    if _gate_failed:
        return False
    try:
        with _gate_lock:
            # not loaded yet (or an SGLang without the direct path): nothing to route
            module = sys.modules.get(SGLANG_CUSTOM_OP) if _gate_installed is None else None
            if module is not None and hasattr(module, "_call_directly_in_eager"):
                original = getattr(module, _CUSTOM_OP_GATE, None)
                if not callable(original):
                    raise AttributeError(f"{SGLANG_CUSTOM_OP} has no {_CUSTOM_OP_GATE}()")

                def gate() -> bool:
                    return original() or thread_logging()
                setattr(module, _CUSTOM_OP_GATE, gate)
                _gate_installed = (module, original, gate)
            _gate_users += 1
        return True
    except Exception as e:
        _gate_failed = True
        say_once("custom-ops", f"cannot route SGLang's custom ops through the dispatcher ({type(e).__name__}: "
                                f"{e}); those it calls directly (on CUDA) are not recorded")
        return False


def _unroute_custom_ops() -> None:
    global _gate_users, _gate_installed
    with _gate_lock:
        _gate_users -= 1
        if _gate_users == 0 and _gate_installed is not None:
            module, original, gate = _gate_installed
            _gate_installed = None
            if getattr(module, _CUSTOM_OP_GATE, None) is gate:  # not replaced since by someone else
                setattr(module, _CUSTOM_OP_GATE, original)


@contextlib.contextmanager
def custom_ops_recorded(logged: bool = True):
    """with custom_ops_recorded(): SGLang's register_custom_op ops called
    inside are recorded like any operator, in passes of your own (the SGLang
    integration does this around every logged pass it opens)."""
    routed = logged and _route_custom_ops()
    try:
        yield
    finally:
        if routed:
            _unroute_custom_ops()


def _reopen_for(result: Any, profiler: ShapeProfiler) -> None:
    """SGLang's overlap scheduler may sample a batch after its forward
    returned (result.delay_sample_func, called before the next batch's
    forward): those ops belong to the pass, so the call reopens it."""
    sample = getattr(result, "delay_sample_func", None)
    if not callable(sample) or is_ours(sample):
        return

    @functools.wraps(sample)
    def sample_in_pass(*args, **kwargs):
        logged = profiler.reopen_forward_pass()
        try:
            with custom_ops_recorded(logged):
                return sample(*args, **kwargs)
        finally:
            profiler.end_forward_pass()
    mark(sample_in_pass, sample)
    try:
        result.delay_sample_func = sample_in_pass
    except Exception:  # a result we cannot change: sampled unprofiled
        pass


def llm_batch_size(batch: Any = None, forward_batch: Any = None, *args, **kwargs) -> Optional[int]:
    """The requests in the batch: ScheduleBatch.batch_size(), else the
    ForwardBatch's batch_size (speculative verify passes only the latter)."""
    size = getattr(batch, "batch_size", None)
    if callable(size):
        size = size()
    if not isinstance(size, int):
        size = getattr(forward_batch, "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def profile_calls(fn: Callable, profiler: ShapeProfiler, phase_of: Callable[..., Optional[str]],
                  size_of: Optional[Callable[..., Optional[int]]] = None) -> Callable:
    """fn, with each call made one forward pass (a forward inside a forward
    is part of the outer pass: the profiler nests passes itself); size_of
    gives the pass's batch size (requests), counted if it runs eagerly."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # a with-block pass: it nests (a plain start would end the outer pass)
        with profiler.forward_pass(call_quietly(phase_of, args, kwargs)) as logged:
            if logged and size_of is not None:
                size = call_quietly(size_of, args, kwargs)
                if size is not None:
                    profiler.pass_size(size)
            with custom_ops_recorded(logged):
                result = fn(*args, **kwargs)
        _reopen_for(result, profiler)
        return result
    mark(wrapper, fn)
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
        phase = call_quietly(phase_of, args, kwargs)
        try:
            expected = count_of(*args, **kwargs)
        except Exception:
            expected = None
        items = fn(*args, **kwargs)
        done = 0
        while True:
            with contextlib.ExitStack() as stack:
                if expected is not None and done >= expected > 0:
                    logged = profiler.reopen_forward_pass()
                    stack.callback(profiler.end_forward_pass)
                else:  # a with-block pass: it nests
                    logged = stack.enter_context(profiler.forward_pass(phase))
                stack.enter_context(custom_ops_recorded(logged))
                try:
                    item = next(items)
                except StopIteration:
                    return
            done += 1
            yield item
    mark(wrapper, fn)
    return wrapper


# Every way SGLang 0.5.23 runs a model forward on a TpModelWorker: generation
# (also speculative verify: batch None, forward_batch given), PD-multiplexed
# split prefill (--enable-pdmux), and embedding/reward models.
LLM_FORWARDS = {"forward_batch_generation": functools.partial(profile_calls, size_of=llm_batch_size),
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

    identity = llm_identity(worker)
    rank = identity.tp_rank if identity is not None else llm_tp_rank(worker)
    return attach(worker, LLM_FORWARDS, rank, False, phase_of, identity)


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
    return attach(worker, DIFFUSION_FORWARDS, rank if isinstance(rank, int) else None, True, phase_of)


def patch_llm_module(module: Any) -> None:
    wrap_init(module.TpModelWorker, attach_llm_worker)


def patch_diffusion_module(module: Any) -> None:
    wrap_init(module.GPUWorker, attach_diffusion_worker)
