"""`sgl-shapeprof replay` as text: how the calls were replayed, then each
replayed call's time and share, costliest first, and the calls not replayed
with the reason."""
from __future__ import annotations

from typing import List, Optional, TextIO

from ...replay import noise
from ...replay.calls import MAX_COPIES, MAX_ITERATIONS, MIN_ITERATIONS, TARGET_NS, WARMUP, Replayed, signature_text
from ...replay.timing import rotation_bytes


def _notes(r: Replayed) -> str:
    notes = [f"{k}: {v}" for k, v in r.synthesised.items()]
    if r.output_mismatch:
        notes.append("OUTPUT MISMATCH: " + r.output_mismatch)
    if r.timing_doubts:
        notes.append("DOUBTFUL TIMING: " + ", ".join(r.timing_doubts))
    return "; ".join(notes)


def doubt_line(results: List[Replayed], marked: str = "DOUBTFUL TIMING above") -> str:
    """One line: how many replayed calls' timing is doubtful, why, and what
    to do; "" when none is. marked: where the calls are marked."""
    done = [r for r in results if r.reason is None]
    busy = [r for r in done if "busy" in r.timing_doubts]
    spread = [r for r in done if "spread" in r.timing_doubts]
    if not busy and not spread:
        return ""
    why, fix = [], "on a quieter machine"
    if busy:
        others = sorted(r.others_runnable or 0 for r in busy)[(len(busy) - 1) // 2]
        threads = max(r.threads for r in busy)
        free = noise.free_cores(others)
        why.append(f"{len(busy)} busy (other processes' runnable tasks, {others} at the median before and "
                   f"after a call's runs, left {free} of this machine's {noise.cores()} cores free for "
                   f"{threads} thread{'s' if threads != 1 else ''})")
        if threads > max(free, 1):  # one thread waits for no other at a barrier
            fix = f"with --threads {max(free, 1)}, or {fix}"
    if spread:
        why.append(f"{len(spread)} spread (p90 at least {noise.SPREAD:g}x the median and "
                   f"{noise.SPREAD_FLOOR_US:g} us above it)")
    n = sum(bool(r.timing_doubts) for r in done)
    return (f"timing doubtful for {n} of {len(done)} replayed calls ({marked}): "
            f"{', '.join(why)}; replay {fix}\n")


def _header(paths: List[str], results: List[Replayed], warmup: int, iterations: Optional[int],
            warm_cache: bool) -> str:
    import torch
    done = [r for r in results if r.reason is None]
    devices = sorted({r.device for r in done})
    its = (f"{iterations} timed iterations" if iterations else
           f"{MIN_ITERATIONS}-{MAX_ITERATIONS} timed iterations (~{TARGET_NS / 1e6:g} ms) per call")
    caches = ("one set of inputs per call, cached from run to run (--warm-cache)" if warm_cache else
              "each call's runs rotate among copies of its inputs, together 2x L2 (" + ", ".join(
                  f"{rotation_bytes(d) >> 20} MiB on {d}" for d in devices)
              + f") or {MAX_COPIES} copies")
    n_calls = sum(r.call.count for r in results)
    total = sum(r.total_us or 0 for r in done)
    threads = torch.get_num_threads()
    how = (f"on {', '.join(devices)}: torch {torch.__version__}, {threads} thread{'s' if threads != 1 else ''}, "
           f"{warmup} warm-up then {its}; {caches}; floats ~ N(0,1)" if done else
           f"(torch {torch.__version__}): nothing could be replayed")
    return (f"replay of {', '.join(paths)} {how}\n"
            f"{len(results)} distinct calls standing for {n_calls:,} calls: {len(done)} replayed "
            f"({sum(r.call.count for r in done):,} calls), {len(results) - len(done)} not\n"
            f"operator time of the replayed calls: {total / 1000:.3f} ms (median per call x count)\n")


def replay_text(paths: List[str], results: List[Replayed], out: TextIO, warmup: int = WARMUP,
                iterations: Optional[int] = None, warm_cache: bool = False) -> None:
    """paths: the records files replayed; warmup, iterations, warm_cache: as
    the replay ran (the header says how)."""
    w = out.write
    w(_header(paths, results, warmup, iterations, warm_cache))
    done = [r for r in results if r.reason is None]
    total = sum(r.total_us or 0 for r in done) or 1.0
    if done:
        w(f"\n{'total ms':>10} {'share':>6} {'count':>9} {'median us':>10} {'p10-p90 us':>19}  "
          "operation  inputs  [args]  -- how inputs were made\n")
        for r in done:
            notes = _notes(r)
            spread = f"{r.p10_us:.2f}-{r.p90_us:.2f}"
            w(f"{r.total_us / 1000:>10.3f} {100 * r.total_us / total:>5.1f}% {r.call.count:>9,} "
              f"{r.median_us:>10.2f} {spread:>19}  {signature_text(r.call)}"
              + (f"  -- {notes}" if notes else "") + "\n")
    missing = [r for r in results if r.reason is not None]
    if missing:
        w(f"\nNot replayed ({len(missing)} distinct calls, {sum(r.call.count for r in missing):,} calls):\n")
        for r in missing:
            w(f"{r.call.count:>9,}  {signature_text(r.call)}  -- {r.reason}\n")
    mism = sum(r.output_mismatch is not None for r in done)
    if mism:
        w(f"\n{mism} replayed calls gave outputs of other shapes or dtypes than recorded "
          "(OUTPUT MISMATCH above): their work differs from the recorded calls'\n")
    doubted = doubt_line(results)
    if doubted:
        w("\n" + doubted)
