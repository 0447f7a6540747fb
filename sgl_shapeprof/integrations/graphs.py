"""CUDA graph keys, shared by the servers' graph integrations: the records'
"graph" and the summary's "graphs" (docs/FORMAT.md).

A key is family * GRAPH_FAMILY + size, size being the graph's batch size
(padded requests for decode graphs; tokens for the others). Family 0: the
"decode" graphs of the default variant, so a decode graph's key is its batch
size. Every other family (prefill or mixed graphs, draft and verify graphs,
LoRA/attention variants, piecewise pieces, graphs captured again by a new
runner or wrapper) is numbered 1, 2, ... in capture order and named once in
the log: no key is ever captured twice, so a record's count times its
graph's replays is always true.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Callable, Optional

from ..recording.messages import say_once
from ..records.graphs import GRAPH_FAMILY
from ..records.phases import DECODE

_graph_families: dict = {}          # (backend, phase, variant, generation) -> family
_graph_captured: set = set()        # keys captured in this process
_graph_backends = itertools.count(1)
_KEYS = "_sgl_shapeprof_graph_keys"  # backend instance: {shape_key: graph key}


def new_graph_key(backend: Any, shape_key: Any, size: int, phase: Optional[str],
                  variant: tuple = ()) -> Optional[int]:
    """The key of the graph `backend` captures for shape_key now; None for a
    size that does not fit (said once). variant: (name, value) pairs that
    tell apart graphs of one size and phase; a value None is the default."""
    if not 0 <= size < GRAPH_FAMILY:
        say_once("graph-size", f"a CUDA graph of size {size} is not recorded (sizes up to "
                                f"{GRAPH_FAMILY - 1} fit the graph keys)")
        return None
    backend_id = vars(backend).get("_sgl_shapeprof_backend_id")
    if backend_id is None:
        backend_id = next(_graph_backends)
        setattr(backend, "_sgl_shapeprof_backend_id", backend_id)
    generation = 0
    while True:
        family_id = (backend_id, phase, variant, generation)
        family = _graph_families.get(family_id)
        if family is None:
            default = phase == DECODE and all(v is None for _, v in variant)
            family = 0 if default and 0 not in _graph_families.values() else \
                max(_graph_families.values(), default=0) + 1
            _graph_families[family_id] = family
            if family:
                named = ", ".join(f"{f}={v}" for f, v in variant if v is not None)
                logging.getLogger("sgl_shapeprof").info(
                    "CUDA graph keys %d + size: %s graphs of %s%s", family * GRAPH_FAMILY, phase,
                    type(backend).__name__, f" ({named})" if named else "")
        key = family * GRAPH_FAMILY + size
        if key not in _graph_captured:
            _graph_captured.add(key)
            vars(backend).setdefault(_KEYS, {})[shape_key] = key
            return key
        generation += 1  # captured before: this is another graph


def captured_key(backend: Any, shape_key: Any) -> Optional[int]:
    """The key new_graph_key gave backend's graph for shape_key, if any."""
    return vars(backend).get(_KEYS, {}).get(shape_key)


def count_replay(backend: Any, shape_key: Any, profiler_of: Callable[[], Any],
                 real: Any = None) -> None:
    """A replay of backend's graph for shape_key, counted by the profiler
    profiler_of() returns (asked only when that graph was recorded). real:
    the size the replay served before padding, in the unit of the graph's
    size (requests or tokens); anything but an int that fits the graph is
    not believed (counted as not known)."""
    key = captured_key(backend, shape_key)
    profiler = profiler_of() if key is not None else None
    if profiler is not None:
        fits = isinstance(real, int) and not isinstance(real, bool) and 0 <= real <= key % GRAPH_FAMILY
        profiler.graph_replayed(key, 1, real if fits else None)
