"""SGLang worker wrappers.

Two ways in, both doing nothing unless SGLANG_PROFILE_SHAPES=1:

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
"""
from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable, Optional

from ..profiler import ShapeProfiler, _say, from_env
from . import (SGLANG_DIFFUSION_WORKER, SGLANG_HTTP_SERVER, SGLANG_LLM_WORKER, SGLANG_PROFILER_MANAGER,
               SGLANG_TOKENIZER_CONTROL)

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


# ---- /start_profile with "SHAPES" -----------------------------------------
# SGLang's runtime profiling API reaches each TP rank's scheduler as a
# ProfileReq, handled by SchedulerProfilerManager._profile. An unknown
# activity is kept and ignored there, so "SHAPES" is taken out here and
# becomes a request to this process's armed profiler; the other activities
# (CPU, GPU, MEM, ...) go on to SGLang's torch profiler over the same steps.
SHAPES = "SHAPES"


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
        raise RequestError("SHAPES: this server was not started with SGLANG_PROFILE_SHAPES=on_request, "
                           "so it cannot record on request")
    armed = _armed()
    if armed is None:
        return f"SHAPES: rank {rank}: not profiled (SGLANG_PROFILE_SHAPES_RANK)"
    out_dir = os.path.expanduser(req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp"))
    os.makedirs(out_dir, exist_ok=True)
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
_REPLY = "_sgl_shapeprof_reply"


def patch_tokenizer_control_module(module: Any) -> None:
    cls = module.TokenizerControlMixin
    execute = cls._execute_profile
    if getattr(execute, "__sgl_shapeprof_wrapped__", False):
        return

    @functools.wraps(execute)
    async def _execute_profile(self, req):
        result = (await self.profile_communicator(req))[0]
        message = str(getattr(result, "message", "") or "")
        if SHAPES + ":" in message:
            setattr(self, _REPLY, (bool(result.success), message))
        if not result.success:
            raise RuntimeError(result.message)
        return result
    _execute_profile.__sgl_shapeprof_wrapped__ = True
    cls._execute_profile = _execute_profile


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


TARGETS = {SGLANG_LLM_WORKER: patch_llm_module, SGLANG_DIFFUSION_WORKER: patch_diffusion_module,
           SGLANG_PROFILER_MANAGER: patch_profiler_manager_module,
           SGLANG_TOKENIZER_CONTROL: patch_tokenizer_control_module,
           SGLANG_HTTP_SERVER: patch_http_server_module}
