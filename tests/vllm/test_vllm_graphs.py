"""vLLM 0.32's real CUDAGraphWrapper (vllm/compilation/cuda_graph.py) with
our patch, on CPU: the CUDA pieces it calls (torch.cuda.CUDAGraph and
torch.cuda.graph, the graph pool, the stream, the forward context) are
stubbed, everything else is vLLM's code. Warm-ups (runtime mode NONE) are
not recorded, each capture run is, replays are counted, as for SGLang."""
import contextlib
import itertools
import json
import types

import pytest
import torch
from helpers import needs_vllm

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.integrations import graphs as graph_keys
from sgl_shapeprof.integrations.vllm.workers import _Steps, step_phase
from sgl_shapeprof.recording import env as profiler_module

pytestmark = needs_vllm("0.32.0")


class FakeGraph:
    replays = 0

    def replay(self):
        FakeGraph.replays += 1


@pytest.fixture
def cuda_graph(monkeypatch):
    """vllm.compilation.cuda_graph, CUDA stubbed; our patch undone afterwards."""
    from vllm.compilation import cuda_graph as cg
    from vllm.config import CUDAGraphMode
    monkeypatch.setattr(cg.CUDAGraphWrapper, "__call__", cg.CUDAGraphWrapper.__call__)
    monkeypatch.setattr(graph_keys, "_graph_families", {})
    monkeypatch.setattr(graph_keys, "_graph_captured", set())
    monkeypatch.setattr(graph_keys, "_graph_backends", itertools.count(1))
    capturing = []

    @contextlib.contextmanager
    def graph(cudagraph, pool=None, stream=None):
        capturing.append(True)
        try:
            yield
        finally:
            capturing.pop()
    FakeGraph.replays = 0
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(cg, "current_stream", lambda: None)
    monkeypatch.setattr(cg, "capture_pool", lambda pool, config: contextlib.nullcontext(pool))
    monkeypatch.setattr(cg, "validate_cudagraph_capturing_enabled", lambda: None)
    monkeypatch.setattr(cg, "weak_ref_tensors", lambda t: t)
    monkeypatch.setattr(cg, "current_platform", types.SimpleNamespace(get_global_graph_pool=lambda: None))
    ctx = types.SimpleNamespace(batch_descriptor=None, cudagraph_runtime_mode=CUDAGraphMode.NONE)
    monkeypatch.setattr(cg, "is_forward_context_available", lambda: True)
    monkeypatch.setattr(cg, "get_forward_context", lambda: ctx)
    return cg, CUDAGraphMode, ctx, capturing


def test_captures_recorded_replays_counted(cuda_graph, tmp_path, monkeypatch):
    cg, Mode, ctx, capturing = cuda_graph
    from sgl_shapeprof.integrations.vllm.cuda_graphs import patch_cuda_graph_module
    from vllm.forward_context import BatchDescriptor
    patch_cuda_graph_module(cg)
    patch_cuda_graph_module(cg)                 # twice: wrapped once
    assert not hasattr(cg.CUDAGraphWrapper.__call__.__wrapped__, "__sgl_shapeprof_wrapped__")
    prof = ShapeProfiler(tmp_path / "g.jsonl")
    monkeypatch.setattr(profiler_module, "_env_profiler", prof)
    x, runs = torch.ones(4, 3), []

    def model(t):
        runs.append(bool(capturing))
        return torch.relu(t)

    config = types.SimpleNamespace(compilation_config=None)
    full = cg.CUDAGraphWrapper(model, config, Mode.FULL)
    piece = cg.CUDAGraphWrapper(model, config, Mode.PIECEWISE)
    decode4 = BatchDescriptor(num_tokens=4, num_reqs=4, uniform=True)
    mixed8 = BatchDescriptor(num_tokens=8)

    full(x)                                     # warm-up (mode NONE): not recorded
    ctx.cudagraph_runtime_mode, ctx.batch_descriptor = Mode.FULL, decode4
    full(x)                                     # capture
    piece(x)                                    # not its mode: runs as is, unrecorded
    ctx.batch_descriptor = mixed8
    full(x.repeat(2, 1))                        # capture of another graph
    assert runs == [False, True, False, True]
    ctx.batch_descriptor = decode4
    outs = []
    # two steps through the runner's wrapper, 3 requests decoding (padded to
    # the graph of 4): the replays know their real size; a bare pass does not
    step = _Steps().forward(lambda out: outs.append(full(x)), prof, step_phase)
    for _ in range(2):
        step(decode_step(["a", "b", "c"]))
    with prof.forward_pass("decode"):
        outs.append(full(x))                    # replayed: nothing runs through the dispatcher
    assert all(torch.equal(o, torch.relu(x)) for o in outs)   # vLLM's replay: the captured output
    assert FakeGraph.replays == 3 and len(runs) == 4
    prof.close()
    records = [json.loads(line) for line in open(tmp_path / "g.jsonl")]
    mixed_key = graph_keys.captured_key(full, mixed8)
    assert mixed_key is not None and mixed_key % graph_keys.GRAPH_FAMILY == 8 and mixed_key >= graph_keys.GRAPH_FAMILY
    assert [(r["operation"], r["phase"], r["graph"], r["inputs"]["self"]["shape"]) for r in records] == [
        ("aten.relu.default", "decode", 4, [4, 3]), ("aten.relu.default", "mixed", mixed_key, [8, 3])]
    assert json.load(open(tmp_path / "g_summary.json"))["graphs"] == {
        "4": {"captures": 1, "replays": 3, "real_sizes": {"3": 2}}, str(mixed_key): {"captures": 1, "replays": 0}}


def decode_step(reqs):
    """A SchedulerOutput's fields that the runner's wrapper reads: every
    request decoding one token."""
    return types.SimpleNamespace(
        num_scheduled_tokens={r: 1 for r in reqs}, scheduled_new_reqs=[], scheduled_spec_decode_tokens={},
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=list(reqs), num_output_tokens=[5] * len(reqs),
                                                    resumed_req_ids=[]))


def test_profiling_off_leaves_the_wrapper_alone(cuda_graph):
    cg, Mode, ctx, capturing = cuda_graph
    from sgl_shapeprof.integrations.vllm.cuda_graphs import patch_cuda_graph_module
    from vllm.forward_context import BatchDescriptor
    patch_cuda_graph_module(cg)
    full = cg.CUDAGraphWrapper(lambda t: t + 1, types.SimpleNamespace(compilation_config=None), Mode.FULL)
    ctx.cudagraph_runtime_mode, ctx.batch_descriptor = Mode.FULL, BatchDescriptor(num_tokens=2)
    x = torch.zeros(2)
    assert torch.equal(full(x), x + 1) and torch.equal(full(x), x + 1)
    assert FakeGraph.replays == 1 and graph_keys.captured_key(full, ctx.batch_descriptor) is None


def test_an_armed_worker_keeps_its_start_up_captures_for_a_profile_request(cuda_graph, tmp_path, monkeypatch):
    """Issue 52 on vLLM: armed (SHAPEPROF=on_request), the wrapper's graphs
    are captured at start-up, before any request; vLLM's Worker.profile (the
    method /start_profile reaches every worker through) then takes a
    request for 2 steps. Its file holds the capture of the graph those steps
    replayed, and counts as a from-start-up recording of the same steps."""
    cg, Mode, ctx, capturing = cuda_graph
    from vllm.forward_context import BatchDescriptor
    from vllm.v1.worker import gpu_worker
    from sgl_shapeprof import OnRequestProfiler
    from sgl_shapeprof.integrations.vllm.cuda_graphs import patch_cuda_graph_module
    from sgl_shapeprof.integrations.vllm.start_profile import patch_worker_module
    from helpers import true_counts
    patch_cuda_graph_module(cg)
    monkeypatch.setattr(gpu_worker.Worker, "profile", gpu_worker.Worker.profile)   # undone afterwards
    patch_worker_module(gpu_worker)
    monkeypatch.setenv("SHAPEPROF", "on_request")
    decode4 = BatchDescriptor(num_tokens=4, num_reqs=4, uniform=True)
    mixed8 = BatchDescriptor(num_tokens=8)
    config = types.SimpleNamespace(compilation_config=None)
    x = torch.ones(4, 3)

    def serve(prof, request):
        """Start-up captures of two graphs; one warm step; then two steps of
        3 requests decoding, replaying the graph of 4."""
        monkeypatch.setattr(profiler_module, "_env_profiler", prof)
        monkeypatch.setattr(graph_keys, "_graph_families", {})            # keys as in a fresh process
        monkeypatch.setattr(graph_keys, "_graph_captured", set())
        monkeypatch.setattr(graph_keys, "_graph_backends", itertools.count(1))
        full = cg.CUDAGraphWrapper(lambda t: torch.relu(t) * 2, config, Mode.FULL)
        ctx.cudagraph_runtime_mode = Mode.FULL
        for descriptor, t in ((decode4, x), (mixed8, x.repeat(2, 1))):
            ctx.batch_descriptor = descriptor
            full(t)                                            # captured
        ctx.batch_descriptor = decode4
        step = _Steps().forward(lambda out: full(x), prof, step_phase)
        step(decode_step(["a", "b", "c"]))                     # before the request
        request()
        for _ in range(2):
            step(decode_step(["a", "b", "c"]))
        prof.close()

    armed = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    worker = types.SimpleNamespace(profiler_config=None)
    serve(armed, lambda: gpu_worker.Worker.profile(worker, True, "req", max_iterations=2))
    path = tmp_path / f"req-shapes-{armed.worker_name()}.jsonl"
    assert armed.finished == [str(path)]
    ref = ShapeProfiler(tmp_path / "ref.jsonl", skip_warmup=1)
    serve(ref, lambda: None)
    records = [json.loads(line) for line in open(path)]
    assert [(r["operation"], r["graph"], r["inputs"]["self"]["shape"]) for r in records] == [
        ("aten.relu.default", 4, [4, 3]), ("aten.mul.Tensor", 4, [4, 3])]       # graph 4's capture, once
    mixed_key = str(graph_keys.GRAPH_FAMILY + 8)
    summary = json.load(open(str(path).replace(".jsonl", "_summary.json")))
    assert summary["graphs"] == {"4": {"captures": 1, "replays": 2, "real_sizes": {"3": 2}},
                                 mixed_key: {"captures": 0, "replays": 0}}      # the server has it: unused
    assert true_counts(str(path)) == true_counts(str(tmp_path / "ref.jsonl"))
