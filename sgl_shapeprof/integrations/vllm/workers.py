"""vLLM's model runners: each step one pass, labelled with its phase.

A step is the model runner's execute_model(scheduler_output) -- the forward
-- and the sample_tokens() call that follows it (it reopens the step's pass,
as SGLang's delayed sampling does). Every runner goes through these two
methods: V1's GPUModelRunner (the CPU runner inherits them) and Model Runner
V2's. Phases from the SchedulerOutput: 'prefill' when every scheduled
request is prefilling (new, resumed or a further chunk of its prompt),
'decode' when every one decodes (one token, plus its speculative ones),
'mixed' otherwise. Not passes: steps with nothing scheduled, vLLM's own
synthetic warm-up steps (V2's warmup_kernels, request ids '_warmup_...' and
'_v2_mixed_warmup...'), and the profile, dummy and capture runs: V1 calls
the model without execute_model for them, V2 calls execute_model with
dummy_run=True (graph captures are recorded by cuda_graphs.py).

The worker's shutdown closes its runner's profiler before vLLM's own
teardown: vLLM gives a process 5 s to exit before it SIGKILLs it with its
children, and the interpreter's exit (where atexit would close it) comes
after the collectives are torn down.
"""
from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, Optional

from ...on_import import is_ours, mark
from ...records.phases import DECODE, PREFILL
from ...records.worker import Worker
from ..passes import attach, call_quietly, close_attached, wrap_init, wrap_method

MIXED = "mixed"  # a vLLM step of both (records/phases.py has the others)
WARMUP_PREFIXES = ("_warmup_", "_v2_mixed_warmup", "_dummy_req_")
_step = threading.local()  # sizes: the running step's (requests, tokens), for its graph replays


def step_phase(scheduler_output: Any = None, *args, dummy_run: bool = False, **kwargs) -> Optional[str]:
    """'prefill', 'decode' or 'mixed' for a SchedulerOutput; None for a step
    that is not a pass (nothing scheduled, V2's dummy runs, or vLLM's
    synthetic warm-up)."""
    tokens = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
    if not tokens or dummy_run:
        return None
    if all(str(r).startswith(WARMUP_PREFIXES) for r in tokens):
        return None
    new = {r.req_id for r in getattr(scheduler_output, "scheduled_new_reqs", None) or ()}
    cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
    resumed = set(getattr(cached, "resumed_req_ids", None) or ())
    outputs = dict(zip(getattr(cached, "req_ids", None) or (), getattr(cached, "num_output_tokens", None) or ()))
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    kinds = set()
    for req, n in tokens.items():
        decoding = (req not in new and req not in resumed and outputs.get(req, 1) > 0
                    and n <= 1 + len(spec.get(req, ())))
        kinds.add(DECODE if decoding else PREFILL)
    return kinds.pop() if len(kinds) == 1 else MIXED


def step_size(phase: str) -> Optional[int]:
    """What the calling thread's running step really holds, in the unit of
    a graph of this phase's size (cuda_graphs.graph_size_phase): requests
    for decode graphs, scheduled tokens otherwise; None outside a step."""
    sizes = getattr(_step, "sizes", None)
    if sizes is None:
        return None
    return sizes[0] if phase == DECODE else sizes[1]


def _sizes(args: tuple, kwargs: dict) -> Optional[tuple]:
    """(requests, tokens) of execute_model's SchedulerOutput; None if unreadable."""
    try:
        out = args[0] if args else kwargs.get("scheduler_output")
        tokens = out.num_scheduled_tokens
        return len(tokens), sum(int(n) for n in tokens.values())
    except Exception:
        return None


def runner_rank(runner: Any = None) -> Optional[int]:
    """The worker's rank in vLLM's world group (its tensor- and
    pipeline-parallel workers), else None: from_env's own (resolve_rank)."""
    try:
        from vllm.distributed.parallel_state import get_world_group
        return int(get_world_group().rank)
    except Exception:
        return None


def runner_identity(runner: Any = None) -> Optional[Worker]:
    """This worker's place in the deployment, from vLLM's parallel state
    (vllm.distributed.parallel_state's groups: rank_in_group and
    world_size of TP, PP, DP and EP); None when it cannot be read."""
    try:
        from vllm.distributed import parallel_state as ps
    except Exception:
        return None

    def group(getter: str):
        try:
            g = getattr(ps, getter)()
            return int(g.rank_in_group), int(g.world_size)
        except Exception:
            return None
    tp = group("get_tp_group")
    if tp is None:
        return None
    pp = group("get_pp_group") or (0, 1)
    dp = group("get_dp_group") or (0, 1)
    ep = group("get_ep_group") or (0, 1)
    source = "vllm parallel_state"
    replica = independent_replica() if dp[1] == 1 else None
    if replica is not None:
        dp, source = replica, "vllm parallel_state; DP from its parallel_config (independent replicas)"
    return Worker(tp_rank=tp[0], tp_size=tp[1], pp_rank=pp[0], pp_size=pp[1], dp_rank=dp[0], dp_size=dp[1],
                  ep_rank=ep[0], ep_size=ep[1], source=source)


# Data parallel replicas of a dense model are independent engines: vLLM's
# EngineCore sets data_parallel_index to the replica's rank, then makes its
# parallel_config a DP=1 one (reconfigure_for_independent_dp_rank) before it
# starts its workers, so their DP group is of one. The start-up hook wraps
# that method (it runs before vLLM loads its plugins there) to keep the
# replica's rank and the DP size in the environment its workers inherit.
DP_REPLICA = "SHAPEPROF_VLLM_DP_REPLICA"  # "rank/size"


def patch_parallel_config_module(module: Any) -> None:
    cls = getattr(module, "ParallelConfig", None)
    reconfigure = getattr(cls, "reconfigure_for_independent_dp_rank", None)
    if reconfigure is None or is_ours(reconfigure):
        return

    @functools.wraps(reconfigure)
    def reconfigure_for_independent_dp_rank(self, *args, **kwargs):
        # Ray's engine actors call it before they set data_parallel_index:
        # their replicas keep vLLM's own DP=1 identity (and distinct names,
        # a second writer on one name taking a pid name)
        if getattr(self, "data_parallel_backend", None) != "ray":
            try:
                os.environ[DP_REPLICA] = f"{int(self.data_parallel_index)}/{int(self.data_parallel_size)}"
            except Exception:
                pass
        return reconfigure(self, *args, **kwargs)
    mark(reconfigure_for_independent_dp_rank, reconfigure)
    cls.reconfigure_for_independent_dp_rank = reconfigure_for_independent_dp_rank


def independent_replica() -> Optional[tuple]:
    """(rank, size) of this worker's independent DP replica, else None."""
    try:
        rank, size = (int(x) for x in os.environ[DP_REPLICA].split("/"))
    except (KeyError, ValueError):
        return None
    return (rank, size) if 0 <= rank < size and size > 1 else None


class _Steps:
    """One runner's two wrappers, sharing whether its last step was a pass
    (sample_tokens reopens only that one)."""

    def __init__(self):
        self.open = False

    def forward(self, fn: Callable, profiler: Any, phase_of: Callable[..., Optional[str]]) -> Callable:
        @functools.wraps(fn)
        def execute_model(*args, **kwargs):
            phase = call_quietly(phase_of, args, kwargs)
            self.open = phase is not None
            if phase is None:
                return fn(*args, **kwargs)
            _step.sizes = sizes = _sizes(args, kwargs)
            try:
                with profiler.forward_pass(phase) as logged:  # a with-block pass: it nests
                    if logged and sizes is not None:
                        profiler.pass_size(sizes[0])  # requests: counted if the step runs eagerly
                    return fn(*args, **kwargs)
            finally:
                _step.sizes = None
        mark(execute_model, fn)
        return execute_model

    def sampling(self, fn: Callable, profiler: Any, phase_of: Callable[..., Optional[str]]) -> Callable:
        @functools.wraps(fn)
        def sample_tokens(*args, **kwargs):
            if not self.open:
                return fn(*args, **kwargs)
            self.open = False
            profiler.reopen_forward_pass()
            try:
                return fn(*args, **kwargs)
            finally:
                profiler.end_forward_pass()
        mark(sample_tokens, fn)
        return sample_tokens


def attach_model_runner(runner: Any) -> Any:
    """For a vLLM model runner (call at the end of its __init__): its
    profiler (None when profiling is off for this rank); dedupe off by default."""
    steps = _Steps()
    return attach(runner, {"execute_model": steps.forward, "sample_tokens": steps.sampling},
                  runner_rank(runner), False, step_phase, runner_identity(runner))


def patch_model_runner_module(module: Any) -> None:
    """vllm.v1.worker.gpu_model_runner or vllm.v1.worker.gpu.model_runner."""
    wrap_init(module.GPUModelRunner, attach_model_runner)


def _close_first(shutdown: Callable) -> Callable:
    def shutdown_closing(self, *args, **kwargs):
        close_attached(getattr(self, "model_runner", None))
        return shutdown(self, *args, **kwargs)
    return shutdown_closing


def patch_worker_module(module: Any) -> None:
    """vllm.v1.worker.gpu_worker (the CPU worker inherits from its Worker):
    shutdown closes the runner's profiler first; profile serves /start_profile."""
    from .start_profile import patch_worker_module as patch_profile
    wrap_method(module.Worker, "shutdown", _close_first)
    patch_profile(module)
