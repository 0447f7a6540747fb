"""The GPU check: one command that says whether sgl_shapeprof tells the truth
and what it costs on the device it finds (`make gpu-check`).

    python benchmarks/gpu_check.py [--out DIR] [--reduced] [--only NAMES]

With CUDA: the full check, sized to end within about 6 minutes on one H100
(the build before it takes about one). Without CUDA (CI): the same checks,
reduced to tiny models on the CPU, in seconds; the CUDA-only ones (graphs,
sync blame) say "skip" with the reason. Writes DIR/report.md and
DIR/report.json (DIR: --out, else $SHAPEPROF_GPU_CHECK_OUT, else
./gpu-check); exits 1 if any check fails.

Checks:
  parity     every call against the TorchDispatchMode reference logger:
             dense Llama-like and MoE (transformers, random weights) and a
             DiT, bf16 and fp16, eager (no_grad) and inference_mode
  graphs     a CUDA graph captured inside a logged pass: its calls recorded
             once with the replay count; outputs bitwise equal to a run
             without the profiler; the hot path never waits for the device
             (a long torch.cuda._sleep queued first stays running while 300
             logged calls are made), with sync mode as the control that does
  sync       an out-of-range index_select blamed on the call that launched
             it; a graph captured inside an open sync pass still captures
  custom_ops torch.library.custom_op calls on the device recorded
  triton     Triton launches (compiled, on the GPU): a plain kernel and an
             autotuned one (Triton's own do_bench) recorded once each with
             the config that ran (the autotuner's best_config, num_warps
             from the compiled kernel), none of the benchmark's operators;
             Triton's own run() outside passes; the us a launch costs off
             and in a pass, interleaved (skip without CUDA and Triton: the
             interpreter's path is tests/test_triton.py)
  kill       SIGKILL during a device run: records that parse, a summary
             that agrees with them
  cost       Llama-like (about 1B parameters in bf16 on a GPU): decode at
             batch 1 and 32, a 2k-token prefill, eager and CUDA-graph
             decode; off, armed, written, deduplicated, torch.profiler
             (record_shapes) and the Python logger, interleaved; the ratio
             to off per round, median and 95% interval
"""
import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# sgl_shapeprof: as installed, or the checkout's in-place build (make
# gpu-check puts the checkout on PYTHONPATH; children inherit it)
sys.path[:0] = [os.path.join(ROOT, "tests"), HERE]


def preflight() -> None:
    """Before the build, with no network: one line naming all that is
    missing to build the module in place against this Python's torch."""
    import shutil
    import sysconfig
    missing = []
    try:
        import setuptools
        if tuple(int(x) for x in setuptools.__version__.split(".")[:1]) < (64,):
            missing.append(f"setuptools >= 64 (have {setuptools.__version__})")
    except ImportError:
        missing.append("setuptools >= 64")
    try:
        import torch  # noqa: F401
    except ImportError:
        missing.append(f"torch (in {sys.executable})")
    cxx = os.environ.get("CXX", "c++").split()[0]
    if not shutil.which(cxx):
        missing.append(f"a C++ compiler ({cxx})")
    if not shutil.which(os.environ.get("CC", "cc").split()[0]):
        missing.append("a C compiler (cc)")
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        missing.append(f"Python's headers ({include}/Python.h: python3-dev)")
    if missing:
        sys.exit("gpu_check: cannot build here, missing: " + "; ".join(missing))
    print(f"gpu_check: can build with {sys.executable}", flush=True)


if __name__ == "__main__" and "--preflight" in sys.argv:
    preflight()
    sys.exit(0)

import torch  # noqa: E402

from ab import median_ci  # noqa: E402
from reference_logger import ReferenceLogger  # noqa: E402
from sgl_shapeprof import OnRequestProfiler, ShapeProfiler  # noqa: E402
from sgl_shapeprof.demo.models import LlamaConfig, make_llama  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
FIELDS = ("forward_pass", "phase", "operation", "inputs", "outputs", "error", "graph")


class Skip(Exception):
    """A check that cannot run here; str() says why."""


def sync():
    if CUDA:
        torch.cuda.synchronize()


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def explained(a, b):
    """Why a reference record may differ from ours and both be true: while
    any TorchDispatchMode is active, at::isTensorSubclassLike() holds, so
    aten.reshape of a viewable strided tensor decomposes to aten.view under
    the reference logger and to aten._reshape_alias without it (same input,
    same output shape)."""
    if (a.get("operation"), b.get("operation")) == ("aten.view.default", "aten._reshape_alias.default") \
            and a.get("outputs") == b.get("outputs") \
            and a["inputs"].get("self") == b["inputs"].get("self"):
        return "reshape: aten.view under a TorchDispatchMode, aten._reshape_alias without one"
    return None


def differences(ref, ours):
    """(unexplained, explained) differences between the two streams, as
    short lines."""
    bad, why = [], []
    for i, (a, b) in enumerate(zip(ref, ours)):
        keys = [k for k in FIELDS if a.get(k) != b.get(k)]
        if not keys:
            continue
        reason = explained(a, b)
        if reason:
            why.append(f"record {i + 1}: {reason}")
        else:
            bad += [f"record {i + 1}: {k} {a.get(k)!r} vs {b.get(k)!r}" for k in keys]
    if len(ref) != len(ours):
        bad.append(f"reference has {len(ref)} records, ours {len(ours)}")
    return bad, why


def record_both(tmp, name, work, **opts):
    ref = ReferenceLogger(os.path.join(tmp, f"{name}.ref.jsonl"), **opts)
    try:
        work(ref)
    finally:
        ref.close()
    prof = ShapeProfiler(os.path.join(tmp, f"{name}.jsonl"), **opts)
    try:
        work(prof)
    finally:
        prof.close()
    return load(ref.path), load(prof.path)


# ---------------------------------------------------------------- models --
def dense_lm(reduced):
    import transformers
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2) if reduced else \
        dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=4)
    cfg = transformers.LlamaConfig(vocab_size=512, max_position_embeddings=256, **size)
    return transformers.LlamaForCausalLM(cfg)


def moe_lm(reduced):
    import transformers
    size = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2) if reduced else \
        dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=4)
    cfg = transformers.MixtralConfig(vocab_size=512, max_position_embeddings=256, num_local_experts=4,
                                     num_experts_per_tok=2, **size)
    return transformers.MixtralForCausalLM(cfg)


class DiT(torch.nn.Module):
    """A small diffusion transformer: patchify, adaLN-modulated blocks
    conditioned on the timestep, unpatchify (no library needed)."""

    def __init__(self, dim=64, depth=2, heads=4, patch=2, channels=4):
        super().__init__()
        self.patch, self.channels, self.heads = patch, channels, heads
        self.embed = torch.nn.Linear(channels * patch * patch, dim)
        self.time = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.SiLU(), torch.nn.Linear(dim, dim))
        self.blocks = torch.nn.ModuleList(torch.nn.ModuleDict({
            "ada": torch.nn.Linear(dim, 6 * dim), "norm1": torch.nn.LayerNorm(dim, elementwise_affine=False),
            "qkv": torch.nn.Linear(dim, 3 * dim), "proj": torch.nn.Linear(dim, dim),
            "norm2": torch.nn.LayerNorm(dim, elementwise_affine=False),
            "mlp": torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(approximate="tanh"),
                                       torch.nn.Linear(4 * dim, dim))}) for _ in range(depth))
        self.out = torch.nn.Linear(dim, channels * patch * patch)

    def forward(self, x, t):
        b, c, h, w = x.shape
        p = self.patch
        tokens = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
        z = self.embed(tokens)
        half = z.shape[-1] // 2
        freqs = torch.exp(-torch.arange(half, device=x.device, dtype=torch.float32) * 9.21 / half)
        temb = self.time(torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], -1).to(z.dtype))
        for blk in self.blocks:
            s1, g1, a1, s2, g2, a2 = blk["ada"](torch.nn.functional.silu(temb))[:, None].chunk(6, dim=-1)
            y = blk["norm1"](z) * (1 + g1) + s1
            q, k, v = blk["qkv"](y).reshape(b, -1, 3, self.heads, z.shape[-1] // self.heads).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(z.shape)
            z = z + a1 * blk["proj"](y)
            z = z + a2 * blk["mlp"](blk["norm2"](z) * (1 + g2) + s2)
        out = self.out(z).reshape(b, h // p, w // p, c, p, p).permute(0, 3, 1, 4, 2, 5)
        return out.reshape(b, c, h, w)


# ---------------------------------------------------------------- checks --
def check_parity(tmp, reduced):
    """0 differences from the reference, per model x dtype x grad mode."""
    import transformers  # noqa: F401  (the LMs need it: say so as a skip)
    rows, failures, reasons = [], [], set()
    for name, make in (("llama", dense_lm), ("mixtral-moe", moe_lm), ("dit", lambda r: DiT())):
        for dtype in (torch.bfloat16, torch.float16):
            torch.manual_seed(0)
            model = make(reduced).to(DEVICE, dtype).eval()
            for grad in ("no_grad", "inference_mode"):
                ctx = torch.no_grad if grad == "no_grad" else torch.inference_mode

                def work(marker):
                    torch.manual_seed(1)
                    with ctx():
                        if name == "dit":
                            x = torch.randn(2, 4, 8, 8, device=DEVICE, dtype=dtype)
                            for step in range(3):
                                marker.start_forward_pass("denoise")
                                x = x - 0.1 * model(x, torch.full((2,), 900.0 - 300 * step, device=DEVICE))
                                marker.end_forward_pass()
                        else:
                            ids = torch.randint(1, 512, (2, 12), device=DEVICE)
                            for step, t in enumerate((ids, ids[:, -1:], ids[:, -1:])):
                                marker.start_forward_pass("prefill" if step == 0 else "decode")
                                model(t)
                                marker.end_forward_pass()
                    sync()
                ref, ours = record_both(tmp, f"{name}-{dtype}-{grad}", work)
                diff, why = differences(ref, ours)
                rows.append({"model": name, "dtype": str(dtype), "mode": grad, "records": len(ours),
                             "reference": len(ref), "differences": len(diff), "explained": len(why)})
                failures += [f"{name} {dtype} {grad}: {d}" for d in diff[:3]]
                reasons.update(w.split(": ", 1)[1] for w in why)
                if not ref:
                    failures.append(f"{name} {dtype} {grad}: the reference logged nothing")
    total = sum(r["records"] for r in rows)
    return {"ok": not failures, "summary": f"{total} records in {len(rows)} runs, "
                                           f"{sum(r['differences'] for r in rows)} unexplained differences, "
                                           f"{sum(r['explained'] for r in rows)} explained",
            "rows": rows, "failures": failures, "explained": sorted(reasons)}


def check_graphs(tmp, reduced):
    if not CUDA:
        raise Skip("needs CUDA graphs")
    failures = []
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256)).to("cuda", torch.bfloat16)
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)

    def captured(prof):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.inference_mode():
            model(x)  # warm-up on a side stream, as capture wants
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.inference_mode():
            cm = prof.capture_graph(8) if prof is not None else contextlib.nullcontext()
            with cm, torch.cuda.graph(g):
                y = model(x)
        outs = []
        for _ in range(5):
            cm = prof.forward_pass("decode") if prof is not None else contextlib.nullcontext()
            with cm:
                g.replay()
                if prof is not None:
                    prof.graph_replayed(8)
            sync()
            outs.append(y.clone())
        return outs
    plain = captured(None)
    prof = ShapeProfiler(os.path.join(tmp, "graphs.jsonl"))
    ours = captured(prof)
    prof.close()
    if not all(torch.equal(a, b) for a, b in zip(plain, ours)):
        failures.append("replayed outputs differ from the run without the profiler")
    recs = load(prof.path)
    summary = json.load(open(prof.summary_path))
    graph = summary.get("graphs", {}).get("8", {})
    if not recs or any(r.get("graph") != 8 or r["forward_pass"] != 0 for r in recs):
        failures.append(f"captured calls not recorded once as graph 8: {len(recs)} records")
    if graph.get("replays") != 5 or graph.get("captures") != 1:
        failures.append(f"graph counters {graph}, want 1 capture and 5 replays")
    # the hot path never waits: a long sleep queued first is still running
    # after 300 logged calls; sync mode (the control) must wait for it
    times = {}
    for mode in ("plain", "sync"):
        p = ShapeProfiler(os.path.join(tmp, f"nowait-{mode}.jsonl"), sync=mode == "sync")
        a = torch.randn(64, 64, device="cuda")
        sync()
        t0 = time.perf_counter()
        torch.cuda._sleep(2_000_000_000 // 1000 * 200)  # ~0.2 s of GPU cycles at ~2 GHz
        with p.forward_pass():
            for _ in range(100):
                a = torch.relu(a @ a) * 0.5
        busy = not torch.cuda.current_stream().query()
        times[mode] = (time.perf_counter() - t0, busy)
        sync()
        p.close()
        if len(load(p.path)) != 300:
            failures.append(f"{mode}: {len(load(p.path))} records, want 300")
    if not times["plain"][1]:
        failures.append(f"the stream was idle after 300 logged calls ({times['plain'][0]:.3f} s): something waited")
    if times["sync"][1] or times["sync"][0] < 0.1:
        failures.append(f"sync mode did not wait for the device ({times['sync']})")
    return {"ok": not failures, "failures": failures,
            "summary": f"{len(recs)} captured calls, replays {graph.get('replays')}; host time over 300 "
                       f"logged calls behind a 0.2 s kernel: {times['plain'][0] * 1e3:.1f} ms plain "
                       f"(stream still busy: {times['plain'][1]}), {times['sync'][0] * 1e3:.1f} ms sync"}


def check_sync(tmp, reduced):
    if not CUDA:
        raise Skip("asynchronous device errors and graph capture need CUDA")
    # the blame: a child, since a device-side assert ruins the CUDA context
    code = f"""
import torch, json
from sgl_shapeprof import ShapeProfiler
p = ShapeProfiler({os.path.join(tmp, 'blame.jsonl')!r}, sync=True)
x = torch.randn(10, 4, device="cuda"); idx = torch.tensor([0, 99], device="cuda")
try:
    with p.forward_pass():
        y = torch.relu(x)
        z = torch.index_select(y, 0, idx)
        w = z * 2
except Exception as e:
    print("raised", type(e).__name__)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp)
    failures = []
    recs = load(os.path.join(tmp, "blame.jsonl")) if os.path.exists(os.path.join(tmp, "blame.jsonl")) else []
    blamed = [r_["operation"] for r_ in recs if r_.get("error")]
    if blamed != ["aten.index_select.default"]:
        failures.append(f"errors recorded on {blamed}, want index_select alone; child: {r.stdout.strip()} "
                        f"{r.stderr.strip()[-300:]}")
    # a graph captured inside an open sync pass still captures
    a = torch.randn(32, 32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.relu(a @ a)
    torch.cuda.current_stream().wait_stream(s)
    p = ShapeProfiler(os.path.join(tmp, "sync-capture.jsonl"), sync=True)
    g = torch.cuda.CUDAGraph()
    try:
        with p.forward_pass():
            torch.relu(a)  # synced: no capture yet
            with torch.cuda.graph(g):
                out = torch.relu(a @ a)
        g.replay()
        sync()
        if not torch.equal(out, torch.relu(a @ a)):
            failures.append("the graph captured in a sync pass replays wrong results")
    except Exception as e:
        failures.append(f"capture inside a sync pass failed: {type(e).__name__}: {e}")
    p.close()
    return {"ok": not failures, "failures": failures,
            "summary": f"blamed: {blamed}; capture in a sync pass: {'ok' if not failures else 'failed'}"}


def check_custom_ops(tmp, reduced):
    name = f"shapeprof_check::scale_{os.getpid()}"

    @torch.library.custom_op(name, mutates_args=())
    def scale(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * k
    x = torch.randn(3, 5, device=DEVICE)
    prof = ShapeProfiler(os.path.join(tmp, "custom.jsonl"))
    with prof.forward_pass():
        y = scale(x, 2.0)
        torch.ops.shapeprof_check.__getattr__(name.split("::")[1])(y, 0.5)
    prof.close()
    ops = [r["operation"] for r in load(prof.path)]
    want = f"shapeprof_check.{name.split('::')[1]}.default"
    n = ops.count(want)
    # what routing a custom op through the dispatcher costs in a logged pass
    # (torch's Python fast path for custom ops is skipped while our key is
    # on), and what a pass after an idle gap pays to regrow the records file
    # the flusher cut: interleaved rounds, medians
    calls = 200 if reduced else 2000

    def per_call(marker):
        sync()
        t0 = time.perf_counter()
        with marker.forward_pass() if marker is not None else contextlib.nullcontext():
            for _ in range(calls):
                scale(x, 2.0)
        sync()
        return (time.perf_counter() - t0) / calls
    off, on, after_gap, back_to_back = [], [], [], []
    timing = ShapeProfiler(os.path.join(tmp, "custom-cost.jsonl"))
    for r in range(7):
        off.append(per_call(None))
        on.append(per_call(timing))
        time.sleep(0.3)  # idle: the flusher cuts the file to its records
        after_gap.append(per_call(timing))
        back_to_back.append(per_call(timing))
    timing.close()
    added = (median_ci(on)[0] - median_ci(off)[0]) * 1e6
    regrow = (median_ci(after_gap)[0] - median_ci(back_to_back)[0]) * 1e6 * calls
    return {"ok": n == 2, "failures": [] if n == 2 else [f"recorded {ops}"],
            "summary": f"{n} of 2 custom-op calls recorded on {DEVICE}; a custom op costs "
                       f"{median_ci(off)[0] * 1e6:.1f} us off, {added:+.1f} us written in a pass; "
                       f"a pass of {calls} calls after a 0.3 s gap takes {regrow:+.0f} us vs back to back"}


def check_triton(tmp, reduced):
    if not CUDA:
        raise Skip("needs CUDA (Triton compiles for a GPU; the interpreter's path is tests/test_triton.py)")
    try:
        import triton
        import triton.language as tl
        from triton.runtime.jit import JITFunction
    except ImportError:
        raise Skip("Triton is not installed") from None
    failures = []

    @triton.jit
    def axpy(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m) + alpha * tl.load(x_ptr + offs, mask=m), mask=m)

    @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=2, num_stages=2),
                              triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=3)], key=["n"])
    @triton.jit
    def tuned_axpy(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m) + alpha * tl.load(x_ptr + offs, mask=m), mask=m)
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.zeros(n, device="cuda")
    own = JITFunction.__dict__["run"]
    axpy[(triton.cdiv(n, 1024),)](x, y, n, 1.0, BLOCK=1024)  # compiled before the pass
    prof = ShapeProfiler(os.path.join(tmp, "triton.jsonl"))
    with prof.forward_pass():
        axpy[(triton.cdiv(n, 1024),)](x, y, n, 0.5, BLOCK=1024)
        tuned_axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 2.0)
    if JITFunction.__dict__["run"] is not own:
        failures.append("after the pass JITFunction.run is not Triton's own")
    prof.close()
    recs = load(prof.path)
    ops = [r["operation"] for r in recs]
    best = tuned_axpy.best_config
    plain = [r for r in recs if r["operation"].endswith(".axpy")]
    tuned = [r for r in recs if r["operation"].endswith(".tuned_axpy")]
    if len(plain) != 1 or plain[0]["args"].get("BLOCK") != 1024 or "num_warps" not in plain[0]["args"]:
        failures.append(f"plain launch: {plain}")
    want = {"BLOCK": best.kwargs["BLOCK"], "num_warps": best.num_warps, "num_stages": best.num_stages,
            "grid": [triton.cdiv(n, best.kwargs["BLOCK"])]}
    if len(tuned) != 1 or any(tuned[0]["args"].get(k) != v for k, v in want.items()):
        failures.append(f"autotuned launch: {tuned} (best_config {best})")
    others = sorted(set(ops) - {r["operation"] for r in plain + tuned})
    if others:
        failures.append(f"the autotuner's benchmark recorded: {others}")
    # cost per launch: Triton's own launch, and the same in a logged pass
    calls = 200 if reduced else 2000

    def per_launch(marker):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with marker.forward_pass() if marker is not None else contextlib.nullcontext():
            for _ in range(calls):
                axpy[(triton.cdiv(n, 1024),)](x, y, n, 0.5, BLOCK=1024)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls
    off, on, dd = [], [], []
    timing = ShapeProfiler(os.path.join(tmp, "triton-cost.jsonl"))
    dedupe = ShapeProfiler(os.path.join(tmp, "triton-dedupe.jsonl"), dedupe=True)
    for _ in range(7):
        off.append(per_launch(None))
        on.append(per_launch(timing))
        dd.append(per_launch(dedupe))
    timing.close()
    dedupe.close()
    base = median_ci(off)[0] * 1e6
    return {"ok": not failures, "failures": failures,
            "summary": f"{len(plain)} plain and {len(tuned)} autotuned launch recorded (config {want}); "
                       f"a launch costs {base:.1f} us off, {median_ci(on)[0] * 1e6 - base:+.1f} us written "
                       f"in a pass, {median_ci(dd)[0] * 1e6 - base:+.1f} us deduplicated"}


def check_kill(tmp, reduced):
    """No handler runs on SIGKILL: the summary on disk is the one of the last
    pass end, and the records file holds every record up to the kill (a
    cut last line and the zeros of room made ahead are allowed after them)."""
    path = os.path.join(tmp, "killed.jsonl")
    code = f"""
import torch, sys
from sgl_shapeprof import ShapeProfiler
p = ShapeProfiler({path!r})
a = torch.randn(256, 256, device={DEVICE!r})
n = 0
while True:
    with p.forward_pass("decode"):
        for _ in range(50):
            a = torch.tanh(a @ a)
    n += 1
    if n == 3:
        print("ready", flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp)
    try:
        line = child.stdout.readline()
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    if line.strip() != "ready":
        return {"ok": False, "summary": "the child never got going", "failures": [line]}
    data = open(path, "rb").read().rstrip(b"\0")
    lines = data.split(b"\n")
    whole = [json.loads(x) for x in lines[:-1]]  # the last: empty, or cut by the kill
    summary = json.load(open(path.replace(".jsonl", "_summary.json")))
    n = summary["total_operations"]
    counts = {}
    for r in whole[:n]:
        counts[r["operation"]] = counts.get(r["operation"], 0) + 1
    failures = []
    if summary["ended_by"] != "running":
        failures.append(f"summary ended_by {summary['ended_by']!r}, want 'running'")
    if not 0 < n <= len(whole) or counts != summary["operation_counts"]:
        failures.append(f"the summary's {n} records and counts {summary['operation_counts']} do not match "
                        f"the first {n} of the {len(whole)} on disk ({counts})")
    if [r["call_id"] for r in whole] != list(range(1, len(whole) + 1)):
        failures.append("call ids are not 1..n")
    return {"ok": not failures, "failures": failures,
            "summary": f"SIGKILLed in pass {len({r['forward_pass'] for r in whole})}: {len(whole)} records "
                       f"parse; the summary on disk agrees with its first {n}"}


# ------------------------------------------------------------------ cost --
def cost_model(reduced):
    if reduced:
        return make_llama(torch.bfloat16, config=LlamaConfig(max_seq=160), device=DEVICE), 64, (1, 4)
    # TinyLlama-1.1B's shape: 22 layers of dim 2048, 32 heads (4 for keys and values)
    cfg = LlamaConfig(vocab=32000, dim=2048, layers=22, heads=32, kv_heads=4, ffn=5632, max_seq=2048 + 64)
    return make_llama(torch.bfloat16, config=cfg, device=DEVICE), 2048, (1, 32)


class Workload:
    """Steps of one kind (decode at a batch size, eager or replayed from a
    CUDA graph, or a prefill), run under a given way of profiling."""

    def __init__(self, model, kind, batch, prompt):
        self.model, self.kind, self.batch = model, kind, batch
        c = model.c
        self.cache = model.new_cache(batch)
        gen = torch.Generator().manual_seed(0)
        self.tokens = prompt if kind == "prefill" else 1
        self.ids = torch.randint(0, c.vocab, (batch, self.tokens), generator=gen).to(DEVICE)
        self.pos = 0 if kind == "prefill" else prompt
        self.graph = None

    def step(self):
        return self.model(self.ids, self.cache, self.pos)

    def capture(self, prof):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        cm = prof.capture_graph(self.batch) if hasattr(prof, "capture_graph") else contextlib.nullcontext()
        with cm, torch.cuda.graph(self.graph):
            self.out = self.step()

    def run(self, marker, n):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            cm = marker.forward_pass(self.kind) if hasattr(marker, "forward_pass") else contextlib.nullcontext()
            if marker is not None and not hasattr(marker, "forward_pass"):  # the reference logger
                marker.start_forward_pass(self.kind)
            with cm:
                if self.graph is not None:
                    self.graph.replay()
                    if hasattr(marker, "graph_replayed"):
                        marker.graph_replayed(self.batch)
                else:
                    self.step()
            if marker is not None and not hasattr(marker, "forward_pass"):
                marker.end_forward_pass()
        sync()
        return (time.perf_counter() - t0) / n


def check_cost(tmp, reduced):
    model, prompt, batches = cost_model(reduced)
    rounds, steps = (3, 3) if reduced else (5, 10)
    kinds = [("decode", b, False) for b in batches] + [("prefill", 1, False)]
    if CUDA:
        kinds += [("decode", b, True) for b in batches]
    modes = ["off", "armed", "written", "dedupe", "torch.profiler", "python logger"]
    rows = []
    for kind, batch, graphed in kinds:
        work = Workload(model, kind, batch, prompt)
        profs = {}

        def marker(mode, r):
            if mode == "off":
                return None, contextlib.nullcontext()
            if mode == "armed":
                return profs.setdefault("armed", OnRequestProfiler(control=False)), contextlib.nullcontext()
            if mode in ("written", "dedupe"):
                p = ShapeProfiler(os.path.join(tmp, f"cost-{kind}-{batch}-{graphed}-{mode}-{r}.jsonl"),
                                  dedupe=mode == "dedupe")
                return p, contextlib.closing(p)
            if mode == "python logger":
                p = ReferenceLogger(os.path.join(tmp, f"cost-ref-{r}.jsonl"), dedupe=False)
                return p, contextlib.closing(p)
            prof = torch.profiler.profile(record_shapes=True, activities=[torch.profiler.ProfilerActivity.CPU]
                                          + ([torch.profiler.ProfilerActivity.CUDA] if CUDA else []))
            return None, prof
        with torch.inference_mode():
            if graphed:
                work.capture(None)
            work.run(None, 2)  # warm-up
            times = {m: [] for m in modes}
            for r in range(rounds):
                order = modes[:]
                random.Random(r).shuffle(order)
                for mode in order:
                    m, ctx = marker(mode, r)
                    with ctx:
                        if graphed and mode in ("written", "dedupe"):
                            work.capture(m)  # the capture is recorded; replays are counted
                        times[mode].append(work.run(m, steps))
                    if graphed and mode in ("written", "dedupe"):
                        work.capture(None)
        label = f"{kind} batch {batch}" if kind == "decode" else f"prefill {prompt} tokens"
        row = {"workload": label + (" (CUDA graph)" if graphed else ""),
               "off_ms": median_ci(times["off"])[0] * 1e3}
        for mode in modes[1:]:
            ratios = [t / o for t, o in zip(times[mode], times["off"])]
            med, lo, hi = median_ci(ratios)
            row[mode] = {"x_off": med, "lo": lo, "hi": hi}
        rows.append(row)
        for p in profs.values():
            p.close()
        del work
        if CUDA:
            torch.cuda.empty_cache()
    return {"ok": True, "rows": rows, "rounds": rounds, "steps": steps,
            "summary": f"{len(rows)} workloads x {len(modes)} modes, {rounds} interleaved rounds"}


CHECKS = {"parity": check_parity, "graphs": check_graphs, "sync": check_sync,
          "custom_ops": check_custom_ops, "triton": check_triton, "kill": check_kill, "cost": check_cost}


# ---------------------------------------------------------------- report --
def fmt_ratio(v):
    if v["lo"] is None:
        return f"{v['x_off']:.3f}"
    return f"{v['x_off']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}]"


def markdown(report):
    lines = [f"# sgl_shapeprof GPU check", "",
             f"- device: {report['device']}", f"- torch {report['torch']}, Python {report['python']}",
             f"- mode: {'reduced (no CUDA)' if report['reduced'] else 'full'}; "
             f"{report['seconds']:.0f} s",
             f"- build warnings: {len(report.get('build_warnings', []))}"
             + "".join(f"\n  - `{w}`" for w in report.get("build_warnings", [])),
             "", "| check | result | what |", "|---|---|---|"]
    for name, r in report["checks"].items():
        lines.append(f"| {name} | {r['status']} | {r.get('summary', '')} |")
    for name, r in report["checks"].items():
        if r.get("failures"):
            lines += ["", f"## {name}: failures", ""] + [f"- {f}" for f in r["failures"]]
    parity = report["checks"].get("parity", {})
    if parity.get("rows"):
        lines += ["", "## parity", "", "| model | dtype | mode | records | unexplained | explained |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['dtype']} | {r['mode']} | {r['records']} | {r['differences']} | "
                  f"{r['explained']} |" for r in parity["rows"]]
        lines += ["", "Explained: " + "; ".join(parity.get("explained", []))] if parity.get("explained") else []
    cost = report["checks"].get("cost", {})
    if cost.get("rows"):
        modes = [k for k in cost["rows"][0] if k not in ("workload", "off_ms")]
        lines += ["", f"## cost: time per step over off (median [95% interval], {cost['rounds']} rounds "
                      f"of {cost['steps']} steps)", "",
                  "| workload | off ms/step | " + " | ".join(modes) + " |", "|---" * (len(modes) + 2) + "|"]
        lines += [f"| {r['workload']} | {r['off_ms']:.2f} | " + " | ".join(fmt_ratio(r[m]) for m in modes) + " |"
                  for r in cost["rows"]]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("SHAPEPROF_GPU_CHECK_OUT") or "gpu-check",
                    help="folder for report.md and report.json")
    ap.add_argument("--reduced", action="store_true", help="tiny models, as without CUDA")
    ap.add_argument("--only", default="", help="comma-separated checks: " + ",".join(CHECKS))
    ap.add_argument("--build-log", help="the build's output: its warnings go into the report")
    ap.add_argument("--preflight", action="store_true", help="only say what a build here lacks")
    a = ap.parse_args()
    only = [n for n in a.only.split(",") if n] or list(CHECKS)
    unknown = [n for n in only if n not in CHECKS]
    if unknown:
        sys.exit(f"gpu_check: unknown check {', '.join(unknown)} (choose from {', '.join(CHECKS)})")
    reduced = a.reduced or not CUDA
    os.makedirs(a.out, exist_ok=True)
    import sgl_shapeprof
    print(f"gpu_check: torch {torch.__version__}, sgl_shapeprof from {os.path.dirname(sgl_shapeprof.__file__)}")
    report = {"device": torch.cuda.get_device_name() if CUDA else "CPU (no CUDA)", "torch": torch.__version__,
              "python": sys.version.split()[0], "reduced": reduced, "checks": {}}
    if a.build_log and os.path.exists(a.build_log):
        with open(a.build_log, errors="replace") as f:
            report["build_warnings"] = [x.strip() for x in f if "warning:" in x][:20]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shapeprof-gpu-check-") as tmp:
        for name in only:
            t = time.perf_counter()
            print(f"== {name}", flush=True)
            try:
                r = CHECKS[name](tmp, reduced)
                r["status"] = "pass" if r["ok"] else "FAIL"
            except Skip as e:
                r = {"status": "skip", "summary": str(e)}
            except ImportError as e:
                r = {"status": "skip", "summary": f"needs {e.name}"}
            except Exception as e:
                r = {"status": "FAIL", "summary": f"{type(e).__name__}: {e}",
                     "failures": traceback.format_exc().splitlines()[-6:]}
            r["seconds"] = round(time.perf_counter() - t, 1)
            report["checks"][name] = r
            print(f"   {r['status']} ({r['seconds']} s): {r.get('summary', '')}", flush=True)
    report["seconds"] = time.perf_counter() - t0
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    text = markdown(report)
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    failed = [n for n, r in report["checks"].items() if r["status"] == "FAIL"]
    if failed:
        print(f"gpu_check: failed: {', '.join(failed)} (report in {a.out})", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
