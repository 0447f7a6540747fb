"""What gemm, cost, tune and analyze read of FlashInfer's GEMM, fused-MoE
and attention calls (analysis/kernel_calls.py; docs/kernels.md), on records
of FlashInfer 0.7.2's real functions: each call goes through a door that
names its values by the real function's own parameters (as FlashInfer's door
does), around a body that returns an output of the right shape (the real
kernels need a GPU). The oracle is the dimensions the test built the
tensors from, never the formulas under test."""
import json
import os
import subprocess
import sys

import pytest

FLASHINFER_DIR = os.path.join(sys.prefix, "flashinfer-0.7.2")  # tests/sglang_env/setup.sh's

CHILD = r'''
import inspect, json, sys, torch
import flashinfer.decode, flashinfer.fused_moe, flashinfer.gemm, flashinfer.mla, flashinfer.prefill
from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.recording.doors import api_door, operation_name

bf16, fp8, u8, i32 = torch.bfloat16, torch.float8_e4m3fn, torch.uint8, torch.int32
E = torch.empty


def door(fn, out):
    real = inspect.unwrap(fn)
    return api_door(lambda *a, **k: out, operation_name("flashinfer", real), real)


pair = (E(16, 2, 32, 128, dtype=bf16), E(16, 2, 32, 128, dtype=bf16))  # HND: pages, kv heads, page, dim
ws = E(1024, dtype=u8)
calls = [
    # M=6, K=64 (FP4: two per byte), N=48
    (flashinfer.gemm.mm_fp4, (E(6, 32, dtype=u8), E(48, 32, dtype=u8).t(), E(128, 4, dtype=u8),
                              E(4, 128, dtype=u8)), {}, E(6, 48, dtype=bf16)),
    # batch 2, M=5, K=32, N=24
    (flashinfer.gemm.bmm_fp8, (E(2, 5, 32, dtype=fp8), E(2, 32, 24, dtype=fp8), E(1), E(1), bf16), {},
     E(2, 5, 24, dtype=bf16)),
    # M=7, K=256, N=128 (NT: b is [N, K])
    (flashinfer.gemm.gemm_fp8_nt_groupwise, (E(7, 256, dtype=fp8), E(128, 256, dtype=fp8), E(2, 7), E(2, 1)),
     {}, E(7, 128, dtype=bf16)),
    # read from FlashInfer's own templates (integrations/flashinfer/templates.json):
    # M=9, K=256, N=64; b in TRT-LLM's block layout [K/128, N, 128]
    (flashinfer.gemm.mm_fp8, (E(9, 256, dtype=fp8), E(2, 64, 128, dtype=fp8)), {}, E(9, 64, dtype=bf16)),
    # M=11, K=96, N=40
    (flashinfer.gemm.mm_bf16, (E(11, 96, dtype=bf16), E(96, 40, dtype=bf16)), {}, E(11, 40, dtype=bf16)),
    # batch 3, M=4, K=32, N=16
    (flashinfer.gemm.bmm_bf16, (E(3, 4, 32, dtype=bf16), E(3, 32, 16, dtype=bf16)), {}, E(3, 4, 16, dtype=bf16)),
    # grouped, contiguous: 6 rows over 8 groups' [N=128, K=256] weights
    (flashinfer.gemm.group_gemm_fp8_nt_groupwise_contiguous,
     (E(6, 256, dtype=fp8), E(8, 128, 256, dtype=fp8), E(6, 2), E(8, 1, 2), E(6, dtype=i32)), {},
     E(6, 128, dtype=bf16)),
    # grouped, masked (DeepGEMM's layout): 4 groups of at most 16 rows, N=128, K=256
    (flashinfer.gemm.batch_deepgemm_fp8_nt_groupwise,
     (E(4, 16, 256, dtype=fp8), E(4, 128, 256, dtype=fp8), E(4, 16, 2), E(4, 1, 2), E(4, dtype=i32), 5), {},
     E(4, 16, 128, dtype=bf16)),
    # 5 tokens, H=128, I=64, 8 experts, top-2; BlockMajorK weights [E, H/64, 2I, 64], [E, I/64, H, 64]
    (flashinfer.fused_moe.trtllm_bf16_moe, (E(5, 8), None, E(5, 128, dtype=bf16), E(8, 2, 128, 64, dtype=bf16),
                                            E(8, 1, 128, 64, dtype=bf16)),
     dict(num_experts=8, top_k=2, n_group=None, topk_group=None, intermediate_size=64, local_expert_offset=0,
          local_num_experts=8), E(5, 128, dtype=bf16)),
    # 3 tokens, H=256, I=128, 16 experts (4 here), top-1; MajorK [E, 2I, H], [E, H, I]
    (flashinfer.fused_moe.trtllm_fp8_block_scale_moe,
     (E(3, 16), None, E(3, 256, dtype=fp8), E(2, 3), E(4, 256, 256, dtype=fp8), E(4, 2, 2),
      E(4, 256, 128, dtype=fp8), E(4, 2, 1)),
     dict(num_experts=16, top_k=1, n_group=None, topk_group=None, intermediate_size=128, local_expert_offset=0,
          local_num_experts=4, routed_scaling_factor=None), E(3, 256, dtype=bf16)),
    # decode: batch 2, one token each, 8 query heads, 2 KV heads, dim 128, KV <= 128
    (flashinfer.decode.trtllm_batch_decode_with_kv_cache,
     (E(2, 8, 128, dtype=bf16), pair, ws, E(2, 4, dtype=i32), E(2, dtype=i32), 128), {}, E(2, 8, 128, dtype=bf16)),
    # prefill on a paged cache: batch 2, 20 query tokens (the longest 12), KV <= 40
    (flashinfer.prefill.trtllm_batch_context_with_kv_cache,
     (E(20, 8, 128, dtype=bf16), pair, ws, E(2, 4, dtype=i32), E(2, dtype=i32), 12, 40, 1.0, 1.0, 2,
      E(3, dtype=i32), E(3, dtype=i32)), {}, E(20, 8, 128, dtype=bf16)),
    # ragged: 20 query tokens, 30 KV tokens, 16 heads, dims 192/128
    (flashinfer.prefill.trtllm_ragged_attention_deepseek,
     (E(20, 16, 192, dtype=bf16), E(30, 16, 192, dtype=bf16), E(30, 16, 128, dtype=bf16), ws, E(2, dtype=i32),
      12, 18, 1.0, 1.0, 1.0, 2, -1, E(3, dtype=i32), E(3, dtype=i32), False, True, False), {},
     E(20, 16, 128, dtype=bf16)),
    # MLA decode: batch 3, one token, 16 heads, 512 + 64 dims, KV <= 256
    (flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla,
     (E(3, 1, 16, 576, dtype=bf16), E(10, 32, 576, dtype=bf16), ws, 128, 512, 64, E(3, 4, dtype=i32),
      E(3, dtype=i32), 256), {}, E(3, 1, 16, 512, dtype=bf16)),
]
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass("decode")
for fn, args, kwargs, out in calls:
    door(fn, out)(*args, **kwargs)
prof.end_forward_pass()
prof.close()
'''


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    if not os.path.isfile(os.path.join(FLASHINFER_DIR, "flashinfer", "__init__.py")):
        pytest.skip(f"flashinfer-python 0.7.2 is not in {FLASHINFER_DIR} (tests/sglang_env/setup.sh)")
    path = str(tmp_path_factory.mktemp("fi_dims") / "shapes.jsonl")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [FLASHINFER_DIR, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, env=env, timeout=600,
                       cwd=os.path.dirname(path))  # not the checkout: the installed package
    assert r.returncode == 0, r.stderr[-3000:]
    return path


def cli(*argv):
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", *argv], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(argv[1]))  # argv[1]: the records file
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_gemm_reads_flashinfers_gemms_and_each_moe_as_its_two_grouped_gemms(records):
    rows = {(g["operation"], g["m"], g["n"], g["k"], g["batch"]) for g in json.loads(cli("gemm", records, "--json"))}
    fi = "flashinfer:"
    assert rows == {
        (fi + "gemm.gemm_base.mm_fp4", 6, 48, 64, 1),
        (fi + "gemm.gemm_base.bmm_fp8", 5, 24, 32, 2),
        (fi + "gemm.gemm_base.gemm_fp8_nt_groupwise", 7, 128, 256, 1),
        (fi + "gemm.gemm_base.mm_fp8", 9, 64, 256, 1),
        (fi + "gemm.gemm_base.mm_bf16", 11, 40, 96, 1),
        (fi + "gemm.gemm_base.bmm_bf16", 4, 16, 32, 3),
        (fi + "gemm.gemm_base.group_gemm_fp8_nt_groupwise_contiguous", 6, 128, 256, 1),
        (fi + "gemm.gemm_base.batch_deepgemm_fp8_nt_groupwise [masked: rows at most]", 16, 128, 256, 4),
        (fi + "fused_moe.core.trtllm_bf16_moe [up]", 5 * 2, 2 * 64, 128, 1),
        (fi + "fused_moe.core.trtllm_bf16_moe [down]", 5 * 2, 128, 64, 1),
        (fi + "fused_moe.core.trtllm_fp8_block_scale_moe [up]", 3, 2 * 128, 256, 1),
        (fi + "fused_moe.core.trtllm_fp8_block_scale_moe [down]", 3, 256, 128, 1)}
    # cost: a fused MoE's FLOPs are its two GEMMs'
    cost = cli("cost", records, "--by-op")
    line = next(x for x in cost.splitlines() if x.endswith("fused_moe.core.trtllm_bf16_moe"))
    assert line.split()[1] == _human(2 * 10 * 128 * 128 + 2 * 10 * 128 * 64)


def _human(n):
    from sgl_shapeprof.records.values import human
    return human(n)


def test_analyze_shows_each_attention_calls_batch_heads_and_lengths(records):
    att = {a["operation"].split(":")[1]: a for a in json.loads(cli("analyze", records, "--json"))["attention"]}
    got = {k: (a["batch"], a["q_heads"], a["kv_heads"], a["head_dim"], a["q_tokens"], a["q_len"],
               a["kv_len_max"], a["kv_tokens"]) for k, a in att.items()}
    assert got == {"decode.trtllm_batch_decode_with_kv_cache": (2, 8, 2, 128, 2, 1, 128, None),
                   "prefill.trtllm_batch_context_with_kv_cache": (2, 8, 2, 128, 20, 12, 40, None),
                   "prefill.trtllm_ragged_attention_deepseek": (2, 16, 16, 192, 20, 12, 18, 30),
                   "mla._core.trtllm_batch_decode_with_kv_cache_mla": (3, 16, 1, 576, 3, 1, 256, None)}
    assert "Attention calls" in cli("analyze", records)


def test_tune_lists_flashinfers_fused_moe_beside_the_triton_ones(records):
    lib = json.loads(cli("tune", records, "--device", "H200", "--json"))["library_moe"]
    got = {(g["operation"].rsplit(".", 1)[1], g["experts"], g["local_experts"], g["hidden"], g["intermediate"],
            g["top_k"], tuple((t["m"], t["calls"]) for t in g["tokens"])) for g in lib}
    assert got == {("trtllm_bf16_moe", 8, 8, 128, 64, 2, ((5, 1),)),
                   ("trtllm_fp8_block_scale_moe", 16, 4, 256, 128, 1, ((3, 1),))}
    assert "trtllm_bf16_moe E=8 H=128 I=64" in cli("tune", records, "--device", "H200")
