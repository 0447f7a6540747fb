"""sgl_shapeprof benchmarks: what profiling adds per operator call.

    python benchmarks/run.py                 # timing table (all workloads)
    python benchmarks/run.py --memory        # RSS over 10 million logged calls
    python benchmarks/run.py --callgrind     # instructions per call (valgrind)
    python benchmarks/run.py --all           # all three (make bench)

Timing: rows run the same workload in interleaved rounds (row order rotates
each round); each row's time is the median over rounds, and the added cost is
(row - base) / calls against a base measured in the same process and rounds.
The two baselines that change process-wide state (torch.profiler, the Python
TorchDispatchMode logger) run in a child process with their own base. Ratios
compare rows of this run only, because these machines are noisy.

The floor (forward_only.py): a boxed fallback on sgl_shapeprof's key that
records nothing and only forwards, in the baseline process (timing) and in a
callgrind process of its own: what any dispatch-key hook pays per call, the
part of sgl_shapeprof's cost that is the dispatcher's.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import glob
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import torch  # noqa: E402
from reference_logger import ReferenceLogger  # noqa: E402  (the Python baseline)
from forward_only import ENV as FORWARD_ONLY_ENV, ForwardOnly, build as forward_only_lib  # noqa: E402

import sgl_shapeprof  # noqa: E402
from sgl_shapeprof import ShapeProfiler  # noqa: E402
from sgl_shapeprof.demo.models import make_llama, make_unet, run_diffusion, run_llama  # noqa: E402


# ---------------------------------------------------------------------------
# workloads: run(marker) executes a fixed number of operator calls
# ---------------------------------------------------------------------------
DEVICE = os.environ.get("SHAPEPROF_BENCH_DEVICE", "cpu")  # set by --device, also for child processes


def micro_workload(iters: int = 2000):
    a, b = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)

    def run(marker):
        with _marked(marker):
            for _ in range(iters):
                c = torch.add(a, b)
                c = torch.mul(c, b)
                torch.relu(c)
    return run


def _sync():
    if DEVICE != "cpu":
        torch.cuda.synchronize()


def llama_workload():
    # bfloat16 on a GPU, as served; float32 on CPU, where bf16 kernels are slow
    model = make_llama(torch.bfloat16 if DEVICE != "cpu" else torch.float32, device=DEVICE)

    def run(marker):  # 4 requests: each run writes > 1 MiB, so file growth is in every run
        for seed in range(4):
            run_llama(model, marker, batch=1, prompt_len=16, decode_steps=8, seed=seed)
    return run


def diffusion_workload():
    model = make_unet(device=DEVICE)

    def run(marker):
        run_diffusion(model, marker, passes=1, steps=50)
    return run


WORKLOADS = {"micro": micro_workload, "llama": llama_workload, "diffusion": diffusion_workload}


@contextlib.contextmanager
def _marked(marker):
    """Micro: one pass around the whole loop (models mark their own passes)."""
    if marker is None:
        yield
        return
    marker.start_forward_pass()
    try:
        yield
    finally:
        marker.end_forward_pass()


def _is_model(name: str) -> bool:
    return name != "micro"


# ---------------------------------------------------------------------------
# rows: each gives (marker, context) for one timed run
# ---------------------------------------------------------------------------
class Rows:
    """One long-lived marker per row, as a server keeps one profiler: the
    numbers are the steady state (dedupe on: repeats are the common case)."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.n = 0
        self.live = {}

    def _path(self, tag):
        self.n += 1
        return os.path.join(self.tmp, f"{tag}-{self.n}.jsonl")

    def _keep(self, key, make):
        if key not in self.live:
            self.live[key] = make()
        return self.live[key], contextlib.nullcontext()

    def close(self):
        for m in self.live.values():
            if hasattr(m, "close"):
                m.close()
        self.live.clear()

    def base(self):
        return None, contextlib.nullcontext()

    def python_logger(self):
        return self._keep("py", lambda: ReferenceLogger(self._path("py"), flush=True))

    def forward_only(self):
        lib = os.environ.get(FORWARD_ONLY_ENV)
        if not lib:
            return None, contextlib.nullcontext()
        if "forward_only" not in self.live:
            self.live["forward_only"] = ForwardOnly(lib)
        return self.live["forward_only"], contextlib.nullcontext()

    def torch_profiler(self):
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
        return None, prof

    def ours(self):
        return self._keep("ours", lambda: ShapeProfiler(self._path("ours")))

    def ours_dedupe(self):
        return self._keep("dedupe", lambda: ShapeProfiler(self._path("dedupe"), dedupe=True))

    def ours_args(self):
        return self._keep("args", lambda: ShapeProfiler(self._path("args"), args=True))

    def ours_args_dedupe(self):
        return self._keep("args_dedupe", lambda: ShapeProfiler(self._path("args_dedupe"), dedupe=True, args=True))

    def ours_time(self):
        return self._keep("time", lambda: ShapeProfiler(self._path("time"), time=True))

    def ours_time_dedupe(self):
        return self._keep("time_dedupe", lambda: ShapeProfiler(self._path("time_dedupe"), dedupe=True, time=True))

    def ours_nvtx(self):  # no NVTX tool attached: what every run without nsys pays
        return self._keep("nvtx", lambda: ShapeProfiler(self._path("nvtx"), nvtx=True))

    def ours_nvtx_dedupe(self):
        return self._keep("nvtx_dedupe", lambda: ShapeProfiler(self._path("nvtx_dedupe"), dedupe=True, nvtx=True))

    def ours_outside_pass(self):
        # every pass is a warm-up pass
        return self._keep("outside", lambda: ShapeProfiler(self._path("outside"), skip_warmup=10 ** 9))

    def ours_other_rank(self):
        os.environ.update(SGLANG_PROFILE_SHAPES="1", SGLANG_PROFILE_SHAPES_RANK="1",
                          SGLANG_PROFILE_SHAPES_FILE=self._path("rank"))
        try:
            marker = sgl_shapeprof.from_env(rank=0)
        finally:
            for k in ("SGLANG_PROFILE_SHAPES", "SGLANG_PROFILE_SHAPES_RANK", "SGLANG_PROFILE_SHAPES_FILE"):
                os.environ.pop(k, None)
        assert marker is None
        return None, contextlib.nullcontext()


ROW_ORDER = [
    ("base", "no profiler"),
    ("python_logger", "Python TorchDispatchMode logger, flush per record"),
    ("torch_profiler", "torch.profiler(record_shapes=True)"),
    ("forward_only", "a boxed fallback that only forwards (the floor)"),
    ("ours", "sgl_shapeprof, every call written"),
    ("ours_dedupe", "sgl_shapeprof, dedupe on"),
    ("ours_args", "sgl_shapeprof, arguments on, every call written"),
    ("ours_args_dedupe", "sgl_shapeprof, arguments on, dedupe on"),
    ("ours_time", "sgl_shapeprof, timed, every call written"),
    ("ours_time_dedupe", "sgl_shapeprof, timed, dedupe on"),
    ("ours_nvtx", "sgl_shapeprof, NVTX (no tool), every call written"),
    ("ours_nvtx_dedupe", "sgl_shapeprof, NVTX (no tool), dedupe on"),
    ("ours_outside_pass", "sgl_shapeprof, outside a logged pass"),
    ("ours_other_rank", "sgl_shapeprof, rank not profiled"),
]
LABELS = dict(ROW_ORDER)
# Once torch.profiler has run, every later op in the process costs more
# (measured: our deduplicated repeat 0.11 -> 0.18 us, the base 3% more), and
# the Python logger's mode leaves state behind too. These baselines therefore
# run in a child process, interleaved with a base of their own; each row's
# added cost is against the base of its own process.
# The forward-only fallback sits on sgl_shapeprof's key: it too runs there.
BASELINE_ROWS = ["base", "python_logger", "torch_profiler", "forward_only"]
OUR_ROWS = ["base", "ours", "ours_dedupe", "ours_args", "ours_args_dedupe", "ours_time", "ours_time_dedupe",
            "ours_nvtx", "ours_nvtx_dedupe", "ours_outside_pass", "ours_other_rank"]


def count_calls(run) -> tuple:
    """Operator calls per run, and bytes/records of one full write (under
    inference_mode, like the timed runs)."""
    with tempfile.TemporaryDirectory() as d, torch.inference_mode():
        p = ShapeProfiler(os.path.join(d, "c.jsonl"))
        run(p)
        p.close()
        st = p.stats()
        summary = json.load(open(p.summary_path))
    calls = sum(summary["operation_counts"].values())
    return calls, st["bytes"], st["records"]


def time_rows(name: str, rounds: int, keys: list, tmp: str) -> dict:
    """Median seconds per run of each row in keys, interleaved."""
    run = WORKLOADS[name]()
    rows = Rows(tmp)
    times = {k: [] for k in keys}
    with torch.inference_mode():
        for key in keys:  # warm: caches, allocators, each row's first-seen signatures
            marker, ctx = getattr(rows, key)()
            with ctx:
                run(marker)
        for r in range(rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)]
            for key in order:
                marker, ctx = getattr(rows, key)()
                gc.collect()  # no row pays for the previous row's garbage
                gc.disable()
                try:
                    with ctx:
                        _sync()
                        t0 = time.perf_counter()
                        run(marker)
                        _sync()
                        dt = time.perf_counter() - t0
                finally:
                    gc.enable()
                times[key].append(dt)
    rows.close()
    return {k: statistics.median(v) for k, v in times.items()}


def bench_workload(name: str, rounds: int, tmp: str) -> dict:
    calls, nbytes, records = count_calls(WORKLOADS[name]())
    ours = time_rows(name, rounds, OUR_ROWS, tmp)
    keys = BASELINE_ROWS if os.environ.get(FORWARD_ONLY_ENV) else BASELINE_ROWS[:-1]
    child = subprocess.run([sys.executable, __file__, "--baseline-child", name, str(rounds), ",".join(keys)],
                           capture_output=True, text=True)
    if child.returncode != 0:
        raise SystemExit(f"baseline process failed:\n{child.stderr[-3000:]}")
    baselines = json.loads(child.stdout.strip().splitlines()[-1])
    out = {"workload": name, "calls": calls, "rounds": rounds, "bytes_per_record": nbytes / max(records, 1),
           "base_s": ours["base"], "baseline_process_base_s": baselines["base"], "rows": {}}
    for group in (ours, baselines):
        for key, med in group.items():
            if key == "base" and group is baselines:
                continue
            out["rows"][key] = {"label": LABELS[key], "median_s": med,
                                "added_us_per_call": (med - group["base"]) / calls * 1e6,
                                "slowdown": med / group["base"]}
    out["records_per_s"] = records / ours["ours"]
    return out


def print_timing(results: list) -> None:
    gpu = f", {torch.cuda.get_device_name()}" if DEVICE != "cpu" else ""
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu}, torch {torch.__version__}, "
          f"device {DEVICE}, 1 intra-op thread, median of interleaved rounds\n")
    for res in results:
        rows = res["rows"]
        ours = rows["ours"]["added_us_per_call"]
        print(f"== {res['workload']}: {res['calls']} operator calls per run, {res['rounds']} rounds, "
              f"base {rows['base']['median_s'] * 1e3:.2f} ms ({rows['base']['median_s'] / res['calls'] * 1e6:.2f} us/call); "
              f"baseline process's base {res['baseline_process_base_s'] * 1e3:.2f} ms")
        print(f"{'':52} {'added us/call':>13} {'x base time':>11} {'x ours':>8}")
        for key, label in ROW_ORDER:
            r = rows.get(key)
            if r is None:
                continue
            ratio = r["added_us_per_call"] / ours if ours > 0 and key != "base" else float("nan")
            print(f"  {label:50} {r['added_us_per_call']:>13.3f} {r['slowdown']:>11.2f} "
                  f"{'' if key == 'base' else f'{ratio:>8.1f}'}")
        print(f"  bytes per record {res['bytes_per_record']:.0f}, records/s while logging "
              f"{res['records_per_s']:,.0f}\n")


# ---------------------------------------------------------------------------
# memory over 10M logged calls (in a child process, fresh RSS)
# ---------------------------------------------------------------------------
MEM_CHILD = r'''
import os, sys, json, torch
sys.path.insert(0, sys.argv[1])
from sgl_shapeprof import ShapeProfiler
torch.set_num_threads(1)
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
total, dedupe, path = int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
a = torch.randn(4)
p = ShapeProfiler(path, dedupe=dedupe)
marks = {}
done = 0
with torch.inference_mode():
    p.start_forward_pass()
    for step in (total // 10, total):
        while done < step:
            for _ in range(10000):
                torch.neg(a)
            done += 10000
        marks[done] = rss_kib()
    p.end_forward_pass()
p.close()
print(json.dumps({"calls": done, "rss_kib": marks, "stats": p.stats(), "file_bytes": os.path.getsize(path)}))
'''


def bench_memory(total: int, tmp: str) -> list:
    out = []
    for dedupe in (False, True):
        path = os.path.join(tmp, f"mem-{int(dedupe)}.jsonl")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", MEM_CHILD, ROOT, str(total), str(int(dedupe)), path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"memory child failed:\n{r.stderr}")
        res = json.loads(r.stdout)
        res["dedupe"] = dedupe
        res["seconds"] = time.perf_counter() - t0
        out.append(res)
        os.unlink(path)
    print("== memory: RSS while logging (one process per row)")
    for res in out:
        marks = {int(k): v for k, v in res["rss_kib"].items()}
        first, last = min(marks), max(marks)
        print(f"  dedupe {'on ' if res['dedupe'] else 'off'}: RSS {marks[first] / 1024:.1f} MiB after "
              f"{first:,} calls, {marks[last] / 1024:.1f} MiB after {last:,} calls "
              f"(growth {(marks[last] - marks[first]) / 1024:+.1f} MiB); file {res['file_bytes'] / 2**20:,.0f} MiB, "
              f"{res['seconds']:.0f} s")
    return out


# ---------------------------------------------------------------------------
# callgrind: instructions per call, no timing noise
# ---------------------------------------------------------------------------
CG_HELPER = r'''
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
'''

CG_SEGMENTS = ["base", "ours", "ours_dedupe", "ours_args", "ours_args_dedupe", "ours_outside_pass",
               "ours_time_dedupe", "ours_nvtx_dedupe"]
# in a process of its own (its fallback sits on sgl_shapeprof's key)
CG_FORWARD_ONLY = ["base", "forward_only"]


def callgrind_child(helper: str, n: int, segments: list = CG_SEGMENTS) -> None:
    lib = ctypes.CDLL(helper)
    lib.cg_dump.argtypes = [ctypes.c_char_p]
    torch.set_num_threads(1)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    tmp = tempfile.mkdtemp()
    markers = {
        "base": lambda: None,
        "ours": lambda: ShapeProfiler(os.path.join(tmp, "o.jsonl")),
        "ours_dedupe": lambda: ShapeProfiler(os.path.join(tmp, "d.jsonl"), dedupe=True),
        "ours_args": lambda: ShapeProfiler(os.path.join(tmp, "a.jsonl"), args=True),
        "ours_args_dedupe": lambda: ShapeProfiler(os.path.join(tmp, "ad.jsonl"), dedupe=True, args=True),
        "ours_outside_pass": lambda: ShapeProfiler(os.path.join(tmp, "w.jsonl"), skip_warmup=10 ** 9),
        "ours_time_dedupe": lambda: ShapeProfiler(os.path.join(tmp, "td.jsonl"), dedupe=True, time=True),
        "ours_nvtx_dedupe": lambda: ShapeProfiler(os.path.join(tmp, "nd.jsonl"), dedupe=True, nvtx=True),
        "forward_only": lambda: ForwardOnly(os.environ[FORWARD_ONLY_ENV]),
    }
    markers = {k: v for k, v in markers.items() if k in segments}

    def loop(count):
        for _ in range(count):
            torch.add(a, b)

    lib.cg_start()
    with torch.inference_mode():
        for seg in segments:
            m = markers[seg]()
            if m is not None:
                m.start_forward_pass()
            loop(200)  # warm: op interning, first records, page faults
            lib.cg_zero()
            lib.cg_toggle()
            loop(n)
            lib.cg_toggle()
            lib.cg_dump(seg.encode())
            if m is not None:
                m.end_forward_pass()
                if hasattr(m, "close"):
                    m.close()
    shutil.rmtree(tmp, ignore_errors=True)


def have_callgrind() -> bool:
    return bool(shutil.which("valgrind")) and os.path.exists("/usr/include/valgrind/callgrind.h")


def callgrind_helper(tmp: str) -> str:
    """Builds the client-request helper (CG_HELPER) a child toggles counting with."""
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    helper = os.path.join(tmp, "cg_helper.so")
    src = os.path.join(tmp, "cg_helper.c")
    open(src, "w").write(CG_HELPER)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", helper, src], check=True)
    return helper


def callgrind_module_cost(path: str, module: str) -> int:
    """Instructions spent in the code of one shared object (its functions,
    with what they inline from headers), from a callgrind dump: the cost
    lines under each ob=, less the inclusive cost of the calls out of it."""
    names, ob, total, after_call = {}, None, 0, False
    with open(path) as f:
        for line in f:
            if line.startswith(("ob=", "cob=")):
                m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("ob="):
                    ob = names.get(m.group(1), "")
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the call's, inclusive
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                elif module in ob:
                    parts = line.split()
                    total += int(parts[1]) if len(parts) > 1 else 0
    return total


def callgrind_totals(argv: list, out_base: str) -> dict:
    """Runs `python argv...` under callgrind (counting only where the child
    asks) and returns each dumped segment's instructions, by dump name, and
    (under "module:" + name) those spent in sgl_shapeprof's own _C."""
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           f"--callgrind-out-file={out_base}", sys.executable, *argv]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"callgrind run failed:\n{r.stderr[-3000:]}")
    totals = {}
    for f in glob.glob(out_base + "*"):
        text = open(f).read()
        m = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
        t = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if m and t:
            totals[m.group(1)] = int(t.group(1))
            totals["module:" + m.group(1)] = callgrind_module_cost(f, "sgl_shapeprof/_C.")
    return totals


def bench_callgrind(n: int, tmp: str) -> dict:
    if not have_callgrind():
        print("== callgrind: skipped (needs valgrind and its headers: apt-get install valgrind)")
        return {}
    helper = callgrind_helper(tmp)
    print(f"== callgrind: {n} calls of aten.add per segment (takes a minute or two)", flush=True)
    totals = callgrind_totals([__file__, "--callgrind-child", helper, str(n)], os.path.join(tmp, "cg.out"))
    base = totals["base"] / n
    res = {"n": n, "instructions_per_call": {k: totals[k] / n for k in CG_SEGMENTS}}
    print(f"  base call (torch.add from Python, 8x8): {base:,.0f} instructions")
    if os.environ.get(FORWARD_ONLY_ENV):
        floor = callgrind_totals([__file__, "--callgrind-child", helper, str(n), ",".join(CG_FORWARD_ONLY)],
                                 os.path.join(tmp, "cg-floor.out"))
        added = (floor["forward_only"] - floor["base"]) / n
        res["forward_only_added"] = added
        print(f"  {'a boxed fallback that only forwards':40} {added:+,.0f} instructions per call "
              f"(its own process)")
    for k, label in [("ours", "logged and written"), ("ours_dedupe", "logged, deduplicated"),
                     ("ours_args", "arguments on, logged and written"),
                     ("ours_args_dedupe", "arguments on, deduplicated"),
                     ("ours_outside_pass", "profiler on, outside a logged pass"),
                     ("ours_time_dedupe", "timed, deduplicated"),
                     ("ours_nvtx_dedupe", "NVTX ranges, no tool, deduplicated")]:
        print(f"  {label:40} {totals[k] / n - base:+,.0f} instructions per call")
    # The guard that the heap's state does not move (it moves the rows above
    # by about +-60): what runs inside our module.
    res["module_per_call"] = {k: totals["module:" + k] / n for k in CG_SEGMENTS}
    print("  inside sgl_shapeprof's _C (its functions and what they inline): "
          f"written {totals['module:ours'] / n:,.0f}, deduplicated {totals['module:ours_dedupe'] / n:,.0f}, "
          f"arguments on {totals['module:ours_args'] / n:,.0f} and {totals['module:ours_args_dedupe'] / n:,.0f}; "
          f"timed and deduplicated {totals['module:ours_time_dedupe'] / n:,.0f}, NVTX (no tool) and "
          f"deduplicated {totals['module:ours_nvtx_dedupe'] / n:,.0f}")
    return res


def main() -> None:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="micro,llama,diffusion")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--memory", action="store_true", help="RSS over --memory-calls logged calls")
    ap.add_argument("--memory-calls", type=int, default=10_000_000)
    ap.add_argument("--callgrind", action="store_true", help="instructions per call under valgrind")
    ap.add_argument("--callgrind-calls", type=int, default=20000)
    ap.add_argument("--all", action="store_true", help="timing, memory and callgrind")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--device", default=DEVICE, help="cpu (default) or cuda: where the workloads run")
    ap.add_argument("--callgrind-child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    DEVICE = os.environ["SHAPEPROF_BENCH_DEVICE"] = args.device
    if DEVICE != "cpu" and not torch.cuda.is_available():
        raise SystemExit(f"--device {DEVICE}: no CUDA device here")
    if args.baseline_child:
        torch.set_num_threads(1)
        with tempfile.TemporaryDirectory(prefix="shapeprof-bench-") as tmp:
            med = time_rows(args.baseline_child[0], int(args.baseline_child[1]),
                            args.baseline_child[2].split(","), tmp)
        print(json.dumps(med))
        return
    if args.callgrind_child:
        segments = args.callgrind_child[2].split(",") if len(args.callgrind_child) > 2 else CG_SEGMENTS
        callgrind_child(args.callgrind_child[0], int(args.callgrind_child[1]), segments)
        return
    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory(prefix="shapeprof-bench-") as tmp:
        run_timing = not (args.memory or args.callgrind) or args.all
        if run_timing or args.callgrind:
            lib = forward_only_lib()
            if lib:
                os.environ[FORWARD_ONLY_ENV] = lib
        if run_timing:
            names = [w for w in args.workloads.split(",") if w]
            for w in names:
                if w not in WORKLOADS:
                    raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
            results["timing"] = []
            for w in names:
                print(f"running {w} ...", file=sys.stderr, flush=True)
                results["timing"].append(bench_workload(w, args.rounds, tmp))
            print_timing(results["timing"])
        if args.memory or args.all:
            results["memory"] = bench_memory(args.memory_calls, tmp)
        if args.callgrind or args.all:
            results["callgrind"] = bench_callgrind(args.callgrind_calls, tmp)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results["peak_rss_kib"] = peak
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
