"""SGLang's CUDA graphs: each graph's capture run recorded as a capture, each
replay counted (see below), on the backends that capture and replay them.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional

from ... import thread_logging
from ...on_import import is_ours, mark
from ...recording.env import env_profiler
from ...recording.messages import say_once
from ...recording.pauses import pause_thread, paused, resume_thread
from ..graphs import GRAPH_FAMILY, count_replay, new_graph_key
from .workers import custom_ops_recorded


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
# Graph keys: ../graphs.py, the size being the shape key's size (padded batch
# size; tokens for prefill and ragged verify), the variant its stream_idx,
# variant_label and attention_variant (LoRA/attention/PDMux variants).
_VARIANT = ("stream_idx", "variant_label", "attention_variant")
_graph_state = threading.local()    # active: a capture run is recorded; paused: in an eager break


def _graph_profiler() -> Any:
    """This process's profiler (the one attach_llm_worker made), or None."""
    return env_profiler()


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
    """The key of the graph backend captures for shape_key now (../graphs.py);
    None for a size that does not fit (said once)."""
    size = int(getattr(shape_key, "size", shape_key))
    variant = tuple((f, getattr(shape_key, f, None)) for f in _VARIANT)
    return new_graph_key(backend, shape_key, size, phase, variant)


def replay_real_size(backend: Any) -> Any:
    """The size a replay of backend's graph served before padding, in the
    unit of its shape key's size, as its runner's replay_prepare left it:
    tokens for prefill graphs (raw_num_tokens) and ragged verify graphs
    (raw_num_token), requests for the others (raw_bs); None if not known.
    count_replay judges whether it is one (an int that fits the graph)."""
    runner = getattr(backend, "_cuda_graph_runner", None)
    if runner is None:
        return None
    if hasattr(runner, "raw_num_tokens"):  # PrefillCudaGraphRunner
        return runner.raw_num_tokens
    if getattr(runner, "ragged_verify_mode", False):
        return getattr(runner, "raw_num_token", None)
    return getattr(runner, "raw_bs", None)


def _graphs_failed(e: BaseException) -> None:
    say_once("graphs", f"cannot record SGLang's CUDA graphs ({type(e).__name__}: {e}); "
                        f"they run unrecorded")


def _capture_run(backend: Any, shape_key: Any, forward_fn: Callable) -> Callable:
    """forward_fn as backend.capture_one runs it: the run made while the
    stream captures is the graph's capture; the warm-ups are not recorded."""
    prof = _graph_profiler()
    if prof is None:
        return forward_fn
    device = backend._device_module
    phase = graph_phase(backend)
    key = graph_key(backend, shape_key, phase)

    @functools.wraps(forward_fn)
    def run(*args, **kwargs):
        try:
            capturing = bool(device.is_current_stream_capturing())
        except Exception:
            capturing = False
        if not capturing or key is None or thread_logging():
            # a warm-up; or a capture inside a logged pass, whose calls are
            # not that pass's batch: neither is recorded
            with paused():
                return forward_fn(*args, **kwargs)
        with prof.capture_graph(key, phase) as logged, custom_ops_recorded(logged):
            _graph_state.active = True
            try:
                return forward_fn(*args, **kwargs)
            finally:
                _graph_state.active = False
                if getattr(_graph_state, "paused", False):
                    _graph_state.paused = False
                    resume_thread()
    return run


def _wrap_graph_backend(cls: type) -> None:
    """cls.capture_one records each graph's capture run; cls.replay counts
    replays. Any failure of ours: SGLang's own behaviour (said once)."""
    capture_one, replay = cls.capture_one, cls.replay
    if is_ours(capture_one):
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
            count_replay(self, shape_key, _graph_profiler, replay_real_size(self))
        except Exception as e:
            _graphs_failed(e)
        return out

    mark(capture_one_recorded, capture_one)
    mark(replay_counted, replay)
    cls.capture_one, cls.replay = capture_one_recorded, replay_counted


def _wrap_breakable_capture(cls: type) -> None:
    """A breakable graph's eager breaks (@eager_on_graph: attention) run once
    while it is captured, and again at every replay, through the dispatcher:
    they belong to the replaying pass, not to the capture. Logging pauses
    from the end of a captured segment to the start of the next."""
    end, begin = cls._end_current_segment, cls._begin_new_segment
    if is_ours(end):
        return

    @functools.wraps(end)
    def _end_current_segment(self, *args, **kwargs):
        result = end(self, *args, **kwargs)
        if getattr(_graph_state, "active", False) and not getattr(_graph_state, "paused", False):
            _graph_state.paused = bool(pause_thread())
        return result

    @functools.wraps(begin)
    def _begin_new_segment(self, *args, **kwargs):
        if getattr(_graph_state, "paused", False):
            _graph_state.paused = False
            resume_thread()
        return begin(self, *args, **kwargs)

    mark(_end_current_segment, end)
    mark(_begin_new_segment, begin)
    cls._end_current_segment, cls._begin_new_segment = _end_current_segment, _begin_new_segment


def patch_full_graph_backend_module(module: Any) -> None:
    _wrap_graph_backend(module.FullCudaGraphBackend)


def patch_breakable_graph_backend_module(module: Any) -> None:
    _wrap_graph_backend(module.BreakableCudaGraphBackend)
    _wrap_breakable_capture(module.BreakableCUDAGraphCapture)
