"""GPU checks (skipped without CUDA; CI has none): CUDA tensors, no device
synchronisation on the hot path, CUDA graph capture inside a logged pass, and
an asynchronous kernel error."""
import json

import pytest
import torch
from helpers import assert_same_stream, load, run_both, run_python

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.demo_models import make_llama, run_llama

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cuda_llama_bf16_matches_reference(tmp_path):
    def work(marker):
        model = make_llama(torch.bfloat16, device="cuda")
        with torch.inference_mode():
            run_llama(model, marker, decode_steps=3)
    ref, ours, _ = run_both(tmp_path, work)
    assert_same_stream(ref, ours)


def test_hot_path_never_synchronises(tmp_path):
    a = torch.randn(64, 64, device="cuda")
    prof = ShapeProfiler(tmp_path / "s.jsonl")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")   # any synchronising call raises
    try:
        with prof.forward_pass():
            for _ in range(100):
                a = torch.relu(a @ a) * 0.5
    finally:
        torch.cuda.set_sync_debug_mode("default")
    prof.close()
    assert len(load(tmp_path / "s.jsonl")) == 300


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
