"""The SGLang worker paths beyond forward_batch_generation, on stand-in
workers shaped like 0.5.23's: delayed sampling reopens its pass, split prefill
and embedding forwards are passes, the diffusion worker's sequential generator
is one pass per yielded request, and pre-warm requests are labelled warmup.
Also when SGLang's custom-op gate is ours (logged passes only, and only for the
logged thread); with SGLang's real register_custom_op: tests/sglang/test_sglang_graphs.py."""
import json
import sys
import threading
import types

import pytest
import torch
from helpers import load

from sgl_shapeprof.integrations.sglang.seam import CUSTOM_OP as SGLANG_CUSTOM_OP
from sgl_shapeprof.integrations import sglang as integ


@pytest.fixture
def env(tmp_path, monkeypatch):
    out = tmp_path / "s.jsonl"
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(out))
    return out


def mode(name):
    return types.SimpleNamespace(forward_mode=types.SimpleNamespace(name=name))


class LlmWorker:
    tp_rank = 0
    is_draft_worker = False

    def forward_batch_generation(self, batch=None, forward_batch=None, delay=False):
        x = torch.ones(3, 4) @ torch.ones(4, 5)
        result = types.SimpleNamespace(logits=x, delay_sample_func=None)
        if delay:
            def sample():
                result.next_token_ids = torch.argmax(result.logits, dim=-1)
                return result
            result.delay_sample_func = sample
        return result

    def forward_batch_split_prefill(self, batch):
        return torch.ones(2, 2).neg()

    def forward_batch_embedding(self, batch):
        return torch.ones(6, 8).sum(dim=1), False


def test_delayed_sampling_belongs_to_its_pass(env):
    w = LlmWorker()
    prof = integ.attach_llm_worker(w)
    r1 = w.forward_batch_generation(mode("DECODE"), delay=True)
    torch.ones(1).add(1)                     # the scheduler's own work: not logged
    r1.delay_sample_func()                   # sampled later, before the next batch
    r2 = w.forward_batch_generation(mode("EXTEND"))
    assert r2.delay_sample_func is None
    prof.close()
    recs = load(env)
    ops = [(r["forward_pass"], r["phase"], r["operation"]) for r in recs]
    assert ops == [(1, "decode", "aten.ones.default"), (1, "decode", "aten.ones.default"),
                   (1, "decode", "aten.mm.default"), (1, "decode", "aten.argmax.default"),
                   (2, "extend", "aten.ones.default"), (2, "extend", "aten.ones.default"),
                   (2, "extend", "aten.mm.default")]
    summary = json.loads(open(prof.summary_path).read())
    assert summary["forward_passes"] == 2 and summary["phase_passes"] == {"decode": 1, "extend": 1}
    assert summary["total_operations"] == len(recs)


def test_reopen_after_an_unlogged_pass_logs_nothing(env, monkeypatch):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_PHASES", "extend")
    w = LlmWorker()
    prof = integ.attach_llm_worker(w)
    w.forward_batch_generation(mode("DECODE"), delay=True).delay_sample_func()
    prof.close()
    assert load(env) == []


def test_split_prefill_and_embedding_forwards_are_passes(env):
    w = LlmWorker()
    prof = integ.attach_llm_worker(w)
    w.forward_batch_split_prefill(mode("SPLIT_PREFILL"))
    w.forward_batch_embedding(mode("EXTEND"))
    prof.close()
    assert [(r["forward_pass"], r["phase"], r["operation"]) for r in load(env)] == [
        (1, "split_prefill", "aten.ones.default"), (1, "split_prefill", "aten.neg.default"),
        (2, "extend", "aten.ones.default"), (2, "extend", "aten.sum.dim_IntList")]


class Req:
    def __init__(self, n, is_warmup=False, extra=None):
        self.n, self.is_warmup, self.extra = n, is_warmup, extra or {}


class DiffusionWorker:
    rank = 0

    def execute_forward(self, batch, return_req=False):
        return torch.zeros(batch[0].n).exp()

    def execute_forward_sequentially(self, batch):
        shared = torch.ones(len(batch), 3).cumsum(0)   # batched work before the first yield
        for req in batch:
            yield torch.ones(req.n) * shared[0, 0]
        torch.ones(1).sqrt()                            # clean-up after the last yield


def test_sequential_generator_is_one_pass_per_request(env):
    w = DiffusionWorker()
    prof = integ.attach_diffusion_worker(w)
    outs = []
    for out in w.execute_forward_sequentially([Req(2), Req(5)]):
        outs.append(out)
        torch.ones(9).neg()                  # the consumer's work between yields: not logged
    prof.close()
    assert [o.shape[0] for o in outs] == [2, 5]
    recs = load(env)
    by_pass = {}
    for r in recs:
        by_pass.setdefault(r["forward_pass"], []).append(r["operation"])
    assert sorted(by_pass) == [1, 2]
    assert "aten.cumsum.default" in by_pass[1] and "aten.cumsum.default" not in by_pass[2]
    assert by_pass[2][-1] == "aten.sqrt.default"     # in the last request's pass
    assert all(r["phase"] == "generate" for r in recs)
    assert not any(r["operation"] == "aten.neg.default" for r in recs)
    summary = json.loads(open(prof.summary_path).read())
    assert summary["forward_passes"] == 2


def test_prewarm_requests_are_warmup_passes(env):
    w = DiffusionWorker()
    prof = integ.attach_diffusion_worker(w)
    w.execute_forward([Req(2, extra={"server_internal_prewarm": True})])
    w.execute_forward([Req(3, is_warmup=True)])
    w.execute_forward([Req(4)])
    prof.close()
    assert [r["phase"] for r in load(env) if r["operation"] == "aten.exp.default"] == [
        "warmup", "warmup", "generate"]


# ---- SGLang's custom-op gate ---------------------------------------------------
@pytest.fixture
def custom_op_module(monkeypatch):
    """A stand-in for sglang.srt.utils.custom_op: what the integration reads."""
    module = types.ModuleType(SGLANG_CUSTOM_OP)
    module._profiling = torch._C._autograd._profiler_enabled
    module._call_directly_in_eager = lambda op_func, op: op_func
    monkeypatch.setitem(sys.modules, SGLANG_CUSTOM_OP, module)
    monkeypatch.setattr(integ, "_gate_failed", False, raising=False)
    return module


def test_custom_op_gate_is_ours_only_in_logged_passes(env, monkeypatch, custom_op_module):
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_SKIP_WARMUP", "1")
    sglangs = custom_op_module._profiling
    seen = []

    class Worker(LlmWorker):
        def forward_batch_generation(self, batch=None, forward_batch=None):
            gate = custom_op_module._profiling
            other = []
            t = threading.Thread(target=lambda: other.append(gate()))   # a thread outside any pass
            t.start()
            t.join()
            self.forward_batch_split_prefill(batch)                    # a pass inside the pass
            seen.append((gate is sglangs, gate(), other[0], custom_op_module._profiling is gate))

    w = Worker()
    prof = integ.attach_llm_worker(w)
    w.forward_batch_generation(mode("DECODE"))     # warm-up: not logged, SGLang's gate
    assert custom_op_module._profiling is sglangs
    w.forward_batch_generation(mode("DECODE"))     # logged: ours, for this thread only
    assert custom_op_module._profiling is sglangs  # and SGLang's again after it
    prof.close()
    assert seen == [(True, False, False, True), (False, True, False, True)]


def test_custom_op_gate_failure_is_said_once(env, capsys, custom_op_module):
    del custom_op_module._profiling                # an SGLang whose gate we do not know
    w = LlmWorker()
    prof = integ.attach_llm_worker(w)
    for _ in range(2):
        assert w.forward_batch_generation(mode("DECODE")).logits.shape == (3, 5)
    prof.close()
    assert [r["forward_pass"] for r in load(env) if r["operation"] == "aten.mm.default"] == [1, 2]
    err = capsys.readouterr().err
    assert err.count("cannot route SGLang's custom ops through the dispatcher") == 1, err
    assert not hasattr(custom_op_module, "_profiling")


def test_thread_logging(tmp_path):
    """The public question the gate asks: this thread, in a logged pass, now."""
    import sgl_shapeprof
    prof = sgl_shapeprof.ShapeProfiler(tmp_path / "t.jsonl", skip_warmup=1)
    states = [sgl_shapeprof.thread_logging()]
    for _ in range(2):                       # a warm-up pass, then a logged one
        with prof.forward_pass():
            other = []
            t = threading.Thread(target=lambda: other.append(sgl_shapeprof.thread_logging()))
            t.start()
            t.join()
            states.append((sgl_shapeprof.thread_logging(), other[0]))
    states.append(sgl_shapeprof.thread_logging())
    prof.close()
    assert states == [False, (False, False), (True, False), False]
