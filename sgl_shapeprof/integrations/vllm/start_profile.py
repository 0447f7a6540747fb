"""vLLM's /start_profile and /stop_profile on a server armed with
SHAPEPROF=on_request: each worker's armed profiler records the next steps.

vLLM mounts the two routes only when a profiler is configured
(--profiler-config.profiler); an armed server mounts them anyway
(api_server.py). A request reaches every worker as Worker.profile(is_start, profile_prefix,
delay_iterations=, max_iterations=): there the armed profiler skips
`delay_iterations` steps and records `max_iterations` (0 or none: until
/stop_profile) into <SHAPEPROF_FILE's folder>/<profile_prefix->shapes-rank<N>.jsonl (shapes-TP-<tp>-PP-<pp>... where the deployment has
PP, DP or EP workers).
vLLM's own profiler runs too only when one is configured: asking for shapes
alone starts no torch profiler. A request's own options (the body's
shapes_time, shapes_nvtx: seam.py) reach each worker just before it, through
NEXT_REQUEST_METHOD (api_server.py sends them), and go with its next start.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

from ...recording.config import INT_MAX
from ...recording.env import env_profiler
from ...recording.on_request import OnRequestProfiler
from ...recording.requests import request_flag, request_name
from ...recording.switch import armed_on_request
from ..passes import wrap_method
from .api_server import vllm_profiler_on
from .seam import NEXT_REQUEST_METHOD, SHAPES_OPTIONS

log = logging.getLogger("vllm.sgl_shapeprof")  # in vLLM's log, beside its own profiler's lines


def _armed() -> Optional[OnRequestProfiler]:
    p = env_profiler()
    return p if isinstance(p, OnRequestProfiler) else None


def shapes_output(armed: OnRequestProfiler, prefix: Optional[str]) -> str:
    """The records file of a request; RequestError when the prefix is not a
    name (vLLM's server refuses such a prefix first; its engine API does not)."""
    if prefix:
        request_name("profile_prefix", prefix)
    return os.path.join(armed.output_dir, f"{prefix + '-' if prefix else ''}shapes-{armed.worker_name()}.jsonl")


_NEXT: dict = {}  # the options handed over for this worker's next start ({"time": True, ...})


def next_request(worker: Any = None, **options: Any) -> None:
    """NEXT_REQUEST_METHOD, a method of vLLM's Worker: the options of the
    next /start_profile (the API server checked them; checked again, as
    anything from another process), taken by that start. Called with none:
    a start that failed leaves nothing behind."""
    known = set(SHAPES_OPTIONS.values())
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{NEXT_REQUEST_METHOD}: unknown options {unknown} (known: {sorted(known)})")
    _NEXT.clear()
    _NEXT.update({k: request_flag(k, v) for k, v in options.items()})


def _profile_with_shapes(profile: Callable) -> Callable:
    def profile_with_shapes(self, is_start: bool = True, profile_prefix: Optional[str] = None, *args, **kwargs):
        options = dict(_NEXT) if is_start else {}
        if is_start:
            _NEXT.clear()   # each start takes what was handed over for it, and only it
        if not armed_on_request():
            return profile(self, is_start, profile_prefix, *args, **kwargs)
        armed = _armed()
        vllm_on = vllm_profiler_on(getattr(self, "profiler_config", None))
        if armed is not None and is_start:
            delay, limit = kwargs.get("delay_iterations"), kwargs.get("max_iterations")
            _TAKEN["path"] = None
            # vLLM checked them (whole, 0 or more); past the core's 64-bit
            # counts they mean "never", as INT_MAX does
            path = armed.request(passes=min(int(limit or 0), INT_MAX), skip=min(int(delay or 0), INT_MAX),
                                 output=shapes_output(armed, profile_prefix), **options)
            _TAKEN["path"] = path
            how = ", ".join(option for option, on in options.items() if on)
            log.info("shapes: rank %s records %s%s into %s", armed.rank,
                     f"{limit} steps" if limit else "steps until /stop_profile", f" ({how})" if how else "", path)
        elif armed is not None and armed.status()["state"] in ("recording", "pending"):
            log.info("shapes: rank %s stopped; records in %s", armed.rank, armed.stop())
        if not vllm_on:  # shapes only: vLLM's torch profiler stays off
            return None
        try:
            return profile(self, is_start, profile_prefix, *args, **kwargs)
        except BaseException:
            if armed is not None and is_start:  # vLLM's own refused: ours does not run alone
                armed.stop()
            raise
    return profile_with_shapes


_TAKEN: dict = {"path": None}  # the file this worker's latest start took (none: refused)


def cancel_request(worker: Any = None) -> Optional[str]:
    """Run in each worker (collective_rpc) after another refused a start:
    the request that start took here is taken back, its file removed (an
    earlier request, which the start found running, is left alone)."""
    armed = _armed()
    taken, _TAKEN["path"] = _TAKEN["path"], None
    path = armed.cancel(taken) if armed is not None and taken else None
    if path:
        log.warning("shapes: rank %s: request taken back, %s removed (another worker refused it)",
                    armed.rank, path)
    return path


def _profile_all_or_none(profile: Callable) -> Callable:
    def profile_all_or_none(self, is_start: bool = True, profile_prefix: Optional[str] = None, *args, **kwargs):
        try:
            return profile(self, is_start, profile_prefix, *args, **kwargs)
        except BaseException:
            if is_start and armed_on_request():
                try:
                    self.collective_rpc(cancel_request)
                except Exception as e:  # the refusal is what the client must see
                    log.warning("shapes: cannot take the request back in every worker: %s", e)
            raise
    return profile_all_or_none


def patch_executor_module(module: Any) -> None:
    """vllm.v1.executor.abstract: Executor.profile, which sends a request to
    every worker; one that refuses it takes it back from the others."""
    wrap_method(module.Executor, "profile", _profile_all_or_none)


def patch_worker_module(module: Any) -> None:
    """vllm.v1.worker.gpu_worker: Worker.profile (the CPU worker inherits
    it), and NEXT_REQUEST_METHOD beside it."""
    wrap_method(module.Worker, "profile", _profile_with_shapes)
    if not hasattr(module.Worker, NEXT_REQUEST_METHOD):
        setattr(module.Worker, NEXT_REQUEST_METHOD, next_request)
