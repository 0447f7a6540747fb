"""What a forward pass boundary costs: passes of a few operators each, with no
profiler, with every call written, and with deduplication (repeats only).

    python benchmarks/passes.py [--passes 2000] [--ops 20] [--rounds 9]

Rows run in interleaved rounds (order rotating); each row's figure is the
median over rounds. The added cost per pass is (row - no profiler), against
the base measured in the same rounds, since these machines are noisy. The
per-call part of it is in benchmarks/run.py; what is left is the pass: the
native begin/end and the flusher's work (cutting the file, the summary),
which runs on its own thread and shows here only as contention.
"""
import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from sgl_shapeprof import ShapeProfiler  # noqa: E402
from sgl_shapeprof.recording.on_request import OnRequestProfiler  # noqa: E402


def run(prof, passes, ops, a):
    start = time.perf_counter()
    for _ in range(passes):
        if prof is not None:
            prof.start_forward_pass("decode")
        for _ in range(ops):
            torch.add(a, a)
        if prof is not None:
            prof.end_forward_pass()
    return (time.perf_counter() - start) / passes * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=2000)
    ap.add_argument("--ops", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.randn(8, 8)
    tmp = tempfile.mkdtemp(prefix="shapeprof-passes-")
    rows = {"no profiler": None,
            "every call written": ShapeProfiler(os.path.join(tmp, "w.jsonl")),
            "dedupe on (repeats)": ShapeProfiler(os.path.join(tmp, "d.jsonl"), dedupe=True),
            # armed, nothing requested: what on_request costs a server per pass
            # (a request-file check per pass, no operator is touched)
            "armed, idle": OnRequestProfiler(output_dir=tmp)}
    for prof in rows.values():
        run(prof, 100, a.ops, x)  # warm: interning, first records
    times = {k: [] for k in rows}
    keys = list(rows)
    for r in range(a.rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            gc.collect()
            gc.disable()
            times[k].append(run(rows[k], a.passes, a.ops, x))
            gc.enable()
    for prof in rows.values():
        if prof is not None:
            prof.close()
    shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(times["no profiler"])
    print(f"{a.passes} passes of {a.ops} torch.add (8x8), {a.rounds} rounds, torch {torch.__version__}")
    print(f"  {'row':24} {'µs/pass':>9} {'added':>9} {'added per call':>15}")
    for k in keys:
        m = statistics.median(times[k])
        print(f"  {k:24} {m:9.1f} {m - base:+9.1f} {(m - base) / a.ops:+15.3f}")


if __name__ == "__main__":
    main()
