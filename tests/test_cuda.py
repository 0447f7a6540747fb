"""GPU checks (skipped without CUDA; CI has none): CUDA tensors, no device
synchronisation on the hot path, CUDA graph capture inside a logged pass,
graph captures recorded and replays counted as SGLang's decode graphs are,
and an asynchronous kernel error."""
import json
import subprocess
import sys
import time

import pytest
import torch
from helpers import assert_same_stream, load, run_both, run_python

from sgl_shapeprof import ShapeProfiler, _C
from sgl_shapeprof.demo.models import make_llama, run_llama

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cuda_llama_bf16_matches_reference(tmp_path):
    def work(marker):
        model = make_llama(torch.bfloat16, device="cuda")
        with torch.inference_mode():
            run_llama(model, marker, decode_steps=3)
    ref, ours, _ = run_both(tmp_path, work)
    assert_same_stream(ref, ours)


def logged_behind_a_long_kernel(tmp_path, name, sync):
    """300 logged calls queued behind a ~0.2 s kernel: the host time they
    took, and whether the stream was still busy after them. The same calls
    run once before the clock starts: CUDA loads a kernel's module at its
    first launch, and that load waits for the queue to drain (cuBLAS's
    first handle too), which would look like the profiler waiting."""
    a = torch.randn(64, 64, device="cuda")
    warm = a.clone()
    for _ in range(100):
        warm = torch.relu(warm @ warm) * 0.5
    torch.cuda._sleep(1000)
    prof = ShapeProfiler(tmp_path / f"{name}.jsonl", sync=sync)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda._sleep(400_000_000)  # GPU cycles: about 0.2 s at 2 GHz
    with prof.forward_pass():
        for _ in range(100):
            a = torch.relu(a @ a) * 0.5
    busy = not torch.cuda.current_stream().query()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    prof.close()
    assert len(load(tmp_path / f"{name}.jsonl")) == 300
    return host, busy


def test_hot_path_never_synchronises(tmp_path):
    """set_sync_debug_mode sees only c10's own syncs; a kernel queued first
    that is still running after the 300 logged calls proves nothing waited.
    Sync mode is the positive control: it must wait."""
    host, busy = logged_behind_a_long_kernel(tmp_path, "plain", sync=False)
    assert busy and host < 0.1, (host, busy)
    host, busy = logged_behind_a_long_kernel(tmp_path, "sync", sync=True)
    assert not busy and host > 0.15, (host, busy)
    stats = _C.sync_stats()  # how it told that no graph was being captured
    assert stats["capture"] in ("guard", "driver") and stats["waited"] >= 300, stats


def test_sync_mode_blames_the_launching_call_and_spares_a_capture(tmp_path):
    """An out-of-range index_select is blamed on itself (a child: the
    device-side assert ruins its CUDA context), and a graph captured inside
    an open sync pass still captures."""
    code = f"""
import torch
from sgl_shapeprof import ShapeProfiler
p = ShapeProfiler({str(tmp_path / 'blame.jsonl')!r}, sync=True)
x = torch.randn(10, 4, device="cuda"); idx = torch.tensor([0, 99], device="cuda")
try:
    with p.forward_pass():
        z = torch.index_select(torch.relu(x), 0, idx) * 2
except Exception as e:
    print(type(e).__name__)
"""
    run_python(code)
    blamed = [r["operation"] for r in load(tmp_path / "blame.jsonl") if r.get("error")]
    assert blamed == ["aten.index_select.default"]
    a = torch.randn(32, 32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.relu(a @ a)
    torch.cuda.current_stream().wait_stream(s)
    prof = ShapeProfiler(tmp_path / "capture.jsonl", sync=True)
    g = torch.cuda.CUDAGraph()
    with prof.forward_pass():
        torch.relu(a)
        with torch.cuda.graph(g):
            out = torch.relu(a @ a)
    g.replay()
    torch.cuda.synchronize()
    prof.close()
    assert torch.equal(out, torch.relu(a @ a))


def test_cuda_graph_capture_inside_a_logged_pass(tmp_path):
    x = torch.randn(8, 8, device="cuda")
    prof = ShapeProfiler(tmp_path / "g.jsonl")
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.relu(x @ x)                     # warm-up on the side stream, as capture wants
    torch.cuda.current_stream().wait_stream(s)
    with prof.forward_pass():
        with torch.cuda.graph(graph):
            y = torch.relu(x @ x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(y, torch.relu(x @ x))
    prof.close()
    ops = [r["operation"] for r in load(tmp_path / "g.jsonl")]
    assert "aten.mm.default" in ops and "aten.relu.default" in ops


def test_cuda_graph_captures_recorded_and_replays_counted(tmp_path):
    """SGLang's decode graphs, the way the integration records them: warm-up
    on a side stream, then per batch size a real CUDA graph whose capture run
    is inside capture_graph (begun while the stream captures, as the wrapped
    forward_fn does), replays counted inside logged passes. The capture must
    succeed (a host sync while capturing raises), allocate on the device
    exactly what it does unprofiled, and replays must give eager results."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64)).to("cuda", torch.float16)
    sizes = (1, 2, 4)
    static_in = {bs: torch.zeros(bs, 64, device="cuda", dtype=torch.float16) for bs in sizes}
    prof = ShapeProfiler(tmp_path / "g.jsonl")

    def capture(bs, key=None):
        g = torch.cuda.CUDAGraph()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        with torch.cuda.graph(g):
            if key is None:
                out = model(static_in[bs])
            else:
                with prof.capture_graph(key, "decode") as logged:
                    assert logged
                    out = model(static_in[bs])
        return g, out, torch.cuda.memory_stats()["allocation.all.allocated"] - before

    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):               # warm-up: outside any capture, not recorded
            for bs in sizes:
                model(static_in[bs])
        torch.cuda.current_stream().wait_stream(s)
        graphs, outs = {}, {}
        for bs in reversed(sizes):               # as SGLang: largest first
            capture(bs)                          # one-time allocations (cuBLAS workspace, ...) go here
            _, _, unprofiled = capture(bs)
            graphs[bs], outs[bs], profiled = capture(bs, key=bs)
            assert profiled == unprofiled        # the profiler allocated nothing on the device

        xs = [torch.randn(raw, 64, device="cuda", dtype=torch.float16) for raw in (3, 1, 4, 2, 3)]
        results = []
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # counting a replay never synchronises
        try:
            for x in xs:
                bs = min(b for b in sizes if b >= x.shape[0])   # padded, as SGLang does
                with prof.forward_pass("decode"):
                    static_in[bs].zero_()
                    static_in[bs][:x.shape[0]].copy_(x)
                    graphs[bs].replay()
                    assert prof.graph_replayed(bs)
                    results.append(outs[bs][:x.shape[0]].clone())
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        for x, y in zip(xs, results):            # the eager model at the padded size
            padded = torch.zeros(min(b for b in sizes if b >= x.shape[0]), 64, device="cuda",
                                 dtype=torch.float16)
            padded[:x.shape[0]] = x
            torch.testing.assert_close(y, model(padded)[:x.shape[0]], rtol=1e-2, atol=1e-2)
    prof.close()

    eager = ShapeProfiler(tmp_path / "eager.jsonl")   # the model's calls at each size, eagerly
    with torch.no_grad():
        for bs in sizes:
            with eager.forward_pass(f"eager_{bs}"):
                model(static_in[bs])
    eager.close()

    recs = load(tmp_path / "g.jsonl")
    summary = json.load(open(tmp_path / "g_summary.json"))
    assert summary["graphs"] == {"4": {"captures": 1, "replays": 3}, "2": {"captures": 1, "replays": 1},
                                 "1": {"captures": 1, "replays": 1}}
    ref = load(tmp_path / "eager.jsonl")
    for bs in sizes:   # one capture run's calls, nothing from the warm-up
        graph = [(r["operation"], r["inputs"], r["outputs"]) for r in recs if r.get("graph") == bs]
        assert graph and all(r["forward_pass"] == 0 and r["phase"] == "decode" for r in recs if r.get("graph") == bs)
        assert graph == [(r["operation"], r["inputs"], r["outputs"]) for r in ref if r["phase"] == f"eager_{bs}"]
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", str(tmp_path / "g.jsonl"), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    counts = {}
    for g in json.loads(r.stdout):
        counts[(g["m"], g["n"], g["k"])] = counts.get((g["m"], g["n"], g["k"]), 0) + g["count"]
    assert counts == {(bs, n, k): reps for bs, reps in ((4, 3), (2, 1), (1, 1)) for n, k in ((256, 64), (64, 256))}


ASYNC_ERROR = r'''
import json, sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1])
x = torch.zeros(3, device="cuda")
idx = torch.tensor([5], device="cuda")
with prof.forward_pass():
    try:
        y = x[idx]                     # the kernel fails on the device, later
        y.sum().item()                 # ... and the error surfaces at this sync
    except Exception as e:
        print(json.dumps([type(e).__name__, str(e)]))
prof.close()
'''


def test_async_kernel_error_is_recorded_where_it_surfaces(tmp_path):
    path = tmp_path / "a.jsonl"
    r = run_python(ASYNC_ERROR, args=(path,), env_extra={"CUDA_LAUNCH_BLOCKING": "0"})
    assert r.returncode == 0, r.stderr
    seen_type, seen_message = json.loads(r.stdout.strip().splitlines()[-1])
    recs = load(path)
    assert any(x["operation"] == "aten.index.Tensor" for x in recs)
    err = [x for x in recs if "error" in x][-1]
    assert err["error"] == {"error_type": seen_type, "error_message": seen_message}
