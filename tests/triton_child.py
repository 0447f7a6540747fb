"""Runs Triton kernels under Triton's interpreter (TRITON_INTERPRET=1, set by
the caller before Triton is imported) inside and outside logged passes, and
prints one JSON object: what each scenario passed to its kernels (the
tests' oracle, computed here from the arguments, never from our records)
and where the records went. Used by tests/test_triton.py."""
import json
import os
import sys
import threading
import time

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from sgl_shapeprof import ShapeProfiler

out_dir = sys.argv[1]
ORIGINAL_RUN = interpreter.InterpretedFunction.__dict__["run"]
report = {}


@triton.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, ACT: tl.constexpr,
              USE_Y: tl.constexpr = True):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if USE_Y:
        x = x + tl.load(y_ptr + offs, mask=mask)
    if ACT == 1:
        x = tl.maximum(x, 0.0)
    tl.store(out_ptr + offs, x * alpha, mask=mask)


def tensor(t):
    return {"shape": list(t.shape), "dtype": str(t.dtype)}


# -- plain launches: tuple grid, callable grid, keywords, launch options ------
x, y = torch.randn(100), torch.randn(100)
out = torch.empty(100)
h = torch.randn(3, 40, dtype=torch.float16)
o16 = torch.empty(3, 40, dtype=torch.float16)
path = os.path.join(out_dir, "plain.jsonl")
expected = []
with ShapeProfiler(path) as prof:
    scale_add[(4,)](x, y, out, 100, 2.0, BLOCK=32, ACT=0)  # outside passes
    report["outside_is_triton_own"] = interpreter.InterpretedFunction.__dict__["run"] is ORIGINAL_RUN
    with prof.forward_pass("decode"):
        report["inside_is_triton_own"] = interpreter.InterpretedFunction.__dict__["run"] is ORIGINAL_RUN
        scale_add[(4,)](x, y, out, 100, 2.0, BLOCK=32, ACT=0)
        expected.append({"inputs": {"x_ptr": tensor(x), "y_ptr": tensor(y), "out_ptr": tensor(out)},
                         "args": {"n": 100, "alpha": 2.0, "BLOCK": 32, "ACT": 0, "USE_Y": True,
                                  "grid": [4]}})
        # (a grid of meta["BLOCK"] only: Triton 3.6's interpreter passes non-constexpr values as its own tensors)
        scale_add[lambda meta: (triton.cdiv(120, meta["BLOCK"]),)](
            h, h, o16, n=120, alpha=0.5, BLOCK=64, ACT=1, USE_Y=False, num_warps=8, num_stages=2)
        expected.append({"inputs": {"x_ptr": tensor(h), "y_ptr": tensor(h), "out_ptr": tensor(o16)},
                         "args": {"n": 120, "alpha": 0.5, "BLOCK": 64, "ACT": 1, "USE_Y": False,
                                  "grid": [-(-120 // 64)], "num_warps": 8, "num_stages": 2}})
        # a launch on a thread that runs no pass: it belongs to this pass
        t = threading.Thread(target=lambda: scale_add[(1,)](x, y, out, 16, 1.0, BLOCK=16, ACT=0))
        t.start()
        t.join()
        expected.append({"inputs": {"x_ptr": tensor(x), "y_ptr": tensor(y), "out_ptr": tensor(out)},
                         "args": {"n": 16, "alpha": 1.0, "BLOCK": 16, "ACT": 0, "USE_Y": True,
                                  "grid": [1]}})
    report["after_is_triton_own"] = interpreter.InterpretedFunction.__dict__["run"] is ORIGINAL_RUN
    scale_add[(4,)](x, y, out, 100, 2.0, BLOCK=32, ACT=0)  # outside again
report["plain"] = {"path": path, "expected": expected,
                   "result_ok": bool(torch.allclose(out, (x + y) * 2.0)
                                    and torch.allclose(o16.float(), torch.relu(h.float()) * 0.5, atol=1e-3))}

# -- timed: each launch's own time, at most what its caller waited --------------
path = os.path.join(out_dir, "timed.jsonl")
waited = []
with ShapeProfiler(path, time=True) as prof:
    with prof.forward_pass():
        for n in (100, 60, 100):
            t0 = time.perf_counter_ns()
            scale_add[(4,)](x, y, out, n, 2.0, BLOCK=32, ACT=0)
            waited.append(time.perf_counter_ns() - t0)
report["timed"] = {"path": path, "waited_ns": waited}

# -- deduplication: true counts -----------------------------------------------
path = os.path.join(out_dir, "dedupe.jsonl")
with ShapeProfiler(path, dedupe=True) as prof:
    for step in range(3):
        with prof.forward_pass():
            for alpha in (0.1 * step, 0.2):  # floats do not make a new signature
                scale_add[(4,)](x, y, out, 100, alpha, BLOCK=32, ACT=0)
            scale_add[(2,)](x, y, out, 50, 1.0, BLOCK=32, ACT=0)
report["dedupe"] = {"path": path, "calls": {"n=100": 6, "n=50": 3}}

# -- a graph capture: its launches stand for every replay ----------------------
path = os.path.join(out_dir, "graph.jsonl")
with ShapeProfiler(path, dedupe=True) as prof:
    with prof.capture_graph(8, "decode"):
        scale_add[(4,)](x, y, out, 100, 2.0, BLOCK=32, ACT=0)
    for _ in range(2):
        with prof.forward_pass("decode"):
            prof.graph_replayed(8, 3)
report["graph"] = {"path": path, "key": 8, "replays": 6}

# -- two kernel objects of one function name, each with its own default ------
def twin_one(x_ptr, n, K: tl.constexpr = 1):
    offs = tl.arange(0, 16)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * K, mask=offs < n)


def twin_two(x_ptr, n, K: tl.constexpr = 2):
    offs = tl.arange(0, 16)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * K, mask=offs < n)


# one qualified name, as a kernel made by a factory twice has
twin_one.__qualname__ = twin_two.__qualname__ = "twin"
twin_one, twin_two = triton.jit(twin_one), triton.jit(twin_two)
path = os.path.join(out_dir, "twins.jsonl")
with ShapeProfiler(path) as prof:
    with prof.forward_pass():
        twin_one[(1,)](x, 16)
        twin_two[(1,)](x, 16)
report["twins"] = {"path": path, "operation": "triton:__main__.twin", "K": [1, 2]}

# -- a launch that raises -------------------------------------------------------
path = os.path.join(out_dir, "error.jsonl")
with ShapeProfiler(path) as prof:
    with prof.forward_pass():
        try:
            scale_add[(1,)](x, y, out, 100, 1.0, BLOCK=30, ACT=0)  # arange needs a power of 2
        except Exception as e:
            report["error"] = {"path": path, "type": type(e).__name__, "message": str(e)}

# -- an autotuned kernel: only the chosen config's launch is recorded ----------
bench_calls = []


def stand_in_bench(kernel_call, quantiles):
    """What triton.testing.do_bench does on a GPU, on the CPU: a cache
    buffer, zeroed before each repetition, and the kernel run; the second
    config is made the fastest."""
    cache = torch.empty(256, dtype=torch.int8)
    for _ in range(3):
        cache.zero_()
        kernel_call()
    bench_calls.append(1)
    t = 2.0 if len(bench_calls) == 1 else 1.0
    return [t, t, t]


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=2, num_stages=1),
                          triton.Config({"BLOCK": 32}, num_warps=4, num_stages=2)],
                 key=["n"], do_bench=stand_in_bench)
@triton.jit
def tuned_inc(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


path = os.path.join(out_dir, "autotune.jsonl")
z = torch.zeros(64)
with ShapeProfiler(path) as prof:
    with prof.forward_pass():
        tuned_inc[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](z, 64)
    best = tuned_inc.best_config
    benchmarks = len(bench_calls)
    with prof.forward_pass():  # the benchmark's own operators, when they are the model's
        stand_in_bench(lambda: None, None)
report["autotune"] = {"path": path, "benchmarks": benchmarks,
                      "chosen": {"BLOCK": best.kwargs["BLOCK"], "num_warps": best.num_warps,
                                 "num_stages": best.num_stages},
                      "grid": [-(-64 // best.kwargs["BLOCK"])], "x": tensor(z)}
print(json.dumps(report))
