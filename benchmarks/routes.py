"""What the second route costs against the first (docs/how-it-works.md#the-mechanisms).

    python benchmarks/routes.py [--rounds 7] [--workloads micro,llama]

The route is chosen once per process (the first profiler installs it), so
each route's rows run in child processes of their own, alternated round by
round. A child times the workload unprofiled (base) and profiled, each call
written, interleaved, under inference_mode() and under no_grad() (where
composite ops reach the second route whole and are passed through), and
prints the added cost per recorded call. The parent prints each route's
median over rounds and the ratio of the second's to the first's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("inference_mode", "no_grad")


def child(route: str, workload: str, reps: int) -> None:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    if route == "second":
        from fake_owner.sitecustomize import take_fake
        take_fake()
    sys.path.insert(0, HERE)
    import torch
    from run import WORKLOADS, _is_model, _marked
    from sgl_shapeprof import ShapeProfiler
    workload_run = WORKLOADS[workload]()

    def run(p):  # the micro loop is one pass; the models mark their own
        if _is_model(workload):
            return workload_run(p)
        with _marked(p):
            workload_run(p)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for mode in MODES:
            with getattr(torch, mode)():
                # one long-lived profiler, as a server keeps one
                p = ShapeProfiler(os.path.join(d, f"{mode}.jsonl"))
                run(p)  # warm: caches, the file's first pages
                calls = p.stats()["records"]
                base, ours = [], []
                for i in range(reps):
                    for row in ("base", "ours") if i % 2 == 0 else ("ours", "base"):
                        t = time.perf_counter_ns()
                        run(p if row == "ours" else None)
                        (ours if row == "ours" else base).append(time.perf_counter_ns() - t)
                p.close()
                out[mode] = (statistics.median(ours) - statistics.median(base)) / calls
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="child processes per route")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per row in a child")
    ap.add_argument("--workloads", default="micro,llama")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], int(a.child[2]))
    print(f"{'workload':10} {'mode':15} {'first ns/call':>14} {'second ns/call':>15} {'second/first':>13}")
    for workload in a.workloads.split(","):
        added = {"first": [], "second": []}
        for r in range(a.rounds):
            for route in ("first", "second") if r % 2 == 0 else ("second", "first"):
                res = subprocess.run([sys.executable, __file__, "--child", route, workload, str(a.reps)],
                                     capture_output=True, text=True, check=True)
                added[route].append(json.loads(res.stdout.strip().splitlines()[-1]))
        for mode in MODES:
            first = statistics.median(x[mode] for x in added["first"])
            second = statistics.median(x[mode] for x in added["second"])
            print(f"{workload:10} {mode:15} {first:14.0f} {second:15.0f} {second / first:13.2f}")


if __name__ == "__main__":
    main()
