"""Replay's timing: warm-ups, iterations, caches rotated, each call run."""
from __future__ import annotations

import functools
import math
import os
import time
from typing import Callable, List, Optional, Tuple
from ..records.values import format_value
from .calls import (MAX_COPIES, MAX_ITERATIONS, MIN_ITERATIONS, TARGET_NS, WARMUP, Call, NotReplayable, Replayed,
                    first_line, check)

from . import noise
from .inputs import build


@functools.lru_cache(maxsize=None)
def rotation_bytes(device: str) -> int:
    """How many bytes of inputs a call's runs rotate among, so that each run
    finds its inputs out of the cache the last runs filled, as a model's
    operators find their weights: twice the L2 cache (a GPU's; on CPU a
    core's, at least 4 MiB; 256 MiB for a GPU that does not say)."""
    import torch
    if device.startswith("cuda"):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        return 2 * l2 if l2 else 256 << 20
    l2 = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in os.listdir(base):
            with open(f"{base}/{index}/level") as f, open(f"{base}/{index}/size") as g:
                if f.read().strip() == "2":
                    size = g.read().strip().upper()
                    l2 = int(size.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(size[-1:], 0)
    except (OSError, ValueError):
        pass
    return max(2 * l2, 4 << 20)


def measure(run: Callable[[int], object], prepare: Callable[[int], None], cuda: Optional[str],
            warmup: int = WARMUP, iterations: Optional[int] = None) -> Tuple[List[float], object]:
    """Per-call times of run(i) in microseconds, and the last call's result.
    prepare(i) runs before each, untimed. Warm-up runs first (the last one,
    synchronised, sizes the timed block); CUDA calls are timed with events,
    synchronised only after the timed block."""
    import torch
    sync = (lambda: torch.cuda.synchronize(cuda)) if cuda else (lambda: None)
    out = None
    est = 1
    for i in range(max(warmup, 1)):
        prepare(i)
        sync()
        t0 = time.perf_counter_ns()
        out = run(i)
        sync()
        est = max(time.perf_counter_ns() - t0, 1)
    n = iterations or min(max(math.ceil(TARGET_NS / est), MIN_ITERATIONS), MAX_ITERATIONS)
    if cuda:
        with torch.cuda.device(cuda):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            for i, (s, e) in enumerate(zip(starts, ends)):
                prepare(i)
                s.record()
                out = run(i)
                e.record()
            sync()
            return sorted(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)), out
    samples = []
    for i in range(n):
        prepare(i)
        t0 = time.perf_counter_ns()
        out = run(i)
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
    return sorted(samples), out


def _described(value: object) -> object:
    """A result as records spell outputs: shape and dtype per tensor."""
    import torch
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, (list, tuple)):
        return [_described(v) for v in value]
    return None


def _shape_dtype(value: object) -> object:
    if isinstance(value, dict):
        return {"shape": list(value.get("shape", [])), "dtype": value.get("dtype")}
    if isinstance(value, list):
        return [_shape_dtype(v) for v in value]
    return None


def _has_tensor(value: object) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(map(_has_tensor, value)))


def output_mismatch(recorded: object, result: object) -> Optional[str]:
    """None when the replay's outputs have the recorded shapes and dtypes."""
    got = _described(result)
    got = got if _has_tensor(got) else None
    want = _shape_dtype(recorded)
    return None if got == want else f"replayed {format_value(got)}, recorded {format_value(want)}"


def _quantile(s: List[float], q: float) -> float:
    return s[round(q * (len(s) - 1))]


def replay_call(call: Call, target: Optional[str] = None, warmup: int = WARMUP,
                iterations: Optional[int] = None, max_bytes: Optional[int] = None,
                warm_cache: bool = False) -> Replayed:
    """One call, replayed and timed, or the reason it was not; never raises.
    Its runs rotate among copies of its inputs (rotation_bytes) unless
    warm_cache: then one set stays cached from run to run."""
    import torch
    r = Replayed(call)
    try:
        op = check(call)
        torch.manual_seed(0)
        with torch.inference_mode():
            b = build(op, call, target, max_bytes)
            r.synthesised = b.synthesised
            dev = b.cuda or "cpu"
            n = 1 if warm_cache or not b.nbytes else min(MAX_COPIES, -(-rotation_bytes(dev) // b.nbytes))
            copies = [b] + [build(op, call, target) for _ in range(n - 1)]
            runs = [functools.partial(op, *c.args, **c.kwargs) for c in copies]

            def prepare(i: int) -> None:
                for t, first in copies[i % n].mutated:  # in-place ops start from the same values
                    t.copy_(first)
            before = noise.others_runnable()
            samples, out = measure(lambda i: runs[i % n](), prepare, b.cuda, warmup, iterations)
            after = noise.others_runnable()
            r.copies = n
        r.output_mismatch = output_mismatch(call.outputs, out)
        r.median_us = _quantile(samples, 0.5)
        r.p10_us, r.p90_us = _quantile(samples, 0.1), _quantile(samples, 0.9)
        r.iterations = len(samples)
        r.device = dev
        r.threads = 1 if b.cuda else torch.get_num_threads()
        # a task runnable at one reading only came and went: the spread says if it mattered
        r.others_runnable = None if before is None or after is None else min(before, after)
        r.timing_doubts = noise.doubts(r.median_us, r.p90_us, r.others_runnable, r.threads)
    except NotReplayable as e:
        r.reason = str(e)
    except Exception as e:  # the op's own failure on these inputs: said, and the others go on
        r.reason = f"replay raised {type(e).__name__}: {first_line(str(e))}"
    return r


def replay(calls: List[Call], target: Optional[str] = None, warmup: int = WARMUP,
           iterations: Optional[int] = None, max_bytes: Optional[int] = None, warm_cache: bool = False,
           progress: Optional[Callable[[int, int, str], None]] = None) -> List[Replayed]:
    """Every call replayed (or its reason); the slowest in total first, then the others."""
    out = []
    for i, call in enumerate(calls):
        if progress is not None:
            progress(i, len(calls), call.operation)
        out.append(replay_call(call, target, warmup, iterations, max_bytes, warm_cache))
    if progress is not None:
        progress(len(calls), len(calls), "")
    return sorted(out, key=lambda r: (r.median_us is None, -(r.total_us or 0), -r.call.count))


# ---------------------------------------------------------------- output


def default_max_bytes() -> Optional[int]:
    """Half of this machine's memory: more would risk the OOM killer."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return None
