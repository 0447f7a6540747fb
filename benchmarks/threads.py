"""Several threads logging into one profiler at once: what each call costs
when threads contend for the profiler's lock (which never waits on a
syscall: the records file is grown outside it).

    python benchmarks/threads.py [--threads 1,2,4] [--calls 20000] [--rounds 7]

Each thread runs --calls torch.add calls on its own small tensors inside the
one open pass. Rows: no profiler, every call written (distinct shapes per
thread, dedupe off), and deduplicated repeats. Rounds interleave the rows;
each figure is the median over rounds, and the added cost per call is
against the no-profiler row measured in the same rounds.
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from sgl_shapeprof import ShapeProfiler  # noqa: E402


def run(prof, threads: int, calls: int) -> float:
    """Seconds for `threads` threads to make `calls` calls each."""
    start = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        x = torch.ones(2, 3 + i)
        if prof:
            prof.start_forward_pass()  # joins the open pass on this thread
        start.wait()
        for _ in range(calls):
            torch.add(x, x)
        done.wait()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    if prof:
        prof.start_forward_pass()
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    done.wait()
    dt = time.perf_counter() - t0
    for t in ts:
        t.join()
    if prof:
        prof.end_forward_pass()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="shapeprof-threads-")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.calls:,} torch.add calls per thread")
    print(f"{'threads':>7} {'no profiler':>12} {'written':>10} {'+/call':>8} {'ratio':>6} "
          f"{'dedupe':>10} {'+/call':>8} {'ratio':>6}")
    for n in (int(x) for x in args.threads.split(",")):
        times = {"base": [], "written": [], "dedupe": []}
        rows = list(times)
        for r in range(args.rounds):
            for name in rows[r % 3:] + rows[:r % 3]:  # rotate the order
                prof = None if name == "base" else ShapeProfiler(
                    os.path.join(tmp, f"{name}.jsonl"), dedupe=name == "dedupe")
                times[name].append(run(prof, n, args.calls))
                if prof:
                    prof.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        per = n * args.calls
        line = f"{n:>7} {med['base'] / per * 1e6:>10.2f}us"
        for k in ("written", "dedupe"):
            line += (f" {med[k] / per * 1e6:>8.2f}us {(med[k] - med['base']) / per * 1e6:>+7.2f}"
                     f" {med[k] / med['base']:>5.2f}x")
        print(line, flush=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
