"""What time="kernels" costs the CPU per call, against torch.profiler on the
same workload, where no GPU is: the collector's own side (an external
correlation id pushed and popped per recorded call, the line saying what
it became) with a stand-in libcupti (tests/cupti_standin.c) whose push and
pop do almost nothing. Real CUPTI's side (its activity records of every
CUDA API call and kernel) is not in these figures: it needs a GPU
(`make gpu-check`'s timed check).

    python benchmarks/kernels_cost.py [--rounds 7] [--calls 6000]

Each row runs in a child process of its own (CUPTI is one per process, and
torch.profiler changes process-wide state), rows interleaved in a shuffled
order each round: x.add(1) on 8x8 in passes of 20 calls, under
inference_mode (as benchmarks/run.py). Figures: the
median over rounds of each row's µs per call, the µs it adds to the
no-profiler row, and that added cost over torch.profiler's.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ROWS = {
    "off": "no profiler",
    "time": "sgl_shapeprof, time=True, every call written",
    "kernels": "sgl_shapeprof, time='kernels' (stand-in CUPTI), every call written",
    "kernels_dedupe": "sgl_shapeprof, time='kernels' (stand-in CUPTI), dedupe on",
    "torch_profiler": "torch.profiler(CPU, record_shapes=True)",
}


def child(row: str, calls: int, out: str) -> None:
    import time
    import torch
    from sgl_shapeprof import ShapeProfiler
    x = torch.ones(8, 8)
    prof = None
    if row.startswith(("time", "kernels")):
        prof = ShapeProfiler(os.path.join(out, "s.jsonl"), time="kernels" if row.startswith("kernels") else True,
                             dedupe=row.endswith("dedupe"))
        if row.startswith("kernels") and prof.kernels_path is None:
            sys.exit("the stand-in CUPTI was refused")
    tp = None
    if row == "torch_profiler":
        tp = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
        tp.__enter__()

    def once(n: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n // 20):
            if prof is not None:
                prof.start_forward_pass("decode")
            for _ in range(20):
                x.add(1)
            if prof is not None:
                prof.end_forward_pass()
        return (time.perf_counter_ns() - t0) / n

    with torch.inference_mode():  # as benchmarks/run.py's rows
        once(2000)
        best = min(once(calls) for _ in range(3))
    if tp is not None:
        tp.__exit__(None, None, None)
    if prof is not None:
        prof.close()
    print(best)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=6000)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.calls, a.child[1])
        return
    sys.path.insert(0, ROOT)
    try:
        from sgl_shapeprof._build import CUPTI_CRT, CUPTI_INCLUDE
    except ImportError:
        CUPTI_INCLUDE = CUPTI_CRT = None
    cc = shutil.which("cc") or shutil.which("gcc")
    if not CUPTI_INCLUDE or not cc:
        sys.exit("this build has no CUPTI headers (or there is no C compiler): nothing to measure")
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "libcupti_standin.so")
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-isystem", CUPTI_INCLUDE]
                       + (["-idirafter", CUPTI_CRT] if CUPTI_CRT and CUPTI_CRT != CUPTI_INCLUDE else [])
                       + ["-o", lib, os.path.join(ROOT, "tests", "cupti_standin.c")], check=True)
        env = dict(os.environ, SHAPEPROF_CUPTI_LIBRARY=lib, SHAPEPROF_TEST_CUPTI_STANDIN="1", PYTHONPATH=ROOT)
        ns = {row: [] for row in ROWS}
        for r in range(a.rounds):
            order = list(ROWS)
            random.Random(r).shuffle(order)
            for row in order:
                d = tempfile.mkdtemp(dir=tmp)
                p = subprocess.run([sys.executable, __file__, "--calls", str(a.calls), "--child", row, d],
                                   capture_output=True, text=True, env=env, timeout=600)
                if p.returncode:
                    sys.exit(f"{row}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
                ns[row].append(float(p.stdout.split()[-1]))
            print(f"round {r + 1}/{a.rounds}", file=sys.stderr)
    off = statistics.median(ns["off"])
    added = {row: statistics.median(v) - off for row, v in ns.items()}
    prof = added["torch_profiler"]
    print(f"x.add(1) on 8x8, {a.calls} calls per run, medians of {a.rounds} interleaved rounds")
    print(f"{'us/call':>8} {'added':>8} {'x torch.profiler':>17}  row")
    for row, what in ROWS.items():
        ratio = f"{added[row] / prof:.2f}" if row not in ("off", "torch_profiler") and prof > 0 else "-"
        print(f"{statistics.median(ns[row]) / 1e3:>8.3f} {added[row] / 1e3:>8.3f} {ratio:>17}  {what}")


if __name__ == "__main__":
    main()
