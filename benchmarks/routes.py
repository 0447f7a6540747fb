"""What the second route costs against the first (docs/how-it-works.md#the-mechanisms).

    python benchmarks/routes.py [--rounds 7] [--workloads micro,llama]
    python benchmarks/routes.py --not-taken [--reps 7]

The route is chosen once per process (the first profiler installs it), so
each route's rows run in child processes of their own, alternated round by
round. A child times the workload unprofiled (base) and profiled, each call
written, interleaved, under inference_mode() and under no_grad() (where
composite ops reach the second route whole and are passed through), and
prints the added cost per recorded call. The parent prints each route's
median over rounds and the ratio of the second's to the first's.

--not-taken measures two routes issue 55 weighed and did not take, on the
tiny Llama, under inference_mode() and no_grad(), against the reference
TorchDispatchMode logger's stream (the oracle): RecordFunction callbacks
(torch.profiler's CPU events with record_shapes, which RecordFunction
drives; a native observer would cost less, but sees the same calls), and the
Python key itself (an empty TorchDispatchMode: what any mode pays before it
records anything). For each: the calls it sees against the oracle's, by
name (all of them, and only the outermost for RecordFunction), and what it
adds per oracle call, timed interleaved with an unprofiled run.
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


def not_taken(reps: int) -> None:
    import collections

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    sys.path.insert(0, HERE)
    import torch
    from reference_logger import ReferenceLogger
    from run import WORKLOADS
    from torch.utils._python_dispatch import TorchDispatchMode

    class Empty(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def name(op: str) -> str:  # aten.mm.default -> aten::mm, as RecordFunction names it
        return "::".join(op.split(".")[:2])

    def seen(counts, oracle):
        same = sum(min(n, counts[k]) for k, n in oracle.items())
        return f"{sum(counts.values()):6} seen, {same:5} of the oracle's, {sum(counts.values()) - same:5} others"

    workload = WORKLOADS["llama"]()
    print(f"{'mode':15} {'route':34} {'calls':46} {'added us/oracle call':>21}")
    with tempfile.TemporaryDirectory() as d:
        for mode in MODES:
            with getattr(torch, mode)():
                ref = ReferenceLogger(os.path.join(d, f"{mode}.jsonl"))
                workload(ref)
                ref.close()
                with open(os.path.join(d, f"{mode}.jsonl")) as f:
                    oracle = collections.Counter(name(json.loads(line)["operation"]) for line in f)
                n = sum(oracle.values())
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                            record_shapes=True) as prof:
                    workload(None)
                events = [e for e in prof.events() if e.name.startswith("aten::")]
                every = collections.Counter(e.name for e in events)
                top = collections.Counter(e.name for e in events
                                          if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
                print(f"{mode:15} {'oracle (TorchDispatchMode)':34} {n:6} seen")
                print(f"{mode:15} {'RecordFunction, every call':34} {seen(every, oracle)}")
                print(f"{mode:15} {'RecordFunction, outermost calls':34} {seen(top, oracle)}")
                # each row: (begin, end), outside the timed run: torch.profiler's
                # start and its events' collection at stop are not RecordFunction's
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
                empty = Empty()
                rows = {"base": (lambda: None, lambda: None),
                        "RecordFunction (torch.profiler)": (prof.start, prof.stop),
                        "Python key (an empty mode)": (empty.__enter__, lambda: empty.__exit__(None, None, None))}
                times = {k: [] for k in rows}
                for i in range(reps):
                    for k in (list(rows) if i % 2 == 0 else list(rows)[::-1]):
                        begin, end = rows[k]
                        begin()
                        t = time.perf_counter_ns()
                        workload(None)
                        times[k].append(time.perf_counter_ns() - t)
                        end()
                base = statistics.median(times["base"])
                for k in list(rows)[1:]:
                    print(f"{mode:15} {k:34} {'':46} {(statistics.median(times[k]) - base) / n / 1e3:21.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="child processes per route")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per row in a child")
    ap.add_argument("--workloads", default="micro,llama")
    ap.add_argument("--not-taken", action="store_true", help="the routes weighed and not taken (see above)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.not_taken:
        return not_taken(a.reps)
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
