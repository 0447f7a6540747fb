"""SGLang worker wrappers.

Two ways in, both doing nothing unless SGLANG_PROFILE_SHAPES=1 (or
on_request), except refusing /start_profile requests for SHAPES on a server
that is not armed (see patch_tokenizer_control_module):

- the patches in patches/ add to each worker's __init__ (3-5 lines)::

      if os.environ.get("SGLANG_PROFILE_SHAPES") in ("1", "on_request"):
          from sgl_shapeprof.integrations.sglang import attach_llm_worker
          attach_llm_worker(self)

- zero-edit mode: the package's start-up hook (sgl_shapeprof_autohook.pth)
  calls install_worker_patcher(), which does the same when SGLang's worker
  modules are imported.

attach_*_worker() creates the profiler from the env vars once per process
(LLM: dedupe off by default; diffusion: on), with the worker's rank, and wraps
the worker's forward method so that each call is one forward pass, labelled
with its phase (the batch's forward mode: extend, decode, idle, ...).

CUDA graphs: SGLang's graph backends (full, breakable) are wrapped in place
so that each graph's capture run is recorded as a capture and each replay is
counted (see "CUDA graphs" below).

Custom ops: while a logged pass or capture is open, SGLang's register_custom_op
ops take the dispatcher on the logged thread, so that they are recorded (see
"SGLang's custom ops" below).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import sys
import threading
from typing import Any, Callable, Optional

from ..profiler import ShapeProfiler, _say, _say_once, from_env
from . import (SGLANG_BREAKABLE_GRAPH_BACKEND, SGLANG_CUSTOM_OP, SGLANG_DIFFUSION_WORKER, SGLANG_FULL_GRAPH_BACKEND,
               SGLANG_HTTP_SERVER, SGLANG_LLM_WORKER, SGLANG_PROFILER_MANAGER, SGLANG_TOKENIZER_CONTROL)

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
                from .. import thread_logging

                def gate() -> bool:
                    return original() or thread_logging()
                setattr(module, _CUSTOM_OP_GATE, gate)
                _gate_installed = (module, original, gate)
            _gate_users += 1
        return True
    except Exception as e:
        _gate_failed = True
        _say_once("custom-ops", f"cannot route SGLang's custom ops through the dispatcher ({type(e).__name__}: "
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
    if not callable(sample) or getattr(sample, "__sgl_shapeprof_wrapped__", False):
        return

    @functools.wraps(sample)
    def sample_in_pass(*args, **kwargs):
        logged = profiler.reopen_forward_pass()
        try:
            with custom_ops_recorded(logged):
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
        # a with-block pass: it nests (a plain start would end the outer pass)
        with profiler.forward_pass(_phase(phase_of, args, kwargs)) as logged:
            with custom_ops_recorded(logged):
                result = fn(*args, **kwargs)
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


# ---- /start_profile with "SHAPES" -----------------------------------------
# SGLang's runtime profiling API reaches each TP rank's scheduler as a
# ProfileReq, handled by SchedulerProfilerManager._profile. An unknown
# activity is kept and ignored there, so "SHAPES" is taken out here and
# becomes a request to this process's armed profiler; the other activities
# (CPU, GPU, MEM, ...) go on to SGLang's torch profiler over the same steps.
SHAPES = "SHAPES"
NOT_ARMED = ("SHAPES: this server was not started with SGLANG_PROFILE_SHAPES=on_request, "
             "so it cannot record on request")


def _server_armed() -> bool:
    from ..config import ENV_ENABLE, ON_REQUEST
    return os.environ.get(ENV_ENABLE, "").strip() == ON_REQUEST


def _armed() -> Any:
    """This process's OnRequestProfiler (SGLANG_PROFILE_SHAPES=on_request and
    a worker attached), or None."""
    from .. import profiler as prof_mod
    from ..on_request import OnRequestProfiler
    p = prof_mod._env_profiler
    return p if isinstance(p, OnRequestProfiler) and not p.closed else None


def _stage_phases(stages: Any) -> Optional[list]:
    if not stages:
        return None
    return [str(s).lower() for s in stages]


def shapes_request(manager: Any, req: Any, rank: Optional[int]) -> str:
    """Starts a SHAPES request on this rank; returns what it did, for the
    reply. Raises RequestError with the reason."""
    from ..config import read_env
    from ..on_request import RequestError
    cfg = read_env()
    if not cfg.on_request:
        raise RequestError(NOT_ARMED)
    armed = _armed()
    if armed is None:
        return f"SHAPES: rank {rank}: not profiled (SGLANG_PROFILE_SHAPES_RANK)"
    chosen = "output_dir" if req.output_dir else (
        f"SGLANG_TORCH_PROFILER_DIR={os.environ['SGLANG_TORCH_PROFILER_DIR']!r}"
        if os.environ.get("SGLANG_TORCH_PROFILER_DIR") else "the default")
    out_dir = os.path.expanduser(req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise RequestError(f"{SHAPES}: {chosen}: cannot create {out_dir}: {e.strerror or e}") from None
    prefix = f"{req.profile_prefix}-" if getattr(req, "profile_prefix", None) else ""
    name = f"{prefix}{req.profile_id or 'shapes'}-TP-{armed.rank}.shapes.jsonl"
    skip = 0
    if req.start_step:
        try:
            skip = max(0, int(req.start_step) - int(manager.get_forward_ct()) - 1)
        except Exception:
            skip = 0
    n = int(req.num_steps or 0)
    by_stage = bool(getattr(req, "profile_by_stage", False))
    phases = _stage_phases(getattr(req, "profile_stages", None))
    if by_stage and not n:
        raise RequestError("SHAPES: profile_by_stage needs num_steps")
    path = armed.request(passes=n, phases=phases or (["extend", "decode"] if by_stage else None),
                         output=os.path.join(out_dir, name), skip=skip, per_phase=by_stage)
    what = f"{n} passes" if n and not by_stage else f"{n} passes per stage" if n else "passes until /stop_profile"
    return f"SHAPES: rank {armed.rank} records {what} into {path}"


def _gather(manager: Any, ok: bool, text: str):
    """(all ranks ok, every rank's line): the TP ranks handle a ProfileReq
    together (SGLang's own barrier there relies on it), and only TP 0's
    answer reaches the client."""
    try:
        import torch.distributed as dist
        group = getattr(manager, "dp_tp_cpu_group", None)
        if group is None or not dist.is_initialized() or dist.get_world_size(group) == 1:
            return ok, text
        pairs: list = [None] * dist.get_world_size(group)
        dist.all_gather_object(pairs, (ok, text), group=group)
        return all(p[0] for p in pairs), "\n".join(str(p[1]) for p in pairs)
    except Exception:
        return ok, text


def _with_shapes(res: Any, text: str) -> Any:
    """SGLang's own answer, with the SHAPES lines after it."""
    if res is not None:
        res.message = f"{res.message} {text}".strip()
    return res


def patch_profiler_manager_module(module: Any) -> None:
    cls = module.SchedulerProfilerManager
    profile = cls._profile
    if getattr(profile, "__sgl_shapeprof_wrapped__", False):
        return
    from sglang.srt.managers.io_struct import ProfileReqOutput, ProfileReqType

    @functools.wraps(profile)
    def _profile(self, recv_req):
        from ..on_request import RequestError
        acts = list(getattr(recv_req, "activities", None) or [])
        if recv_req.req_type == ProfileReqType.START_PROFILE and SHAPES in acts:
            # every rank takes this branch (it depends on the request only)
            rank = llm_tp_rank(None)
            try:
                ok, text = True, shapes_request(self, recv_req, rank)
            except (RequestError, ValueError, OSError) as e:
                ok, text = False, str(e) if str(e).startswith(SHAPES) else f"{SHAPES}: rank {rank}: {e}"
            log = logging.getLogger("sgl_shapeprof")
            (log.info if ok else log.warning)(text)
            ok, text = _gather(self, ok, text)
            if not ok:
                return ProfileReqOutput(success=False, message=text)
            rest = [a for a in acts if a != SHAPES]
            if not rest:  # only SHAPES: SGLang's torch profiler stays off
                return ProfileReqOutput(success=True, message=text)
            recv_req.activities = rest
            try:
                res = profile(self, recv_req)
            except BaseException:  # SGLang's own profiler refused: ours does not run alone
                armed = _armed()
                if armed is not None:
                    armed.stop()
                raise
            if res is not None and not getattr(res, "success", True):
                armed = _armed()
                if armed is not None:
                    armed.stop()
                return res
            return _with_shapes(res, text)
        if recv_req.req_type == ProfileReqType.STOP_PROFILE:
            armed = _armed()
            if armed is not None and armed.status()["state"] in ("recording", "pending"):
                path = armed.stop()
                text = f"SHAPES: rank {armed.rank} stopped; records in {path}"
                logging.getLogger("sgl_shapeprof").info(text)
                try:  # SGLang's own profiler, if it runs too (v1 or SGLANG_PROFILE_V2)
                    res = profile(self, recv_req)
                except Exception:
                    res = None
                if res is None or not getattr(res, "success", False):
                    return ProfileReqOutput(success=True, message=text)
                return _with_shapes(res, text)
        return profile(self, recv_req)
    _profile.__sgl_shapeprof_wrapped__ = True
    cls._profile = _profile


# The HTTP reply to /start_profile is a fixed "Start profiling." and a failed
# request a bare 500: the tokenizer keeps the schedulers' SHAPES answer (every
# rank's line), and a middleware puts it into the reply.
#
# The tokenizer is patched on every server with sgl_shapeprof installed, armed
# or not (the start-up hook's finder; the patch's lines): SGLang keeps an
# activity it does not know and answers "Start profiling.", so a server not
# started with on_request would take a SHAPES request and record nothing. It
# is refused there, before any scheduler sees it.
_REPLY = "_sgl_shapeprof_reply"


def _never_raises(patch: Callable[[Any], None]) -> Callable[[Any], None]:
    """A patch of a module every server imports: a failure leaves SGLang's
    own behaviour (said once), never a server that does not start."""
    @functools.wraps(patch)
    def safe(module: Any) -> None:
        try:
            patch(module)
        except Exception as e:
            _say_once(f"patch-{patch.__name__}", f"cannot patch {getattr(module, '__name__', module)} "
                                                 f"({type(e).__name__}: {e}); /start_profile answers as "
                                                 f"SGLang's own")
    return safe


def _not_armed_error() -> type:
    """A RuntimeError, as SGLang fails a profile request (what
    Engine.start_profile raises), that is also FastAPI's HTTPException: the
    HTTP reply is a 400 with the reason, in SGLang's error JSON."""
    try:
        from fastapi import HTTPException
    except ImportError:
        return RuntimeError

    class ShapesNotArmed(HTTPException, RuntimeError):
        def __init__(self, message: str):
            super().__init__(status_code=400, detail=message)

        def __str__(self) -> str:
            return str(self.detail)
    return ShapesNotArmed


@_never_raises
def patch_tokenizer_control_module(module: Any) -> None:
    cls = module.TokenizerControlMixin
    execute = cls._execute_profile
    if getattr(execute, "__sgl_shapeprof_wrapped__", False):
        return
    from sglang.srt.managers.io_struct import ProfileReqType
    not_armed = _not_armed_error()

    @functools.wraps(execute)
    async def _execute_profile(self, req):
        if not _server_armed():
            if getattr(req, "req_type", None) == ProfileReqType.START_PROFILE and \
                    SHAPES in (getattr(req, "activities", None) or []):
                logging.getLogger("sgl_shapeprof").warning(NOT_ARMED)
                raise not_armed(NOT_ARMED)
            return await execute(self, req)   # SGLang's own
        result = (await self.profile_communicator(req))[0]
        message = str(getattr(result, "message", "") or "")
        if SHAPES + ":" in message:
            setattr(self, _REPLY, (bool(result.success), message))
        if not result.success:
            raise RuntimeError(result.message)
        return result
    _execute_profile.__sgl_shapeprof_wrapped__ = True
    cls._execute_profile = _execute_profile


@_never_raises
def patch_http_server_module(module: Any) -> None:
    app = getattr(module, "app", None)
    if app is None or getattr(app, "_sgl_shapeprof_reply", False):
        return
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import Response

    async def shapes_reply(request, call_next):
        if request.url.path not in ("/start_profile", "/stop_profile"):
            return await call_next(request)
        state = getattr(module, "_global_state", None)
        tm = getattr(state, "tokenizer_manager", None)
        if tm is not None:
            setattr(tm, _REPLY, None)
        error: Optional[BaseException] = None
        try:
            response = await call_next(request)
        except RuntimeError as e:  # a failed ProfileReq
            response, error = None, e
        reply = getattr(tm, _REPLY, None) if tm is not None else None
        if reply is None:
            if error is not None:
                raise error
            return response
        ok, message = reply
        setattr(tm, _REPLY, None)
        if not ok:  # a clear error, not a bare 500
            return Response(message + "\n", status_code=400, media_type="text/plain")
        body = b""
        if response is not None and response.status_code == 200:
            async for chunk in response.body_iterator:
                body += chunk
        return Response(body.decode("utf-8", "replace") + message + "\n", status_code=200,
                        media_type="text/plain")
    app.add_middleware(BaseHTTPMiddleware, dispatch=shapes_reply)
    app._sgl_shapeprof_reply = True


# ---- CUDA graphs -------------------------------------------------------------
# SGLang captures its graphs at start-up, before any request: decode graphs
# one per padded batch size (DecodeCudaGraphRunner, full backend), prefill
# graphs one per token bucket (PrefillCudaGraphRunner, breakable backend by
# default on CUDA). A replay runs the captured kernels without the dispatcher,
# so the calls of a graph are seen once, in the run that captures it:
# backend.capture_one(shape_key, forward_fn) runs forward_fn twice to warm up
# (not recorded: no replay repeats them) and once while the stream captures
# (recorded with profiler.capture_graph). backend.replay(shape_key) counts a
# replay (profiler.graph_replayed: one lock, no per-operator work).
#
# Graph keys (the records' "graph", the summary's "graphs"): family *
# GRAPH_FAMILY + size, size being the shape key's size (padded batch size;
# tokens for prefill and ragged verify). Family 0: the "decode" graphs of the
# default variant, so a decode graph's key is its batch size. Every other
# family (prefill graphs, draft and verify graphs, LoRA/attention/PDMux
# variants, graphs captured again by a new runner) is numbered 1, 2, ... in
# capture order and named once in the log: no key is ever captured twice, so
# a record's count times its graph's replays is always true.
GRAPH_FAMILY = 1_000_000

_graph_families: dict = {}          # (backend, phase, variant, generation) -> family
_graph_captured: set = set()        # keys captured in this process
_graph_backends = itertools.count(1)
_graph_state = threading.local()    # active: a capture run is recorded; paused: in an eager break
_KEYS = "_sgl_shapeprof_graph_keys"  # backend instance: {shape_key: graph key}


def _graph_profiler() -> Any:
    """This process's profiler (the one attach_llm_worker made), or None."""
    from .. import profiler as prof_mod
    p = prof_mod._env_profiler
    return p if p is not None and not p.closed else None


def graph_phase(backend: Any) -> Optional[str]:
    """The phase label of a backend's graphs, as the passes replaying them
    are labelled: the runner's capture mode (draft-extend runners keep theirs
    in forward_mode), 'draft_' first for a draft worker's runner."""
    runner = getattr(backend, "_cuda_graph_runner", None)
    mode = getattr(runner, "forward_mode", None)
    if getattr(mode, "name", None) is None:
        mode = getattr(runner, "capture_forward_mode", None)
    name = getattr(mode, "name", None)
    if not name:
        return None
    phase = name.lower()
    draft = getattr(getattr(runner, "model_runner", None), "is_draft_worker", False)
    return f"draft_{phase}" if draft is True and not phase.startswith("draft") else phase


def graph_key(backend: Any, shape_key: Any, phase: Optional[str]) -> Optional[int]:
    """The key of the graph backend captures for shape_key now (see above);
    None for a size that does not fit (said once)."""
    size = int(getattr(shape_key, "size", shape_key))
    if not 0 <= size < GRAPH_FAMILY:
        _say_once("graph-size", f"a CUDA graph of size {size} is not recorded (sizes up to "
                                f"{GRAPH_FAMILY - 1} fit the graph keys)")
        return None
    variant = tuple(getattr(shape_key, f, None) for f in ("stream_idx", "variant_label", "attention_variant"))
    backend_id = vars(backend).get("_sgl_shapeprof_backend_id")
    if backend_id is None:
        backend_id = next(_graph_backends)
        setattr(backend, "_sgl_shapeprof_backend_id", backend_id)
    generation = 0
    while True:
        family_id = (backend_id, phase, variant, generation)
        family = _graph_families.get(family_id)
        if family is None:
            default = phase == "decode" and variant == (None, None, None)
            family = 0 if default and 0 not in _graph_families.values() else \
                max(_graph_families.values(), default=0) + 1
            _graph_families[family_id] = family
            if family:
                named = ", ".join(f"{f}={v}" for f, v in
                                  zip(("stream_idx", "variant_label", "attention_variant"), variant) if v is not None)
                logging.getLogger("sgl_shapeprof").info(
                    "CUDA graph keys %d + size: %s graphs of %s%s", family * GRAPH_FAMILY, phase,
                    type(backend).__name__, f" ({named})" if named else "")
        key = family * GRAPH_FAMILY + size
        if key not in _graph_captured:
            _graph_captured.add(key)
            vars(backend).setdefault(_KEYS, {})[shape_key] = key
            return key
        generation += 1  # captured before: this is another graph


def _graphs_failed(e: BaseException) -> None:
    _say_once("graphs", f"cannot record SGLang's CUDA graphs ({type(e).__name__}: {e}); "
                        f"they run unrecorded")


@contextlib.contextmanager
def _paused():
    """Nothing logged on this thread inside (a no-op outside logged passes)."""
    from .. import _C
    paused = _C.pause_thread()
    try:
        yield
    finally:
        if paused:
            _C.resume_thread()


def _capture_run(backend: Any, shape_key: Any, forward_fn: Callable) -> Callable:
    """forward_fn as backend.capture_one runs it: the run made while the
    stream captures is the graph's capture; the warm-ups are not recorded."""
    prof = _graph_profiler()
    if prof is None:
        return forward_fn
    device = backend._device_module
    from .. import _C
    phase = graph_phase(backend)
    key = graph_key(backend, shape_key, phase)

    @functools.wraps(forward_fn)
    def run(*args, **kwargs):
        try:
            capturing = bool(device.is_current_stream_capturing())
        except Exception:
            capturing = False
        if not capturing or key is None or _C.thread_enabled():
            # a warm-up; or a capture inside a logged pass, whose calls are
            # not that pass's batch: neither is recorded
            with _paused():
                return forward_fn(*args, **kwargs)
        with prof.capture_graph(key, phase) as logged, custom_ops_recorded(logged):
            _graph_state.active = True
            try:
                return forward_fn(*args, **kwargs)
            finally:
                _graph_state.active = False
                if getattr(_graph_state, "paused", False):
                    _graph_state.paused = False
                    _C.resume_thread()
    return run


def _wrap_graph_backend(cls: type) -> None:
    """cls.capture_one records each graph's capture run; cls.replay counts
    replays. Any failure of ours: SGLang's own behaviour (said once)."""
    capture_one, replay = cls.capture_one, cls.replay
    if getattr(capture_one, "__sgl_shapeprof_wrapped__", False):
        return

    @functools.wraps(capture_one)
    def capture_one_recorded(self, shape_key, forward_fn, *args, **kwargs):
        try:
            run = _capture_run(self, shape_key, forward_fn)
        except Exception as e:
            _graphs_failed(e)
            run = forward_fn
        return capture_one(self, shape_key, run, *args, **kwargs)

    @functools.wraps(replay)
    def replay_counted(self, shape_key, *args, **kwargs):
        out = replay(self, shape_key, *args, **kwargs)
        try:
            key = vars(self).get(_KEYS, {}).get(shape_key)
            prof = _graph_profiler() if key is not None else None
            if prof is not None:
                prof.graph_replayed(key)
        except Exception as e:
            _graphs_failed(e)
        return out

    capture_one_recorded.__sgl_shapeprof_wrapped__ = True
    replay_counted.__sgl_shapeprof_wrapped__ = True
    cls.capture_one, cls.replay = capture_one_recorded, replay_counted


def _wrap_breakable_capture(cls: type) -> None:
    """A breakable graph's eager breaks (@eager_on_graph: attention) run once
    while it is captured, and again at every replay, through the dispatcher:
    they belong to the replaying pass, not to the capture. Logging pauses
    from the end of a captured segment to the start of the next."""
    end, begin = cls._end_current_segment, cls._begin_new_segment
    if getattr(end, "__sgl_shapeprof_wrapped__", False):
        return

    @functools.wraps(end)
    def _end_current_segment(self, *args, **kwargs):
        result = end(self, *args, **kwargs)
        if getattr(_graph_state, "active", False) and not getattr(_graph_state, "paused", False):
            from .. import _C
            _graph_state.paused = bool(_C.pause_thread())
        return result

    @functools.wraps(begin)
    def _begin_new_segment(self, *args, **kwargs):
        if getattr(_graph_state, "paused", False):
            from .. import _C
            _graph_state.paused = False
            _C.resume_thread()
        return begin(self, *args, **kwargs)

    _end_current_segment.__sgl_shapeprof_wrapped__ = True
    _begin_new_segment.__sgl_shapeprof_wrapped__ = True
    cls._end_current_segment, cls._begin_new_segment = _end_current_segment, _begin_new_segment


def patch_full_graph_backend_module(module: Any) -> None:
    _wrap_graph_backend(module.FullCudaGraphBackend)


def patch_breakable_graph_backend_module(module: Any) -> None:
    _wrap_graph_backend(module.BreakableCudaGraphBackend)
    _wrap_breakable_capture(module.BreakableCUDAGraphCapture)


TARGETS = {SGLANG_LLM_WORKER: patch_llm_module, SGLANG_DIFFUSION_WORKER: patch_diffusion_module,
           SGLANG_PROFILER_MANAGER: patch_profiler_manager_module,
           SGLANG_TOKENIZER_CONTROL: patch_tokenizer_control_module,
           SGLANG_HTTP_SERVER: patch_http_server_module,
           SGLANG_FULL_GRAPH_BACKEND: patch_full_graph_backend_module,
           SGLANG_BREAKABLE_GRAPH_BACKEND: patch_breakable_graph_backend_module}
