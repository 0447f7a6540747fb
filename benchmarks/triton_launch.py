"""What recording a Triton launch costs: the us added per launch inside a
logged pass (written, deduplicated), against Triton's own launch, and
outside passes (the profiler open, no pass: Triton's own run() is in
place, so nothing is added).

    python benchmarks/triton_launch.py [--rounds 7] [--launches 300]

On a GPU the kernel is compiled and launched asynchronously (Triton's own
launch path, a few us); without one it runs under Triton's interpreter
(TRITON_INTERPRET=1, set here before Triton is imported), whose own launch
costs far more, so the recording's own cost is measured apart too: the
same wrapper, the same kernel object and arguments, around a launch that
does nothing (`ours alone`), which is what it adds to any launch.
Interleaved rounds; medians with their 95% intervals (ab.median_ci).
"""
import argparse
import contextlib
import os
import sys
import tempfile
import time

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab import median_ci  # noqa: E402

from sgl_shapeprof import ShapeProfiler  # noqa: E402


@triton.jit
def axpy(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr, ACT: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m) + alpha * tl.load(x_ptr + offs, mask=m), mask=m)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--launches", type=int, default=300 if CUDA else 100)
    a = ap.parse_args()
    dev = "cuda" if CUDA else "cpu"
    n = 4096 if CUDA else 64
    x, y = torch.randn(n, device=dev), torch.zeros(n, device=dev)
    block = 1024 if CUDA else 64
    grid = (triton.cdiv(n, block),)
    axpy[grid](x, y, n, 1.0, BLOCK=block)  # compiled (or interpreted once) before timing
    tmp = tempfile.mkdtemp(prefix="triton-bench-")
    profs = {"armed": ShapeProfiler(os.path.join(tmp, "armed.jsonl")),
             "written": ShapeProfiler(os.path.join(tmp, "written.jsonl")),
             "dedupe": ShapeProfiler(os.path.join(tmp, "dedupe.jsonl"), dedupe=True)}
    from triton.runtime import interpreter, jit
    cls = jit.JITFunction if CUDA else interpreter.InterpretedFunction
    own = cls.__dict__["run"]

    def per_launch(mode):
        prof = profs.get(mode)
        cm = prof.forward_pass() if mode in ("written", "dedupe") else contextlib.nullcontext()
        if CUDA:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cm:
            for _ in range(a.launches):
                axpy[grid](x, y, n, 0.5, BLOCK=block)
        if CUDA:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / a.launches * 1e6

    # ours alone: the wrapper (installed by a logged pass) around a run that does nothing
    from sgl_shapeprof.integrations.triton import door as hook
    stub = hook._launcher(lambda self, *args, grid, warmup, **kwargs: None)

    def ours_alone(mode):
        prof = profs.get(mode)
        cm = prof.forward_pass() if mode in ("written", "dedupe") else contextlib.nullcontext()
        calls = a.launches * 20
        t0 = time.perf_counter()
        with cm:
            for _ in range(calls):
                stub(axpy, x, y, n, 0.5, grid=grid, warmup=False, BLOCK=block)
        return (time.perf_counter() - t0) / calls * 1e6

    per_launch("written")  # once before timing: the first logged pass sets the hook up
    modes = ["off", "armed", "written", "dedupe"]
    times = {m: [] for m in modes}
    alone = {m: [] for m in modes}
    for r in range(a.rounds):
        for m in (modes if r % 2 == 0 else modes[::-1]):
            times[m].append(per_launch(m))
            alone[m].append(ours_alone(m))
    outside_own = cls.__dict__["run"] is own
    for p in profs.values():
        p.close()
    base = median_ci(times["off"])[0]
    print(f"Triton {triton.__version__}, torch {torch.__version__}, "
          f"{'compiled, ' + torch.cuda.get_device_name() if CUDA else 'interpreter (TRITON_INTERPRET=1), CPU'}; "
          f"{a.rounds} rounds of {a.launches} launches, interleaved")
    print(f"  Triton's own launch: {base:.1f} us")
    for m, what in (("armed", "profiler open, outside passes"), ("written", "in a logged pass, written"),
                    ("dedupe", "in a logged pass, deduplicated")):
        med, lo, hi = median_ci([t - o for t, o in zip(times[m], times["off"])])
        ci = f" [{lo:+.1f}, {hi:+.1f}]" if lo is not None else ""
        print(f"  {what:<34} {med:+7.1f} us per launch{ci}  ({median_ci(times[m])[0] / base:.2f}x)")
    print(f"  outside passes, {cls.__name__}.run is Triton's own function: {outside_own}")
    stub_off = median_ci(alone["off"])[0]
    print(f"  ours alone (the wrapper around a launch that does nothing; {stub_off:.2f} us when not recording):")
    for m, what in (("written", "in a logged pass, written"), ("dedupe", "in a logged pass, deduplicated")):
        med, lo, hi = median_ci([t - o for t, o in zip(alone[m], alone["off"])])
        ci = f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None else ""
        print(f"    {what:<32} {med:+7.2f} us per launch{ci}")


if __name__ == "__main__":
    main()
