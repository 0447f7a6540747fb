"""What every server integration does to a worker: the profiler the
environment asks for, made once per process with the worker's rank, and the
worker's forward methods wrapped so that each call is a pass (the wrappers
themselves are the server's: sglang/workers.py, vllm/workers.py).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ..on_import import is_ours, mark
from ..recording.env import from_env
from ..recording.messages import say
from ..recording.profiler import ShapeProfiler
from ..records.worker import Worker

ATTACHED = "_sgl_shapeprof"  # the worker's own attribute: its profiler


def call_quietly(read: Callable[..., Any], args, kwargs) -> Any:
    """read(*args, **kwargs) (a pass's phase or batch size, read from the
    server's arguments), or None if it fails (never the host's error)."""
    try:
        return read(*args, **kwargs)
    except Exception:
        return None


def attached(worker: Any) -> Optional[ShapeProfiler]:
    """The profiler attach() gave worker, else None. Read from the
    instance's own dict: worker classes may answer any attribute."""
    return getattr(worker, "__dict__", {}).get(ATTACHED)


def attach(worker: Any, methods: dict, rank: Optional[int], dedupe_default: bool,
           phase_of: Callable[..., Optional[str]], identity: Optional[Worker] = None) -> Optional[ShapeProfiler]:
    """methods: {name: wrap(bound method, profiler, phase_of)}; absent ones
    are skipped. identity: which worker of the deployment, read from the
    server's state. Once per worker; None when profiling is off for it."""
    already = attached(worker)
    if already is not None:  # patched and zero-edit both
        return already
    try:
        profiler = from_env(rank=rank, dedupe_default=dedupe_default, worker=identity)
        if profiler is None:
            return None
        for name, wrap in methods.items():
            bound = getattr(worker, name, None)
            if callable(bound):
                setattr(worker, name, wrap(bound, profiler, phase_of))
        setattr(worker, ATTACHED, profiler)
        return profiler
    except Exception as e:  # never stop the server
        say(f"cannot attach to {type(worker).__name__}: {e}; profiling is off")
        return None


def close_attached(worker: Any) -> None:
    """Close worker's profiler, if one is attached (records and summary
    final); never the host's error."""
    profiler = attached(worker)
    if profiler is None:
        return
    try:
        profiler.close()
    except Exception as e:
        say(f"cannot close the profiler of {type(worker).__name__}: {e}")


def wrap_method(owner: Any, name: str, wrap: Callable[[Callable], Callable]) -> None:
    """owner.name = wrap(owner.name), once: the wrapper is marked, and a
    marked one is left alone (both ways in at once, a plugin loaded twice)."""
    original = getattr(owner, name)
    if is_ours(original):
        return
    wrapped = functools.wraps(original)(wrap(original))
    mark(wrapped, original)
    setattr(owner, name, wrapped)


def wrap_init(cls: type, attach_one: Callable[[Any], Any]) -> None:
    """cls.__init__, then attach_one(self); once per class."""
    def wrap(init):
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            attach_one(self)
        return __init__
    wrap_method(cls, "__init__", wrap)
