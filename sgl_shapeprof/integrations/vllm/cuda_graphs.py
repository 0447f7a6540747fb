"""vLLM's CUDA graphs: each graph's capture run recorded as a capture, each
replay counted, as for SGLang (the same record and summary fields).

vLLM 0.32 captures every graph in CUDAGraphWrapper.__call__
(vllm/compilation/cuda_graph.py): with a forward context whose
cudagraph_runtime_mode is the wrapper's (FULL: the whole model; PIECEWISE:
one wrapper per piece between attention layers) and a batch descriptor it
has no graph for, it runs the wrapped runnable once while the stream
captures; with one it has, it replays. Its warm-up runs (mode NONE) call
the runnable directly and are not recorded (no replay repeats them).

Graph keys (../graphs.py): the size is the padded request count for uniform
decode graphs (phase 'decode'; FULL ones are family 0, so their key is their
batch size), else the padded token count (phase 'mixed': those graphs serve
any batch); piecewise pieces and LoRA variants are families of their own.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ... import thread_logging
from ...recording.env import env_profiler
from ...recording.messages import say_once
from ...recording.pauses import paused
from ..graphs import count_replay, new_graph_key
from ..passes import wrap_method
from ...records.phases import DECODE
from .workers import MIXED, step_size


def _graphs_failed(e: BaseException) -> None:
    say_once("vllm-graphs", f"cannot record vLLM's CUDA graphs ({type(e).__name__}: {e}); "
                             f"they run unrecorded")


def graph_size_phase(batch_descriptor: Any) -> tuple:
    """(size, phase) of the graph for a BatchDescriptor."""
    num_reqs = getattr(batch_descriptor, "num_reqs", None)
    if getattr(batch_descriptor, "uniform", False) and num_reqs is not None:
        return int(num_reqs), DECODE
    return int(batch_descriptor.num_tokens), MIXED


def _graph_of(module: Any, wrapper: Any) -> tuple:
    """(batch descriptor, True if this call captures) when this call of
    wrapper captures or replays a graph, else (None, False); the same test
    as CUDAGraphWrapper.__call__ makes."""
    if not module.is_forward_context_available():
        return None, False
    ctx = module.get_forward_context()
    mode, descriptor = ctx.cudagraph_runtime_mode, ctx.batch_descriptor
    if descriptor is None or mode == module.CUDAGraphMode.NONE or mode != wrapper.runtime_mode:
        return None, False
    entry = wrapper.concrete_cudagraph_entries.get(descriptor)
    return descriptor, entry is None or entry.cudagraph is None


def _recorded(runnable: Callable, profiler: Any, key: int, phase: str) -> Callable:
    @functools.wraps(runnable)
    def run(*args, **kwargs):
        if thread_logging():  # a capture inside a logged pass: not that pass's batch
            with paused():
                return runnable(*args, **kwargs)
        with profiler.capture_graph(key, phase):
            return runnable(*args, **kwargs)
    return run


def patch_cuda_graph_module(module: Any) -> None:
    """vllm.compilation.cuda_graph: CUDAGraphWrapper.__call__ records each
    graph's capture run and counts its replays. Any failure of ours: vLLM's
    own behaviour (said once)."""
    def wrap(call: Callable) -> Callable:
        def __call__(self, *args, **kwargs):
            prof = env_profiler()
            if prof is None:
                return call(self, *args, **kwargs)
            try:
                descriptor, capture = _graph_of(module, self)
                key = _new_key(self, descriptor) if capture else None
            except Exception as e:
                _graphs_failed(e)
                return call(self, *args, **kwargs)
            if key is not None:
                runnable = self.runnable
                self.runnable = _recorded(runnable, prof, key, graph_size_phase(descriptor)[1])
                try:
                    return call(self, *args, **kwargs)
                finally:
                    self.runnable = runnable
            out = call(self, *args, **kwargs)
            if descriptor is not None and not capture:
                try:
                    count_replay(self, descriptor, lambda: prof, step_size(graph_size_phase(descriptor)[1]))
                except Exception as e:
                    _graphs_failed(e)
            return out
        return __call__
    wrap_method(module.CUDAGraphWrapper, "__call__", wrap)


def _new_key(wrapper: Any, descriptor: Any) -> Optional[int]:
    size, phase = graph_size_phase(descriptor)
    mode = getattr(wrapper.runtime_mode, "name", None)
    variant = (("mode", None if mode == "FULL" else mode),
               ("loras", getattr(descriptor, "num_active_loras", 0) if getattr(descriptor, "has_lora", False)
                else None))
    return new_graph_key(wrapper, descriptor, size, phase, variant)
