"""What recording arguments costs (SGLANG_PROFILE_SHAPES_ARGS=1, args=True).

    python benchmarks/args.py [--workloads micro,llama,diffusion] [--rounds 31] [--repeats 3]
    python benchmarks/args.py --callgrind      # instructions instead of time

The rows of benchmarks/run.py that matter here -- no profiler, every call
written and deduplicated repeats, each with arguments off and on -- timed in
interleaved rounds (run.py's time_rows), the whole measurement repeated; the
added cost per call is against the no-profiler base of the same rounds, and
the ratio "arguments on / off" is each repeat's, then the median of them
(these machines are noisy: a ratio within one run is what is comparable).
--callgrind counts the instructions of one run of each row instead (after a
warm-up run), whole process, under valgrind: no timing noise.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile

import run as bench  # benchmarks/run.py: workloads and interleaved timing

import torch

ROWS = ["base", "ours", "ours_args", "ours_dedupe", "ours_args_dedupe"]


def callgrind_child(helper: str, name: str) -> None:
    """One process, one segment per row: a warm-up run, then one counted."""
    lib = ctypes.CDLL(helper)
    lib.cg_dump.argtypes = [ctypes.c_char_p]
    torch.set_num_threads(1)
    run = bench.WORKLOADS[name]()
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        rows = bench.Rows(tmp)
        lib.cg_start()
        for key in ROWS:
            marker, _ = getattr(rows, key)()
            run(marker)
            lib.cg_zero()
            lib.cg_toggle()
            run(marker)
            lib.cg_toggle()
            lib.cg_dump(key.encode())
        rows.close()


def callgrind(workloads: list) -> None:
    if not bench.have_callgrind():
        raise SystemExit("--callgrind needs valgrind and its headers (apt-get install valgrind)")
    print(f"torch {torch.__version__}, instructions per call (whole process, one run of each row)")
    print(f"{'workload':10} {'written off -> on':>22} {'ratio':>6}   {'deduplicated off -> on':>22} {'ratio':>6}"
          f"   {'dedupe on / written off':>23}")
    with tempfile.TemporaryDirectory() as tmp:
        helper = bench.callgrind_helper(tmp)
        for name in workloads:
            calls = bench.count_calls(bench.WORKLOADS[name]())[0]
            total = bench.callgrind_totals([__file__, "--callgrind-child", helper, name],
                                           os.path.join(tmp, f"cg-{name}"))
            added = {k: (total[k] - total["base"]) / calls for k in ROWS[1:]}
            print(f"{name:10} {added['ours']:>9,.0f} -> {added['ours_args']:<9,.0f} "
                  f"{added['ours_args'] / added['ours']:>6.2f}   {added['ours_dedupe']:>9,.0f} -> "
                  f"{added['ours_args_dedupe']:<9,.0f} {added['ours_args_dedupe'] / added['ours_dedupe']:>6.2f}"
                  f"   {added['ours_args_dedupe'] / added['ours']:>23.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="micro,llama,diffusion")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--callgrind", action="store_true", help="instructions per call under valgrind")
    ap.add_argument("--callgrind-child", nargs=2, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.callgrind_child:
        return callgrind_child(*opts.callgrind_child)
    if opts.callgrind:
        return callgrind(opts.workloads.split(","))
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 intra-op thread, {opts.rounds} interleaved rounds x {opts.repeats}")
    print(f"{'workload':10} {'written us/call off -> on':>27} {'ratio':>6}   "
          f"{'deduplicated off -> on':>24} {'ratio':>6}")
    for name in opts.workloads.split(","):
        calls = bench.count_calls(bench.WORKLOADS[name]())[0]
        added = {k: [] for k in ROWS[1:]}
        for _ in range(opts.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                t = bench.time_rows(name, opts.rounds, ROWS, tmp)
            for k in added:
                added[k].append((t[k] - t["base"]) / calls * 1e6)

        def ratio(on: str, off: str) -> float:
            return statistics.median(a / b for a, b in zip(added[on], added[off]))

        med = {k: statistics.median(v) for k, v in added.items()}
        print(f"{name:10} {med['ours']:>12.3f} -> {med['ours_args']:<12.3f} {ratio('ours_args', 'ours'):>6.2f}   "
              f"{med['ours_dedupe']:>10.3f} -> {med['ours_args_dedupe']:<11.3f} "
              f"{ratio('ours_args_dedupe', 'ours_dedupe'):>6.2f}")


if __name__ == "__main__":
    main()
