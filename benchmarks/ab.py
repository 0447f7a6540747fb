"""Wall-time A/B of the recording path: a pinned baseline build against the
working tree, interleaved in one run (these machines are noisy: only ratios
of the same run mean anything).

    python benchmarks/ab.py                      # baseline: HEAD~1
    python benchmarks/ab.py --base bdd39a8 --rounds 9 --workloads micro,long,llama,unet

The baseline ref is checked out into a temporary git worktree and its
extension built there in place (against this interpreter's torch, a minute
or two); the working tree must be built already (make install). Each round
runs, for each build in alternating order, one child process per mode
(written, deduplicated, arguments on): the child times the workload without
a profiler and with one, on the same model, and prints the added cost per
call. The table gives the medians over rounds, and after/before as the
median of each round's own ratio (the two builds' children of one round ran
back to back) with its 95% confidence interval (distribution-free: order
statistics of the binomial) and what it says: "lower" or "higher" when the
interval leaves 1 out, "same" when it holds 1; rounds whose added cost came
out at or below zero (noise larger than the profiler) give no ratio and are
left out, and "noise" says more than a third were. Both builds
run the workloads of this checkout's sgl_shapeprof.demo.models, loaded by
path. Run it before a change to recording lands; it is a benchmark, not a
test.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("written", "dedupe", "args")
# micro: x.add(1) on 8x8 in passes of 20 calls; long: the same in one pass of
# 20,000 calls; llama: tiny Llama, prefill and 24 decode passes; unet: tiny
# UNet, 10 denoising steps
WORKLOADS = ("micro", "long", "llama", "unet")

CHILD = r'''
import atexit, importlib.util, os, shutil, sys, tempfile, time, torch
torch.set_num_threads(1)
from sgl_shapeprof import ShapeProfiler
workload, mode, models = sys.argv[1], sys.argv[2], sys.argv[3]
spec = importlib.util.spec_from_file_location("bench_models", models)
dm = sys.modules["bench_models"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
spec.loader.exec_module(dm)

if workload in ("micro", "long"):
    x = torch.ones(8, 8)
    per = 20 if workload == "micro" else 20000
    def run(marker):
        for _ in range(10000 // per if workload == "micro" else 1):
            if marker: marker.start_forward_pass("decode")
            for _ in range(per): x.add(1)
            if marker: marker.end_forward_pass()
elif workload == "llama":
    model = dm.make_llama(torch.float32)
    def run(marker):
        dm.run_llama(model, marker, decode_steps=24)
else:
    unet = dm.make_unet()
    def run(marker):
        dm.run_diffusion(unet, marker, passes=1, steps=10)

def timed(marker):
    t0 = time.perf_counter()
    run(marker)
    return time.perf_counter() - t0

with torch.inference_mode():
    d = tempfile.mkdtemp(prefix="shapeprof-ab-child-")
    atexit.register(shutil.rmtree, d, True)  # its files run to hundreds of MB a run
    probe = ShapeProfiler(os.path.join(d, "probe.jsonl"))
    run(probe)
    probe.close()
    calls = sum(probe.stats()[k] for k in ("records", "dedupe_skipped"))
    run(None)
    base = min(timed(None) for _ in range(3))
    kw = {"args": True} if mode == "args" else {}
    try:
        prof = ShapeProfiler(os.path.join(d, "a.jsonl"), dedupe=mode == "dedupe", **kw)
    except TypeError:  # a build from before arguments were recorded
        print("nan")
        sys.exit(0)
    run(prof)
    t = min(timed(prof) for _ in range(3))
    prof.close()
print((t - base) / calls * 1e6)
'''


def median_ci(xs: list, conf: float = 0.95):
    """The median of xs and a distribution-free confidence interval for it
    (the k-th smallest and k-th largest, k from the binomial distribution
    with p = 1/2); (median, None, None) when too few values give one."""
    s, n = sorted(xs), len(xs)
    k, tail = 0, 0.0
    while True:  # k: the most values that may be cut from each end
        tail += math.comb(n, k) / 2 ** n
        if tail > (1 - conf) / 2:
            break
        k += 1
    if k == 0:
        return statistics.median(s), None, None
    return statistics.median(s), s[k - 1], s[n - k]


def build_baseline(ref: str, where: str) -> str:
    tree = os.path.join(where, "base")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-f", tree, ref], check=True,
                   capture_output=True, text=True)
    print(f"building {ref} in {tree} ...", file=sys.stderr, flush=True)
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ab.py: cannot build {ref}:\n{r.stderr[-3000:]}")
    return tree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD~1", help="the baseline git ref (default HEAD~1)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--workloads", default="micro,long,llama", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    modes = [m for m in args.modes.split(",") if m]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"ab.py: unknown workload {w!r} ({', '.join(WORKLOADS)})")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"ab.py: unknown mode {m!r} ({', '.join(MODES)})")
    models = os.path.join(ROOT, "sgl_shapeprof", "demo", "models.py")
    with tempfile.TemporaryDirectory(prefix="shapeprof-ab-") as tmp:
        base = build_baseline(args.base, tmp)
        try:
            trees = {"before": base, "after": ROOT}
            res = {(t, w, m): [] for t in trees for w in workloads for m in modes}
            for rnd in range(args.rounds):
                order = list(trees.items()) if rnd % 2 == 0 else list(trees.items())[::-1]
                print(f"round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
                for name, tree in order:
                    for w in workloads:
                        for m in modes:
                            r = subprocess.run([sys.executable, "-c", CHILD, w, m, models], capture_output=True,
                                               text=True, cwd=tmp, env=dict(os.environ, PYTHONPATH=tree, TMPDIR=tmp))
                            if r.returncode != 0:
                                raise SystemExit(f"ab.py: {name} {w} {m} failed:\n{r.stderr[-2000:]}")
                            res[(name, w, m)].append(float(r.stdout.strip().splitlines()[-1]))
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", base], capture_output=True)
    print(f"added cost per call (µs), medians of {args.rounds} interleaved rounds; "
          f"before = {args.base}, after = working tree; after/before: the median of the "
          f"rounds' own ratios [95% interval]")
    print(f"{'workload':10s} {'mode':8s} {'before':>8s} {'after':>8s} {'after/before':>12s} "
          f"{'interval':>13s}  verdict  after's range")
    for w in workloads:
        for m in modes:
            bs, as_ = res[("before", w, m)], res[("after", w, m)]
            b, a = statistics.median(bs), statistics.median(as_)
            if b != b:  # the baseline cannot run this mode
                print(f"{w:10s} {m:8s} {'n/a':>8s} {a:8.2f}")
                continue
            ratio, interval, verdict = compare(bs, as_)
            print(f"{w:10s} {m:8s} {b:8.2f} {a:8.2f} {ratio:>12s} {interval:>13s}  {verdict:7s}  "
                  f"{min(as_):.2f}-{max(as_):.2f}")


def compare(before: list, after: list) -> tuple:
    """after/before of the rounds' own ratios, its interval and the verdict,
    as text. A round whose added cost came out at or below zero in either
    build (the noise exceeded what the profiler adds) has no ratio: such
    rounds are left out and counted, and when they are more than a third
    of the rounds the verdict is "noise", not a ratio that means nothing."""
    pairs = [(x, y) for x, y in zip(before, after) if x > 0 and y > 0]
    left_out = len(before) - len(pairs)
    if left_out * 3 > len(before):
        return "-", f"({left_out} of {len(before)} <= 0)", "noise"
    ratio, lo, hi = median_ci([y / x for x, y in pairs])
    if lo is None:
        return f"{ratio:.2f}", "(few rounds)", "-"
    verdict = "lower" if hi < 1 else "higher" if lo > 1 else "same"
    return f"{ratio:.2f}", f"[{lo:.2f}, {hi:.2f}]", verdict


if __name__ == "__main__":
    main()
