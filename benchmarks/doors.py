"""What a kernel library's door costs (recording/doors.py): the us added per
API call, against the same function without its door, outside logged
passes (before any profiler, and with one open but no pass) and inside one
(written, deduplicated repeat, arguments on). Then Inductor's door
(integrations/inductor/): a launch through torch's own CachingAutotuner.run,
its launcher stood in by one that does nothing (tests/inductor_stand_in.py),
against Inductor's own run().

    python benchmarks/doors.py [--rounds 9] [--calls 2000]

The API function stands in for FlashInfer's decode call: six tensors (a
pair of them in a tuple, a paged KV cache's) and twelve other parameters,
most left at their defaults, and a body that does nothing, so the door's
own cost is what is timed (a real call's kernel launch takes several us
on a GPU). Interleaved rounds, each timing the bare function and the door
back to back; medians with their 95% intervals (ab.median_ci).
"""
import argparse
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab import median_ci  # noqa: E402


def decode(query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len, bmm1_scale=1.0,
           bmm2_scale=1.0, window_left=-1, out=None, out_dtype=None, sinks=None, kv_layout="HND",
           enable_pdl=None, backend="auto", q_len_per_req=1, o_scale=1.0, mask=None):
    return query


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    from sgl_shapeprof.recording.doors import api_door
    door = api_door(decode, "bench:decode")
    q = torch.randn(4, 8, 128)
    kv = (torch.randn(16, 2, 32, 128), torch.randn(16, 2, 32, 128))
    ws, tables, lens = torch.empty(1 << 10, dtype=torch.uint8), torch.zeros(4, 4, dtype=torch.int32), \
        torch.tensor([40, 70, 3, 9], dtype=torch.int32)

    def timed(fn, n):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(q, kv, ws, tables, lens, 128, bmm1_scale=0.088)
        return (time.perf_counter() - t0) / n * 1e6

    from sgl_shapeprof import ShapeProfiler
    modes = {}
    with tempfile.TemporaryDirectory() as d:
        # before any profiler: the native module is not loaded
        modes["no profiler yet"] = [timed(door, args.calls) - timed(decode, args.calls)
                                    for _ in range(args.rounds)]
        profs = {m: ShapeProfiler(os.path.join(d, f"{m}.jsonl"), dedupe=(m == "deduplicated"),
                                  args=(m == "arguments on"))
                 for m in ("outside a pass", "written", "deduplicated", "arguments on")}
        for m in profs:
            modes[m] = []
        with torch.inference_mode():
            for _ in range(args.rounds):
                for m, prof in profs.items():
                    base = timed(decode, args.calls)
                    if m != "outside a pass":
                        prof.start_forward_pass("decode")
                    ours = timed(door, args.calls)
                    if m != "outside a pass":
                        prof.end_forward_pass()
                    modes[m].append(ours - base)
        for prof in profs.values():
            prof.close()
    print(f"us added per API call (medians of {args.rounds} rounds of {args.calls} calls, 95% interval)")
    for m, xs in modes.items():
        med, lo, hi = median_ci(xs)
        print(f"  {m:<18} {med:7.2f}  [{lo:.2f}, {hi:.2f}]")
    inductor(args.rounds, args.calls)


def inductor(rounds: int, calls: int) -> None:
    """Inductor's door: us added per launch, against Inductor's own run()."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from inductor_stand_in import autotuner, config, heuristics

    from sgl_shapeprof import ShapeProfiler
    from sgl_shapeprof.integrations.inductor.door import patch_triton_heuristics
    from sgl_shapeprof.on_import import original_of
    patch_triton_heuristics(heuristics)
    own = original_of(heuristics.CachingAutotuner.run)
    at, _ = autotuner([config(128, 4)])
    x, y = torch.zeros(1000), torch.zeros(1000)

    def timed(run, n):
        t0 = time.perf_counter()
        for _ in range(n):
            run(at, x, y, 1000, stream=0)
        return (time.perf_counter() - t0) / n * 1e6
    door = heuristics.CachingAutotuner.run
    timed(door, 10)  # autotuned once, outside the timing
    modes = {m: [] for m in ("outside a pass", "written", "deduplicated")}
    with tempfile.TemporaryDirectory() as d:
        profs = {m: ShapeProfiler(os.path.join(d, f"i{i}.jsonl"), dedupe=(m == "deduplicated"))
                 for i, m in enumerate(modes)}
        for _ in range(rounds):
            for m, prof in profs.items():
                base = timed(own, calls)
                if m != "outside a pass":
                    prof.start_forward_pass("decode")
                ours = timed(door, calls)
                if m != "outside a pass":
                    prof.end_forward_pass()
                modes[m].append(ours - base)
        for prof in profs.values():
            prof.close()
    print(f"Inductor's door: us added per launch, against its own run() ({timed(own, calls):.2f} us here; "
          f"medians of {rounds} rounds of {calls} launches, 95% interval)")
    for m, xs in modes.items():
        med, lo, hi = median_ci(xs)
        print(f"  {m:<18} {med:7.2f}  [{lo:.2f}, {hi:.2f}]")


if __name__ == "__main__":
    main()
