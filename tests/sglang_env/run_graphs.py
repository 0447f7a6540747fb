#!/usr/bin/env python3
"""SGLang 0.5.23's CUDA graph capture and replay, on a CPU, under the profiler.

    python run_graphs.py OUT.json [--replays 3,1,4,2,3]

SGLang never builds its graph runners on a CPU (cuda_graph_setup gates them
on the device), so this drives them itself, as the scheduler would, with only
the CUDA pieces stubbed (a fake torch.cuda.CUDAGraph whose capture/replay is
a flag and a counter, torch.cpu's graph/graph_pool_handle/
is_current_stream_capturing, graph_capture, an attention backend that does
nothing, a tiny model):

- decode: the real DecodeCudaGraphRunner captures batch sizes 1, 2, 4 (two
  warm-ups and one capture run each, through FullCudaGraphBackend) and
  replays them for raw batches --replays (padded to 4, 1, 4, 2, 4), each
  inside a forward pass of a worker wrapped by attach_llm_worker;
- prefill: the real BreakableCudaGraphBackend captures token buckets 4 and 16
  of a body whose attention is a real @eager_on_graph break, and replays them
  inside "extend" passes (the breaks run eagerly at every replay).

The MLP's activation and the attention's softmax are SGLang custom ops
(the real register_custom_op), which SGLang calls without the dispatcher when
no gate fires; OUT.json counts how each call ran ("custom_op_calls").

Then each model runs eagerly once at every captured size, in passes
labelled eager_decode_<bs> / eager_extend_<tokens> of a profiler of its own
(OUT's folder/eager.jsonl, every call written), for comparison.
SGLANG_PROFILE_SHAPES* come from the caller; the graph backends are patched
the zero-edit way or from a patched tree (tests/sglang/test_sglang_graphs.py).
With --request NAME (SGLANG_PROFILE_SHAPES=on_request), the replays are
recorded by a SHAPES request after the captures, through SGLang's own
ProfileReq handler (--by-stage: profile_by_stage). OUT.json says what ran.
"""
import argparse
import contextlib
import json
import os
import sys
from types import SimpleNamespace as NS
from typing import List

from cpu_env import cpu_environment  # noqa: E402  (beside this script)

cpu_environment()

import torch  # noqa: E402

import sglang.srt.model_executor.runner.decode_cuda_graph_runner as dcgr  # noqa: E402
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend  # noqa: E402
from sglang.srt.layers.logits_processor import LogitsProcessorOutput  # noqa: E402
from sglang.srt.model_executor import graph_shared_output  # noqa: E402
from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig, PhaseConfig  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import (CaptureHiddenMode, ForwardBatch,  # noqa: E402
                                                          ForwardMode)
from sglang.srt.model_executor.runner.shape_key import ShapeKey  # noqa: E402
from sglang.srt.model_executor.runner_backend import breakable_cuda_graph_backend as bcgb  # noqa: E402
from sglang.srt.model_executor.runner_backend import full_cuda_graph_backend as fcgb  # noqa: E402
from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import eager_on_graph  # noqa: E402
from sglang.srt.runtime_context import get_context, get_parallel, get_server_args  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402
from sglang.srt.utils import custom_op  # noqa: E402
from sglang.srt.utils.common import sglang_lib  # noqa: E402

DECODE_BS = [1, 2, 4]
PREFILL_TOKENS = [4, 16]
VOCAB, HIDDEN = 32, 8

# ---- the CUDA pieces, stubbed -------------------------------------------------
STATE = NS(capturing=False)


class FakeGraph:
    """torch.cuda.CUDAGraph: capture is a flag, replay a counter."""
    replays = 0

    def __init__(self, *args, **kwargs):
        pass

    def capture_begin(self, *args, **kwargs):  # breakable segments
        STATE.capturing = True

    def capture_end(self):
        STATE.capturing = False

    def replay(self):
        FakeGraph.replays += 1

    def reset(self):
        pass


@contextlib.contextmanager
def fake_graph(cuda_graph=None, pool=None, stream=None, **kwargs):
    STATE.capturing = True
    try:
        yield
    finally:
        STATE.capturing = False


@contextlib.contextmanager
def fake_graph_capture(stream=None):
    yield NS(stream=stream)


torch.cuda.CUDAGraph = FakeGraph
torch.cpu.graph = fake_graph
torch.cpu.graph_pool_handle = lambda: ("pool",)
torch.cpu.is_current_stream_capturing = lambda: STATE.capturing
dcgr.graph_capture = fake_graph_capture

get_context().override_server_args(
    device="cpu", cuda_graph_config=CudaGraphConfig(decode=PhaseConfig(backend="full", bs=DECODE_BS),
                                                    prefill=PhaseConfig(backend="disabled"))).install()
get_parallel().override_permanently(tp_rank=0, tp_size=1, tp_group=NS(barrier=lambda: None, ca_comm=None))


class Backend(AttentionBackend):
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        pass

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def init_forward_metadata(self, fb):
        pass

    def forward_decode(self, *a, **k):
        raise NotImplementedError

    def forward_extend(self, *a, **k):
        raise NotImplementedError


# ---- SGLang custom ops ----------------------------------------------------------
# register_custom_op calls an op's function directly (no dispatcher) when no
# gate fires and no argument is a tensor other than a plain CUDA one. On a CPU
# that is a call whose tensors come in a list; on CUDA, every plain call. Its
# own registration is for CUDA only: the same function is the CPU kernel here.
CUSTOM_OP_CALLS = {"direct": 0, "dispatched": 0}


def _count_call():
    direct = sys._getframe(2).f_globals.get("__name__") == custom_op.__name__
    CUSTOM_OP_CALLS["direct" if direct else "dispatched"] += 1


def _custom_op(fn):
    op = custom_op.register_custom_op(fn, fake_impl=lambda xs: torch.empty_like(xs[0]))
    sglang_lib.impl(fn.__name__, fn, "CPU")
    return op


@_custom_op
def shapeprof_test_relu(xs: List[torch.Tensor]) -> torch.Tensor:
    _count_call()
    return torch.relu(xs[0])


@_custom_op
def shapeprof_test_softmax(xs: List[torch.Tensor]) -> torch.Tensor:
    _count_call()
    return torch.softmax(xs[0], dim=-1)


# ---- the models ---------------------------------------------------------------
class TinyLM(torch.nn.Module):
    """What the decode runner captures: embedding, an MLP, the LM head."""
    shared_experts_config = None

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.up = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = torch.nn.Linear(4 * HIDDEN, HIDDEN)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, positions, forward_batch, **kwargs):
        h = self.embed(input_ids)
        h = h + self.down(shapeprof_test_relu([self.up(h)]))
        return LogitsProcessorOutput(next_token_logits=self.lm_head(h))


class TinyBody(torch.nn.Module):
    """What a prefill (breakable) graph captures: a layer body whose
    attention is an eager break, as RadixAttention's is."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
        self.o = torch.nn.Linear(HIDDEN, HIDDEN)

    @eager_on_graph
    def attention(self, q, k, v):
        return shapeprof_test_softmax([q @ k.transpose(0, 1)]) @ v

    def forward(self, x):
        q, k, v = self.qkv(x).split(HIDDEN, dim=-1)
        return x + self.o(self.attention(q, k, v))


def decode_batch(n):
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=n, input_ids=torch.ones(n, dtype=torch.long),
        req_pool_indices=torch.arange(n), seq_lens=torch.full((n,), 5), seq_lens_cpu=torch.full((n,), 5),
        orig_seq_lens=torch.full((n,), 5), out_cache_loc=torch.arange(n), seq_lens_sum=5 * n,
        positions=torch.full((n,), 4), spec_algorithm=SpeculativeAlgorithm.NONE,
        capture_hidden_mode=CaptureHiddenMode.NULL)


def model_runner(model):
    return NS(
        device="cpu", gpu_id=0, is_draft_worker=False, model=model, attn_backend=Backend(),
        spec_algorithm=SpeculativeAlgorithm.NONE, lora_manager=None, canary_manager=None,
        capture_head_hooks=[], capture_tail_hooks=[], hisparse_coordinator=None, device_timer=None,
        req_to_token_pool=NS(size=8),
        model_config=NS(is_encoder_decoder=False, hf_config=NS(architectures=["LlamaForCausalLM"]),
                        hf_text_config=NS(architectures=["LlamaForCausalLM"]), hidden_size=HIDDEN,
                        vocab_size=VOCAB, dtype=torch.float32),
        ngram_embedding_manager=NS(enabled=False),
        decode_num_tokens_per_req=lambda num_draft_tokens=None: 1,
        graph_shared_output=graph_shared_output.GraphSharedOutput(device="cpu", max_rows=64),
        get_pp_proxy_topk_size=lambda: 0, get_pp_proxy_residual_num_blocks=lambda: 0,
        get_pp_proxy_dspark_hidden_size=lambda: 0, get_aux_hidden_states_width=lambda: 0,
        attn_tp_sequence_sharded=lambda n: False, kv_index_translator=NS(bind_runner_slots=lambda fb: None),
        server_args=get_server_args())


class Worker:
    """Stands for TpModelWorker: its forward is what attach_llm_worker makes
    one pass (labelled with the batch's forward mode)."""

    def __init__(self):
        self.tp_rank = 0
        self.is_draft_worker = False

    def forward_batch_generation(self, batch=None, forward_batch=None):
        return forward_batch.run()


def shapes_request(path: str, by_stage: bool) -> str:
    """A SHAPES request after the captures, as /start_profile brings one to
    a TP rank: a ProfileReq handled by SGLang's own
    SchedulerProfilerManager._profile (patched). SGLANG_PROFILE_V2's
    profile_by_stage with --by-stage: 5 passes of each stage (the prefill
    stage has 3 here: stopped at the end). Returns the records file."""
    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqType
    from sglang.srt.managers.scheduler_components.profiler_manager import SchedulerProfilerManager
    manager = object.__new__(SchedulerProfilerManager)  # a SHAPES-only request needs none of its state
    folder, name = os.path.split(os.path.abspath(path))
    req = ProfileReq(req_type=ProfileReqType.START_PROFILE, output_dir=folder, activities=["SHAPES"],
                     profile_id=name, num_steps=5 if by_stage else None, profile_by_stage=by_stage)
    res = manager._profile(req)
    assert res.success, res.message
    return res.message.split(" into ")[-1].strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--replays", default="3,1,4,2,3", help="raw decode batch sizes, one replay each")
    ap.add_argument("--prefill-replays", default="3,16,4", help="raw prefill token counts")
    ap.add_argument("--request", default=None, help="on_request: a SHAPES request after the captures "
                                                    "(its records file is named after this one)")
    ap.add_argument("--by-stage", action="store_true", help="the request is SGLANG_PROFILE_V2's profile_by_stage")
    a = ap.parse_args()
    torch.manual_seed(0)

    from sgl_shapeprof.integrations.sglang import attach_llm_worker
    from sgl_shapeprof.on_import import is_ours
    worker = Worker()
    profiler = attach_llm_worker(worker)
    out = {"profiler": type(profiler).__name__,
           "wrapped": {"full": is_ours(fcgb.FullCudaGraphBackend.capture_one),
                       "breakable": is_ours(bcgb.BreakableCudaGraphBackend.capture_one)},
           "files": {"full": fcgb.__file__, "breakable": bcgb.__file__}}

    # -- prefill first, as SGLang captures it: a breakable graph per bucket
    body = TinyBody()
    prefill_runner = NS(model_runner=NS(is_draft_worker=False), device_module=torch.cpu,
                        capture_forward_mode=ForwardMode.EXTEND,
                        cuda_graph_output_capacity_rows=lambda output: None,
                        cuda_graph_output_rows=lambda output: None)
    prefill = bcgb.BreakableCudaGraphBackend(prefill_runner)
    static_x = torch.zeros(max(PREFILL_TOKENS), HIDDEN)
    warmups = []
    with torch.no_grad(), prefill.capture_session(stream=None):
        for n in reversed(PREFILL_TOKENS):
            def run_once(n=n):
                warmups.append((n, STATE.capturing))
                return body(static_x[:n])
            prefill.capture_one(ShapeKey(size=n), run_once)
    out["prefill_runs"] = warmups

    # -- decode: the real runner captures every batch size at construction
    lm = TinyLM()
    with torch.no_grad():
        runner = dcgr.DecodeCudaGraphRunner(model_runner(lm))
    out["capture_bs"] = list(runner.capture_bs)

    def bucket(n, sizes):
        return min(s for s in sizes if s >= n)

    if a.request:
        out["request"] = shapes_request(a.request, by_stage=a.by_stage)

    padded = {}
    for n in map(int, a.replays.split(",")):
        fb = decode_batch(n)
        assert runner.can_run_graph(fb)
        fb.run = lambda fb=fb: runner.execute(fb)
        with torch.no_grad():
            worker.forward_batch_generation(None, fb)
        padded[runner.bs] = padded.get(runner.bs, 0) + 1
    out["decode_replays"] = {str(k): v for k, v in padded.items()}

    prefill_padded = {}
    for n in map(int, a.prefill_replays.split(",")):
        size = bucket(n, PREFILL_TOKENS)
        static_x[:n] = torch.randn(n, HIDDEN)
        prefill_runner.raw_num_tokens = n  # as PrefillCudaGraphRunner.load_batch leaves it
        batch = NS(forward_mode=ForwardMode.EXTEND,
                   run=lambda size=size: prefill.replay(ShapeKey(size=size), None))
        with torch.no_grad():
            worker.forward_batch_generation(None, batch)
        prefill_padded[size] = prefill_padded.get(size, 0) + 1
    out["prefill_replays"] = {str(k): v for k, v in prefill_padded.items()}
    out["graph_replays"] = FakeGraph.replays

    if a.request:
        profiler.stop()
    profiler.close()

    # outside every pass: SGLang's own gate, and its direct call
    out["gate_is_sglangs"] = custom_op._profiling is torch._C._autograd._profiler_enabled
    with torch.no_grad():
        shapeprof_test_relu([static_x])
    out["custom_op_calls"] = dict(CUSTOM_OP_CALLS)

    # -- the same models run eagerly at each captured size, for comparison
    from sgl_shapeprof import ShapeProfiler
    from sgl_shapeprof.integrations.sglang import custom_ops_recorded
    eager = ShapeProfiler(os.path.join(os.path.dirname(os.path.abspath(a.out)), "eager.jsonl"))
    with torch.no_grad():
        for bs in DECODE_BS:
            ids = torch.zeros(bs, dtype=torch.long)
            with eager.forward_pass(f"eager_decode_{bs}") as logged, custom_ops_recorded(logged):
                lm(ids, ids, None)
        for n in PREFILL_TOKENS:
            with eager.forward_pass(f"eager_extend_{n}") as logged, custom_ops_recorded(logged):
                body(static_x[:n])
    eager.close()
    out["eager"] = eager.path
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
