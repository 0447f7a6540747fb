"""The GPU check's checks (benchmarks/gpu_check.py says what each checks and
runs each in a child process of its own):

    python benchmarks/gpu_checks.py NAME --tmp DIR --result FILE --stacks FILE [--reduced]

The check's row goes to FILE as JSON, again after each model or workload,
so that a check killed at its deadline keeps what it measured; its status
is written last. SIGUSR1 dumps every thread's stack into the stacks file
(the runner sends it before killing a check that overran), and so does a
crash. The process ends with os._exit: CUDA's teardown is not what is
checked, and it can stall for minutes after a device-side assert.
"""
import faulthandler
import signal
import sys

if __name__ == "__main__":  # before torch: a hang in its import is dumped too
    _STACKS = open(sys.argv[sys.argv.index("--stacks") + 1], "a")
    faulthandler.enable(_STACKS)
    faulthandler.register(signal.SIGUSR1, _STACKS, all_threads=True)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import select  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "tests"), HERE]

import torch  # noqa: E402

from ab import median_ci  # noqa: E402
from gpu_check import OPTIONAL, fault, kill, run_bounded  # noqa: E402
from reference_logger import ReferenceLogger  # noqa: E402
from sgl_shapeprof import OnRequestProfiler, ShapeProfiler  # noqa: E402
from sgl_shapeprof.demo.models import LlamaConfig, make_llama  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
FIELDS = ("forward_pass", "phase", "operation", "inputs", "outputs", "error", "graph")


class Skip(Exception):
    """A check that cannot run here; str() says why."""


class Result(dict):
    """A check's row: summary, failures, rows; written whole to its file at
    each save()."""

    def __init__(self, path):
        super().__init__(failures=[], rows=[])
        self.path = path

    def save(self):
        part = self.path + ".part"
        with open(part, "w") as f:
            json.dump(self, f, default=str)
        os.replace(part, self.path)

    def row(self, row):
        self["rows"].append(row)
        self.save()


def optional_missing(e: BaseException):
    """The optional package whose absence e is, else None (a package there
    but broken, or our native module, is a failure)."""
    name = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
    return name if name in OPTIONAL else None


def brief(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def part(out, what, fn):
    """One part of a check: its error is a failure of that part only."""
    try:
        fn()
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        out["failures"].append(f"{what}: {brief(e)} (at {os.path.basename(where.filename)}:{where.lineno})")
        out.save()


def sync():
    if CUDA:
        torch.cuda.synchronize()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def native_sync_stats():
    native = sys.modules.get("sgl_shapeprof._C")
    return native.sync_stats() if native is not None and hasattr(native, "sync_stats") else None


# ---------------------------------------------------------------- native --
def version(*dists):
    for d in dists:
        try:
            return importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "absent"


def check_native(out, tmp, reduced):
    """The native module loads into this torch (as the profiler loads it:
    a module built for another torch is refused), and one pass records."""
    import sgl_shapeprof
    from sgl_shapeprof.recording._native import load
    out["cuda"] = CUDA
    env = out["env"] = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
                        "triton": version("triton", "pytorch-triton"), "transformers": version("transformers"),
                        "sgl_shapeprof": os.path.dirname(sgl_shapeprof.__file__)}
    if CUDA:
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                   memory_gib=round(props.total_memory / 2 ** 30, 1), gpus=torch.cuda.device_count())
    out.save()
    native = load()  # NativeModuleError: a FAIL with its message, and the run stops
    env["native"] = os.path.basename(native.__file__)
    x = torch.ones(4, device=DEVICE)
    p = ShapeProfiler(os.path.join(tmp, "native.jsonl"))
    with p.forward_pass():
        x.add(1)
    p.close()
    env["dispatch_key"] = native.dispatch_key()  # the route (docs/how-it-works.md#the-mechanisms)
    ops = [r["operation"] for r in read_jsonl(p.path)]
    if ops != ["aten.add.Tensor"]:
        out["failures"].append(f"one add in a pass recorded as {ops}")
    out["summary"] = (f"{env['native']} from {env['sgl_shapeprof']} loads into torch {torch.__version__}; "
                      f"one pass on {DEVICE} recorded {ops} through DispatchKey::{env['dispatch_key']}")


# ---------------------------------------------------------------- parity --
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
    return read_jsonl(ref.path), read_jsonl(prof.path)


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


def parity_run(tmp, name, model, dtype, grad):
    """One model x dtype x grad mode under both loggers: its row, and its
    unexplained and explained differences."""
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
    if not ref:
        diff.append("the reference logged nothing")
    return {"model": name, "dtype": str(dtype), "mode": grad, "records": len(ours), "reference": len(ref),
            "differences": len(diff), "explained": len(why)}, diff, why


def check_parity(out, tmp, reduced):
    """0 differences from the reference, per model x dtype x grad mode; an
    error (or transformers missing) costs its own rows only."""
    reasons = set()
    for name, make in (("llama", dense_lm), ("mixtral-moe", moe_lm), ("dit", lambda r: DiT())):
        for dtype in (torch.bfloat16, torch.float16):
            base = {"model": name, "dtype": str(dtype)}
            try:
                fault(f"parity.{name}")
                torch.manual_seed(0)
                model = make(reduced).to(DEVICE, dtype).eval()
            except ImportError as e:
                if not optional_missing(e):
                    raise
                out.row(dict(base, mode="-", skip=f"skip: needs {optional_missing(e)}"))
                continue
            except Exception as e:
                out.row(dict(base, mode="-", error=brief(e)))
                out["failures"].append(f"{name} {dtype}: {brief(e)}")
                continue
            for grad in ("no_grad", "inference_mode"):
                try:
                    row, diff, why = parity_run(tmp, name, model, dtype, grad)
                except Exception as e:
                    row, diff, why = dict(base, mode=grad, error=brief(e)), [brief(e)], []
                out["failures"] += [f"{name} {dtype} {grad}: {d}" for d in diff[:3]]
                reasons.update(w.split(": ", 1)[1] for w in why)
                out["explained"] = sorted(reasons)
                rows = [r for r in out["rows"] + [row] if "records" in r]
                out["summary"] = (f"{sum(r['records'] for r in rows)} records in {len(rows)} runs, "
                                  f"{sum(r['differences'] for r in rows)} unexplained differences, "
                                  f"{sum(r['explained'] for r in rows)} explained")
                out.row(row)
            del model
    skipped = sorted({r["model"] for r in out["rows"] if "skip" in r})
    if skipped:
        out["summary"] = out.get("summary", "no run") + f"; {', '.join(skipped)} skipped (needs transformers)"


# ---------------------------------------------------------------- graphs --
def check_graphs(out, tmp, reduced):
    if not CUDA:
        raise Skip("needs CUDA graphs")
    failures = out["failures"]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256)).to("cuda", torch.bfloat16)
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    out["summary"] = ""

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

    def capture_and_replay():
        plain = captured(None)
        prof = ShapeProfiler(os.path.join(tmp, "graphs.jsonl"))
        ours = captured(prof)
        prof.close()
        if not all(torch.equal(a, b) for a, b in zip(plain, ours)):
            failures.append("replayed outputs differ from the run without the profiler")
        recs = read_jsonl(prof.path)
        with open(prof.summary_path) as f:
            graph = json.load(f).get("graphs", {}).get("8", {})
        if not recs or any(r.get("graph") != 8 or r["forward_pass"] != 0 for r in recs):
            failures.append(f"captured calls not recorded once as graph 8: {len(recs)} records")
        if graph.get("replays") != 5 or graph.get("captures") != 1:
            failures.append(f"graph counters {graph}, want 1 capture and 5 replays")
        out["summary"] = f"{len(recs)} captured calls, replays {graph.get('replays')}; "
    def armed_then_asked():
        """Issue 52: armed before the captures, asked after them: the
        request's file holds graph 8's capture (replayed) and not graph
        16's (never replayed), as a recording from start-up would."""
        from sgl_shapeprof import OnRequestProfiler
        armed = OnRequestProfiler(output_dir=tmp, control=False)
        x16 = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
        g16 = torch.cuda.CUDAGraph()
        with torch.inference_mode(), armed.capture_graph(16), torch.cuda.graph(g16):
            model(x16)
        path = armed.request(passes=5, output=os.path.join(tmp, "armed.jsonl"))
        ours = captured(armed)
        armed.close()
        ref = read_jsonl(os.path.join(tmp, "graphs.jsonl"))
        recs = read_jsonl(path)
        with open(path.replace(".jsonl", "_summary.json")) as f:
            graphs = json.load(f).get("graphs", {})
        if not all(torch.equal(a, b) for a, b in zip(captured(None), ours)):
            failures.append("armed: replayed outputs differ from the run without the profiler")
        same = [(r["operation"], r["inputs"], r["outputs"]) for r in recs]
        want = [(r["operation"], r["inputs"], r["outputs"]) for r in ref]
        if same != want or any(r.get("graph") != 8 for r in recs):
            failures.append(f"armed: the request holds {len(recs)} records, not graph 8's {len(ref)} captured calls")
        if graphs != {"8": {"captures": 1, "replays": 5}, "16": {"captures": 0, "replays": 0}}:
            failures.append(f"armed: graph counters {graphs}, want graph 8 kept and replayed 5 times, 16 unused")
        out["summary"] += f"armed: {len(recs)} kept calls written; "
    part(out, "capture and replay", capture_and_replay)
    part(out, "armed, asked after its captures", armed_then_asked)
    part(out, "no wait on the hot path", lambda: hot_path_never_waits(out, tmp))


def hot_path_never_waits(out, tmp):
    from sgl_shapeprof import _C
    failures = out["failures"]
    # The hot path never waits: a long sleep queued first is still running
    # after 300 logged calls; sync mode (the control) must wait for it. The
    # calls' kernels run once before the clock: CUDA loads a kernel's module
    # at its first launch and that load waits for the queue to drain (and
    # cuBLAS makes its handle), which would look like the profiler waiting.
    a0 = torch.randn(64, 64, device="cuda")
    warm = a0.clone()
    for _ in range(100):
        warm = torch.relu(warm @ warm) * 0.5
    torch.cuda._sleep(1000)
    sync()
    times = {}
    for mode in ("plain", "sync"):
        p = ShapeProfiler(os.path.join(tmp, f"nowait-{mode}.jsonl"), sync=mode == "sync")
        a = a0.clone()
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
        if len(read_jsonl(p.path)) != 300:
            failures.append(f"{mode}: {len(read_jsonl(p.path))} records, want 300")
    stats = _C.sync_stats()
    if not times["plain"][1]:
        failures.append(f"the stream was idle after 300 logged calls ({times['plain'][0]:.3f} s): something waited")
    if times["sync"][1] or times["sync"][0] < 0.1:
        failures.append(f"sync mode did not wait for the device ({times['sync']}; {stats})")
    if stats["capture"] not in ("guard", "driver"):
        failures.append(f"sync mode cannot tell a graph capture here ({stats['capture']!r}): it never waits")
    out["summary"] += (f"host time over 300 logged calls behind a 0.2 s kernel: {times['plain'][0] * 1e3:.1f} ms "
                       f"plain (stream still busy: {times['plain'][1]}), {times['sync'][0] * 1e3:.1f} ms sync "
                       f"(capture told by {stats['capture']})")


# ------------------------------------------------------------------ sync --
BLAME = """
import json, os, torch
from sgl_shapeprof import ShapeProfiler, _C
p = ShapeProfiler({path!r}, sync=True)
x = torch.randn(10, 4, device="cuda"); idx = torch.tensor([0, 99], device="cuda")
try:
    with p.forward_pass():
        y = torch.relu(x)
        z = torch.index_select(y, 0, idx)
        w = z * 2
except Exception as e:
    print("raised", type(e).__name__, flush=True)
p.close()
print("stats", json.dumps(_C.sync_stats()), flush=True)
os._exit(0)  # no CUDA teardown after a device-side assert: it can stall for minutes
"""


def check_sync(out, tmp, reduced):
    if not CUDA:
        raise Skip("asynchronous device errors and graph capture need CUDA")
    from sgl_shapeprof import _C
    failures = out["failures"]
    # the blame: a child, since a device-side assert ruins the CUDA context
    path = os.path.join(tmp, "blame.jsonl")
    rc, text = run_bounded([sys.executable, "-c", BLAME.format(path=path)], 60, group=False, cwd=tmp)
    for line in text.splitlines():
        if line.startswith("stats "):
            out["sync_blame"] = json.loads(line[6:])
    recs = read_jsonl(path) if os.path.exists(path) else []
    blamed = [r["operation"] for r in recs if r.get("error")]
    if blamed != ["aten.index_select.default"]:
        failures.append(f"errors recorded on {blamed}, want index_select alone; child "
                        f"({'timed out' if rc is None else f'exit {rc}'}): {text.strip()[-300:]}")
    out["summary"] = f"blamed: {blamed}"
    out.save()
    # a graph captured inside an open sync pass still captures
    a = torch.randn(32, 32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.relu(a @ a)
    torch.cuda.current_stream().wait_stream(s)
    p = ShapeProfiler(os.path.join(tmp, "sync-capture.jsonl"), sync=True)
    g = torch.cuda.CUDAGraph()
    before = len(failures)
    try:
        with p.forward_pass():
            torch.relu(a)  # synced: no capture yet
            with torch.cuda.graph(g):
                out_ = torch.relu(a @ a)
        g.replay()
        sync()
        if not torch.equal(out_, torch.relu(a @ a)):
            failures.append("the graph captured in a sync pass replays wrong results")
    except Exception as e:
        failures.append(f"capture inside a sync pass failed: {brief(e)}")
    p.close()
    stats = _C.sync_stats()
    if stats["capturing"] < 1:
        failures.append(f"sync mode did not see the capture ({stats})")
    out["summary"] += (f"; capture in a sync pass: {'ok' if len(failures) == before else 'failed'} "
                       f"(told by {stats['capture']}: {stats['capturing']} calls not synced while capturing)")


# ------------------------------------------------------------ custom ops --
def check_custom_ops(out, tmp, reduced):
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
    ops = [r["operation"] for r in read_jsonl(prof.path)]
    want = f"shapeprof_check.{name.split('::')[1]}.default"
    n = ops.count(want)
    if n != 2:
        out["failures"].append(f"recorded {ops}")
    out["summary"] = f"{n} of 2 custom-op calls recorded on {DEVICE}"
    out.save()
    # what routing a custom op through the dispatcher costs in a logged pass
    # (torch's Python fast path for custom ops is skipped while our key is
    # on), and what a pass after an idle gap pays to regrow the records file
    # the flusher cut: interleaved rounds after one of each unmeasured, medians
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
    per_call(None)
    per_call(timing)
    for r in range(7):
        off.append(per_call(None))
        on.append(per_call(timing))
        time.sleep(0.3)  # idle: the flusher cuts the file to its records
        after_gap.append(per_call(timing))
        back_to_back.append(per_call(timing))
    timing.close()
    added = (median_ci(on)[0] - median_ci(off)[0]) * 1e6
    regrow = (median_ci(after_gap)[0] - median_ci(back_to_back)[0]) * 1e6 * calls
    out["summary"] += (f"; a custom op costs {median_ci(off)[0] * 1e6:.1f} us off, {added:+.1f} us written in a "
                       f"pass; a pass of {calls} calls after a 0.3 s gap takes {regrow:+.0f} us vs back to back")


# ---------------------------------------------------------------- triton --
def check_triton(out, tmp, reduced):
    if not CUDA:
        raise Skip("needs CUDA (Triton compiles for a GPU; the interpreter's path is tests/test_triton.py)")
    import triton
    import triton.language as tl
    from triton.runtime.jit import JITFunction
    failures = out["failures"]

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
    recs = read_jsonl(prof.path)
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
    out["summary"] = f"{len(plain)} plain and {len(tuned)} autotuned launch recorded (config {want})"
    out.save()
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
    for marker in (None, timing, dedupe):  # unmeasured: each way's first launches
        per_launch(marker)
    for _ in range(7):
        off.append(per_launch(None))
        on.append(per_launch(timing))
        dd.append(per_launch(dedupe))
    timing.close()
    dedupe.close()
    base = median_ci(off)[0] * 1e6
    out["summary"] += (f"; a launch costs {base:.1f} us off, {median_ci(on)[0] * 1e6 - base:+.1f} us written "
                       f"in a pass, {median_ci(dd)[0] * 1e6 - base:+.1f} us deduplicated")


# ------------------------------------------------------------------ kill --
def check_kill(out, tmp, reduced):
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
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        line = child.stdout.readline() if ready else ""
    finally:
        kill(child, group=False)  # SIGKILL
    if line.strip() != "ready":
        out["failures"].append(f"the child never got going (said {line!r} in 60 s)")
        out["summary"] = "the child never got going"
        return
    with open(path, "rb") as f:
        data = f.read().rstrip(b"\0")
    lines = data.split(b"\n")
    whole = [json.loads(x) for x in lines[:-1]]  # the last: empty, or cut by the kill
    with open(path.replace(".jsonl", "_summary.json")) as f:
        summary = json.load(f)
    n = summary["total_operations"]
    counts = {}
    for r in whole[:n]:
        counts[r["operation"]] = counts.get(r["operation"], 0) + 1
    failures = out["failures"]
    if summary["ended_by"] != "running":
        failures.append(f"summary ended_by {summary['ended_by']!r}, want 'running'")
    if not 0 < n <= len(whole) or counts != summary["operation_counts"]:
        failures.append(f"the summary's {n} records and counts {summary['operation_counts']} do not match "
                        f"the first {n} of the {len(whole)} on disk ({counts})")
    if [r["call_id"] for r in whole] != list(range(1, len(whole) + 1)):
        failures.append("call ids are not 1..n")
    out["summary"] = (f"SIGKILLed in pass {len({r['forward_pass'] for r in whole})}: {len(whole)} records "
                      f"parse; the summary on disk agrees with its first {n}")


# ------------------------------------------------------------------ cost --
def cost_model(reduced):
    """The model, the prompt's length, the decode batch sizes."""
    if reduced:
        return make_llama(torch.bfloat16, config=LlamaConfig(max_seq=160), device=DEVICE), 64, (1, 4)
    # TinyLlama-1.1B's shape: 22 layers of dim 2048, 32 heads (4 for keys and
    # values), made on the device (its random init on the host takes seconds)
    cfg = LlamaConfig(vocab=32000, dim=2048, layers=22, heads=32, kv_heads=4, ffn=5632, max_seq=2048 + 64)
    with torch.device(DEVICE):
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


def measure(tmp, model, prompt, kind, batch, graphed, modes, rounds, steps):
    """Time per step of one workload under each mode, interleaved in rounds
    (each mode once, unmeasured, first): off's ms and each mode's ratio to
    off, median and 95% interval of the rounds' own ratios."""
    work = Workload(model, kind, batch, prompt)
    armed = []

    def once(mode, r, n):
        if mode == "off":
            m, ctx = None, contextlib.nullcontext()
        elif mode == "armed":
            if not armed:
                armed.append(OnRequestProfiler(control=False))
            m, ctx = armed[0], contextlib.nullcontext()
        elif mode in ("written", "dedupe"):
            m = ShapeProfiler(os.path.join(tmp, f"cost-{kind}-{batch}-{graphed}-{mode}-{r}.jsonl"),
                              dedupe=mode == "dedupe")
            ctx = contextlib.closing(m)
        elif mode == "python logger":
            m = ReferenceLogger(os.path.join(tmp, f"cost-ref-{r}.jsonl"), dedupe=False)
            ctx = contextlib.closing(m)
        else:  # torch.profiler
            m = None
            ctx = torch.profiler.profile(record_shapes=True, activities=[torch.profiler.ProfilerActivity.CPU]
                                         + ([torch.profiler.ProfilerActivity.CUDA] if CUDA else []))
        with ctx:
            if graphed and mode in ("written", "dedupe"):
                work.capture(m)  # the capture is recorded; replays are counted
            t = work.run(m, n)
        if graphed and mode in ("written", "dedupe"):
            work.capture(None)
        return t
    try:
        with torch.inference_mode():
            if graphed:
                work.capture(None)
            for mode in modes:
                once(mode, "warm", 1)
            times = {m: [] for m in modes}
            for r in range(rounds):
                order = modes[:]
                random.Random(r).shuffle(order)
                for mode in order:
                    times[mode].append(once(mode, r, steps))
    finally:
        for p in armed:
            p.close()
    row = {"off_ms": median_ci(times["off"])[0] * 1e3}
    for mode in modes[1:]:
        med, lo, hi = median_ci([t / o for t, o in zip(times[mode], times["off"])])
        row[mode] = {"x_off": med, "lo": lo, "hi": hi}
    return row


def cost_rows(out, tmp, reduced, check, modes, rounds, steps, batches=None):
    """One row per workload (eager first, CUDA-graph last); an error is that
    workload's row."""
    model, prompt, sizes = cost_model(reduced)
    batches = batches or sizes
    kinds = [("decode", b, False) for b in batches] + [("prefill", 1, False)]
    if CUDA:
        kinds += [("decode", b, True) for b in batches]
    out.update(modes=modes[1:], rounds=rounds, steps=steps)
    for kind, batch, graphed in kinds:
        label = (f"{kind} batch {batch}" if kind == "decode" else f"prefill {prompt} tokens") \
            + (" (CUDA graph)" if graphed else "")
        try:
            fault(f"{check}.{kind}")
            row = dict(workload=label, **measure(tmp, model, prompt, kind, batch, graphed, modes, rounds, steps))
        except Exception as e:
            row = {"workload": label, "error": brief(e)}
            out["failures"].append(f"{label}: {brief(e)}")
        if CUDA:
            torch.cuda.empty_cache()  # the workload's cache and graph are gone
        out["summary"] = (f"{sum('error' not in r for r in out['rows'] + [row])} of {len(kinds)} workloads x "
                          f"{len(modes)} modes, {rounds} interleaved rounds")
        out.row(row)


def check_cost(out, tmp, reduced):
    modes = ["off", "armed", "written", "dedupe", "python logger"]
    rounds, steps = (3, 3) if reduced else (6, 10)
    cost_rows(out, tmp, reduced, "cost", modes, rounds, steps)


def check_cost_profiler(out, tmp, reduced):
    """torch.profiler apart: CUPTI with graph capture and replay is the
    likeliest hang (pytorch #75504, #135003)."""
    # each round's trace takes seconds to process on a GPU: batch 1 only, fewer steps
    rounds, steps, batches = (3, 3, None) if reduced else (6, 4, (1,))
    cost_rows(out, tmp, reduced, "cost_profiler", ["off", "torch.profiler"], rounds, steps, batches)


# ---------------------------------------------------------------- pytest --
def check_pytest(out, tmp, reduced):
    """The suite's GPU tests, a row per test as each ends (tests/test_triton.py
    runs Triton's interpreter, on the host: CI's, not this check's)."""
    if not CUDA:
        raise Skip("needs CUDA")
    import pytest
    files = [os.path.join(ROOT, "tests", "test_cuda.py")]

    class Rows:
        def pytest_runtest_logreport(self, report):
            if report.when != "call" and report.outcome == "passed":
                return
            where = f" ({report.when})" if report.failed and report.when != "call" else ""
            row = {"test": report.nodeid.rsplit("/", 1)[-1] + where, "outcome": report.outcome,
                   "seconds": round(report.duration, 1)}
            if report.failed:
                out["failures"].append(f"{row['test']}: {str(report.longrepr).strip().splitlines()[-1][:300]}")
            out.row(row)
            counts = {}
            for r in out["rows"]:
                counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
            out["summary"] = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + \
                " (" + ", ".join(os.path.relpath(f, ROOT) for f in files) + ")"
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", "--rootdir", ROOT, *files],
                       plugins=[Rows()])
    if code not in (0, 1):
        out["failures"].append(f"pytest exited {int(code)}")


# -------------------------------------------------------------- coverage --
def profiler_name(operation: str) -> str:
    """torch.profiler's name of a recorded operator: 'aten::mm' of
    'aten.mm.default' (the schema's name, without the overload)."""
    ns, _, rest = operation.partition(".")
    return f"{ns}::{rest.rsplit('.', 1)[0]}" if "." in rest else operation


def kernel_coverage(events, operations):
    """What the records explain of a torch.profiler trace's GPU kernels:
    (kernels explained, kernels, us explained, us, {unexplained kernel name:
    [launches, us]}). events: the trace's FunctionEvents (a CPU op's
    kernels, the kernels no op launched); operations: the records' names.
    A kernel is explained when the op that launched it, or one it ran
    inside, is a recorded operator or a recorded kernel library's call, or
    its name is a recorded Triton or Inductor launch's kernel."""
    # a kernel library's call is a range named as its record (recording/doors.py)
    ops = {profiler_name(o) if ":" not in o else o for o in operations}
    kernels = {o.split(":", 1)[1].rsplit(".", 1)[-1].split("#")[0] for o in operations
               if o.startswith(("triton:", "inductor:"))}
    n_ok = n = 0
    us_ok = us = 0.0
    missing = {}

    def launched(name):
        return name in kernels or any(name.startswith(k + "_") for k in kernels)

    def count(name, dur, ok):
        nonlocal n_ok, n, us_ok, us
        if name.startswith(("Memcpy", "Memset")):  # copies, not kernels
            return
        n += 1
        us += dur
        if ok:
            n_ok += 1
            us_ok += dur
        else:
            m = missing.setdefault(name, [0, 0.0])
            m[0] += 1
            m[1] += dur
    events = list(events)
    # torch keeps each kernel as an event of its own too, beside the op's
    # kernels it was appended to: count it once, under its op
    ops_with_kernels = {e.id for e in events if str(e.device_type).endswith("CPU") and e.kernels}
    for e in events:
        if str(e.device_type).endswith("CPU"):
            if not e.kernels:
                continue
            chain, p = [], e
            while p is not None:
                chain.append(p.name)
                p = p.cpu_parent
            under = any(c in ops for c in chain)
            for k in e.kernels:
                count(k.name, k.duration, under or launched(k.name))
        elif getattr(e, "linked_correlation_id", 0) not in ops_with_kernels:
            # a kernel that no op launched (a Triton launch from Python)
            count(e.name, e.time_range.elapsed_us(), launched(e.name))
    return n_ok, n, us_ok, us, missing


def check_coverage(out, tmp, reduced):
    if not CUDA:
        raise Skip("needs CUDA (the kernels CUPTI traces)")
    from torch.profiler import ProfilerActivity, profile
    worst = None
    for name, make in (("llama", dense_lm), ("mixtral-moe", moe_lm)):
        torch.manual_seed(0)
        model = make(reduced).to(DEVICE, torch.bfloat16).eval()
        ids = torch.randint(1, 512, (2, 12), device=DEVICE)
        with torch.inference_mode():
            model(ids)  # warm-up, outside the trace and the records
        sync()
        prof = ShapeProfiler(os.path.join(tmp, f"coverage-{name}.jsonl"))
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
            with torch.inference_mode():
                for step, t in enumerate((ids, ids[:, -1:], ids[:, -1:])):
                    prof.start_forward_pass("prefill" if step == 0 else "decode")
                    model(t)
                    prof.end_forward_pass()
            sync()
        prof.close()
        n_ok, n, us_ok, us, missing = kernel_coverage(trace.events(), {r["operation"] for r in read_jsonl(prof.path)})
        share_n, share_us = n_ok / max(n, 1), us_ok / max(us, 1e-9)
        worst = min(share_n, share_us) if worst is None else min(worst, share_n, share_us)
        top = sorted(missing.items(), key=lambda x: -x[1][1])[:8]
        out.row({"model": name, "kernels": n, "explained": n_ok, "launch share": f"{100 * share_n:.1f}%",
                 "time share": f"{100 * share_us:.1f}%",
                 "unexplained": ", ".join(f"{k} x{v[0]}" for k, v in top) or "-"})
        if n == 0:
            out["failures"].append(f"{name}: the trace has no kernels")
        elif min(share_n, share_us) < 0.98:
            out["failures"].append(f"{name}: {100 * share_n:.1f}% of launches, {100 * share_us:.1f}% of kernel "
                                   f"time explained (target 98%); unexplained: "
                                   + ", ".join(k for k, _ in top))
        del model
    out["summary"] = f"at least {100 * (worst or 0):.1f}% of kernel launches and time explained by records"


# ----------------------------------------------------------------- timed --
def profiler_kernels(trace):
    """torch.profiler's kernels of a trace: {recorded operator's profiler
    name or '(no op)': [launches, us]} and {kernel name: [launches, us]}."""
    by_op, by_name = {}, {}
    for e in trace.events():
        if str(e.device_type).endswith("CPU") and e.kernels and e.cpu_parent is None:
            kernels, key = e.kernels, e.name
        elif not str(e.device_type).endswith("CPU") and not e.name.startswith(("Memcpy", "Memset")):
            kernels, key = [e], None
        else:
            continue
        for k in kernels:
            us = k.duration if hasattr(k, "duration") else k.time_range.elapsed_us()
            if key is not None:
                v = by_op.setdefault(key, [0, 0.0])
                v[0] += 1
                v[1] += us
            else:
                v = by_name.setdefault(k.name, [0, 0.0])
                v[0] += 1
                v[1] += us
    return by_op, by_name


def check_timed(out, tmp, reduced):
    """time="kernels" against torch.profiler on the same workload, graphs
    off and on: every kernel torch.profiler saw is in our kernels file (by
    name and launches), 98% of kernel time is under records, and each
    operator's kernel launches and time agree with the ones torch.profiler
    puts under that operator (eager)."""
    if not CUDA:
        raise Skip("needs CUDA (CUPTI's kernels)")
    from torch.profiler import ProfilerActivity, profile
    from sgl_shapeprof.analysis.kernel_time import ledger
    from sgl_shapeprof.records.kernels import read_kernels
    torch.manual_seed(0)
    model = dense_lm(reduced).to(DEVICE, torch.bfloat16).eval()
    ids = torch.randint(1, 512, (4, 1), device=DEVICE)
    with torch.inference_mode():
        model(ids)
    graph = torch.cuda.CUDAGraph()

    def steps(prof, graphed):
        for _ in range(4):
            if prof is not None:
                prof.start_forward_pass("decode")
            with torch.inference_mode():
                if graphed:
                    graph.replay()
                    if prof is not None:
                        prof.graph_replayed(4)
                else:
                    model(ids)
            if prof is not None:
                prof.end_forward_pass()
        sync()

    def capture(prof):
        """A fresh graph of one decode step (warm-up on a side stream, as
        capture wants), captured inside a recorded capture when prof is given."""
        nonlocal graph
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            model(ids)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        cm = prof.capture_graph(4) if prof is not None else contextlib.nullcontext()
        with torch.inference_mode(), cm, torch.cuda.graph(graph):
            model(ids)

    for graphed in (False, True):
        name = "graphs" if graphed else "eager"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
            if graphed:
                capture(None)
            steps(None, graphed)
        ref_ops, ref_names = profiler_kernels(trace)
        prof = ShapeProfiler(os.path.join(tmp, f"timed-{name}.jsonl"), time="kernels")
        if prof.kernels_path is None:
            out["failures"].append(f"{name}: time='kernels' was refused (see the profiler's messages)")
            prof.close()
            return
        if graphed:  # captured again under the collector: its nodes are noted
            capture(prof)
        steps(prof, graphed)
        prof.close()
        kf = read_kernels(prof.kernels_path)
        led = ledger(name, prof.path, kf)
        ours = {}
        for k in kf.kernels:
            v = ours.setdefault(k.name, [0, 0.0])
            v[0] += 1
            v[1] += k.ns / 1e3
        want = ref_names  # every kernel torch.profiler saw (the capture's own warm-up included)
        lost = {k: v[0] - ours.get(k, [0])[0] for k, v in want.items() if ours.get(k, [0])[0] < v[0]}
        share = led.explained_share
        row = {"mode": name, "kernels": led.kernels, "kernel us": round(led.total_ns / 1e3, 1),
               "under records": f"{100 * share:.1f}%", "missing vs torch.profiler": len(lost),
               "unexplained": ", ".join(f"{n} x{c}" for n, c, _ in led.unexplained[:5]) or "-"}
        if not graphed:
            worst = []
            for o in led.operations.values():
                ref = ref_ops.get(profiler_name(o.operation))
                if ref and ref[1] >= 0.05 * (led.total_ns / 1e3):
                    worst.append((abs(o.ns / 1e3 - ref[1]) / ref[1], o.operation, o.kernels, ref[0]))
            worst.sort(reverse=True)
            row["largest op time gap"] = f"{100 * worst[0][0]:.1f}% ({worst[0][1]})" if worst else "-"
            for gap, op, n_ours, n_ref in worst:
                if n_ours != n_ref:
                    out["failures"].append(f"eager: {op}: {n_ours} kernels recorded, torch.profiler {n_ref}")
        out.row(row)
        if lost:
            out["failures"].append(f"{name}: kernels torch.profiler saw that the kernels file lacks: "
                                   + ", ".join(f"{k} x{v}" for k, v in list(lost.items())[:5]))
        if share < 0.98:
            out["failures"].append(f"{name}: {100 * share:.1f}% of kernel time under records (target 98%)")
    out["summary"] = "; ".join(f"{r['mode']}: {r['under records']} of {r['kernel us']} us under records"
                               for r in out["rows"])


CHECKS = {"native": check_native, "parity": check_parity, "graphs": check_graphs, "sync": check_sync,
          "custom_ops": check_custom_ops, "triton": check_triton, "kill": check_kill, "cost": check_cost,
          "pytest": check_pytest, "coverage": check_coverage, "timed": check_timed,
          "cost_profiler": check_cost_profiler}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(CHECKS))
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--stacks", required=True)
    ap.add_argument("--reduced", action="store_true")
    a = ap.parse_args()
    out = Result(a.result)
    try:
        fault(a.name)
        CHECKS[a.name](out, a.tmp, a.reduced or not CUDA)
        out["status"] = "FAIL" if out["failures"] else "pass"
    except Skip as e:
        out.update(status="skip", summary=str(e))
    except Exception as e:
        if optional_missing(e):
            out.update(status="skip", summary=f"needs {optional_missing(e)}")
        else:
            out.update(status="FAIL", summary=brief(e))
            out["failures"] += traceback.format_exc().strip().splitlines()[-8:]
    stats = native_sync_stats()
    if stats is not None:
        out["sync"] = stats
    out.save()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
