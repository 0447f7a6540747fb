"""Issue 53's "done when": one decoder layer of two deployments, recorded
through the real entry points a SGLang 0.5.23 worker calls, then read by
gemm, cost, tune and analyze.

- DeepSeek-V3 FP8 on B200, TP 8 (its 256 experts on every rank, their
  intermediate size split): the dense FP8 GEMMs through SGLang's own
  DeepGEMM op (`sglang::deep_gemm_fp8_fp8_bf16_nt`, as
  w8a8_block_fp8_matmul_deepgemm calls it; a CPU kernel stands in for its
  CUDA one), MLA's w_kc / w_vc as FlashInfer 0.7.2's `bmm_fp8`, MLA decode
  as its `trtllm_batch_decode_with_kv_cache_mla`, the router as an aten
  GEMM, the experts as its `trtllm_fp8_block_scale_moe`. FlashInfer's
  functions need a GPU and raise here, and a call that raised did no work
  (gemm and cost leave it out): each is called through a door named and
  described by the real function, as FlashInfer's door makes it, around a
  body that returns an output of the real one's shape (the real functions'
  records, raised, are tests/sglang/test_flashinfer.py's).
- Qwen3-30B-A3B bf16 on H200, TP 4: the projections and the router as aten
  GEMMs, the experts as SGLang's default Triton runner launches them: its
  own `invoke_fused_moe_kernel`, run by Triton's interpreter. Its attention
  (FA3's `sgl_kernel.fwd`) is not called: sgl-kernel needs CUDA to load;
  its reading is tested on records in tests/test_kernel_readings.py.

The oracle is arithmetic on the model dimensions below, never the
catalogue's reading: M, N, K per GEMM, 2*M*N*K FLOPs, and a fused MoE's
weights read for min(E, tokens x top-k) of its E experts."""
import json
import os
import subprocess
import sys

import pytest
from helpers import PKG_ROOT, ROOT, needs_sglang
from sglang_engine_helpers import zero_edit_hook_installed

pytestmark = needs_sglang("0.5.23")
FLASHINFER_DIR = os.path.join(sys.prefix, "flashinfer-0.7.2")  # tests/sglang_env/setup.sh's

# DeepSeek-V3's config.json, and one TP-8 rank's share of it
DSV3 = dict(hidden=7168, q_lora=1536, kv_lora=512, rope=64, nope=128, v_dim=128, heads=128 // 8, experts=256,
            top_k=8, moe_inter=2048 // 8, shared_inter=2048 // 8, page=64)
# Qwen3-30B-A3B's, one TP-4 rank's share
QWEN3 = dict(hidden=2048, q_heads=32 // 4, kv_heads=4 // 4, head_dim=128, experts=128, top_k=8, moe_inter=768 // 4)
PASSES = [("extend", 16), ("decode", 4)]  # (phase, tokens in the batch); decode: one token per request

CHILD = r'''
import inspect, json, sys, types, torch
import flashinfer.gemm, flashinfer.fused_moe, flashinfer.mla
import triton.language as tl
from sglang.kernels.ops.gemm import fp8_kernel  # registers sglang::deep_gemm_fp8_fp8_bf16_nt
from sglang.kernels.ops.moe.fused_moe_triton_kernels import invoke_fused_moe_kernel
from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.recording.doors import api_door, operation_name



def deep_gemm_on_cpu(A, As, B, Bs, C, *blocks):  # DeepGEMM's kernel, standing in: writes C
    C.zero_()


lib = torch.library.Library("sglang", "IMPL")
lib.impl("deep_gemm_fp8_fp8_bf16_nt", deep_gemm_on_cpu, "CPU", allow_override=True)

out, which, cfg, passes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
fp8, bf16, f32, i32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32, torch.int32


def big(*shape, dtype):
    """A weight of the model's size that takes no memory (its record is its shape)."""
    return torch.zeros((), dtype=dtype).expand(*shape)


def blocks(n):
    return -(-n // 128)


def call(fn, out, *args, **kwargs):
    """FlashInfer's fn as its door records it, its body giving out."""
    real = inspect.unwrap(fn)
    return api_door(lambda *a, **k: out, operation_name("flashinfer", real), real)(*args, **kwargs)


def deep_gemm(x, n):
    """SGLang's block-FP8 linear on DeepGEMM: x [M, K] fp8, weight [N, K]."""
    m, k = x.shape
    fp8_kernel.deep_gemm_fp8_fp8_bf16_nt(x, torch.ones(m, blocks(k)), big(n, k, dtype=fp8),
                                         torch.ones(blocks(n), blocks(k)), torch.empty(m, n, dtype=bf16), 128, 128)


def deepseek_layer(c, t, phase):
    h = c["hidden"]
    x = torch.zeros(t, h, dtype=fp8)
    deep_gemm(x, c["q_lora"] + c["kv_lora"] + c["rope"])                        # fused_qkv_a_proj_with_mqa
    deep_gemm(torch.zeros(t, c["q_lora"], dtype=fp8), c["heads"] * (c["nope"] + c["rope"]))  # q_b_proj
    call(flashinfer.gemm.bmm_fp8, torch.empty(c["heads"], t, c["kv_lora"], dtype=bf16),  # w_kc
         torch.zeros(c["heads"], t, c["nope"], dtype=fp8),
         big(c["heads"], c["nope"], c["kv_lora"], dtype=fp8), torch.ones(1), torch.ones(1), bf16)
    if phase == "decode":
        pages = 4
        call(flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla,
             torch.empty(t, 1, c["heads"], c["kv_lora"], dtype=bf16), torch.zeros(t, 1, c["heads"], c["kv_lora"] + c["rope"], dtype=bf16),
             torch.zeros(t * pages, c["page"], c["kv_lora"] + c["rope"], dtype=bf16),
             torch.empty(1 << 16, dtype=torch.uint8), c["nope"], c["kv_lora"], c["rope"],
             torch.zeros(t, pages, dtype=i32), torch.full((t,), 200, dtype=i32), pages * c["page"])
    call(flashinfer.gemm.bmm_fp8, torch.empty(c["heads"], t, c["v_dim"], dtype=bf16),  # w_vc
         torch.zeros(c["heads"], t, c["kv_lora"], dtype=fp8),
         big(c["heads"], c["kv_lora"], c["v_dim"], dtype=fp8), torch.ones(1), torch.ones(1), bf16)
    deep_gemm(torch.zeros(t, c["heads"] * c["v_dim"], dtype=fp8), h)            # o_proj
    hidden = torch.zeros(t, h, dtype=bf16)
    logits = torch.nn.functional.linear(hidden, big(c["experts"], h, dtype=bf16)).float()  # the router
    e, i = c["experts"], c["moe_inter"]
    call(flashinfer.fused_moe.trtllm_fp8_block_scale_moe, torch.empty(t, h, dtype=bf16), logits, torch.zeros(e, dtype=bf16), x,
         torch.ones(blocks(h), t), big(e, 2 * i, h, dtype=fp8), torch.ones(e, blocks(2 * i), blocks(h)),
         big(e, h, i, dtype=fp8), torch.ones(e, blocks(h), blocks(i)), num_experts=e, top_k=c["top_k"],
         n_group=8, topk_group=4, intermediate_size=i, local_expert_offset=0, local_num_experts=e,
         routed_scaling_factor=2.5)
    deep_gemm(x, 2 * c["shared_inter"])                                         # shared expert: gate_up
    deep_gemm(torch.zeros(t, c["shared_inter"], dtype=fp8), h)                  # and down


# SGLang's own config lookup, on the device the deployment names (SGLang
# reads no device name on a CPU), as a server publishes its settings
from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as configs
configs.get_device_name = lambda: "NVIDIA H200"
configs.get_exec = lambda: types.SimpleNamespace(
    deterministic=types.SimpleNamespace(enable_deterministic_inference=False))


def sorted_by_expert(ids, experts, bm):
    """What moe_align_block_size (an sgl-kernel op) gives: each expert's
    token slots together, each expert's run padded to a block of bm."""
    flat = ids.flatten()
    slots, owners = [], []
    counts = torch.bincount(flat, minlength=experts).tolist()
    order = torch.argsort(flat, stable=True).tolist()
    start = 0
    for expert, n in enumerate(counts):
        if n:
            padded = -(-n // bm) * bm
            slots += order[start:start + n] + [flat.numel()] * (padded - n)
            owners += [expert] * (padded // bm)
            start += n
    return (torch.tensor(slots, dtype=i32), torch.tensor(owners, dtype=i32),
            torch.tensor([len(slots)], dtype=i32))


def triton_experts(a, w, ids, weights, top_k, mul, config):
    out = torch.zeros(*ids.shape, w.shape[1], dtype=a.dtype)  # a row per (token, expert routed to)
    s, owners, padded = sorted_by_expert(ids, w.shape[0], config["BLOCK_SIZE_M"])
    invoke_fused_moe_kernel(a, w, None, out, None, None, None, weights, ids, s, owners, padded, mul, top_k,
                            config, tl.bfloat16, False, False, False, False, False)
    return out


def qwen3_layer(c, t, phase):
    h, d = c["hidden"], c["head_dim"]
    x = torch.zeros(t, h, dtype=bf16)
    torch.nn.functional.linear(x, big((c["q_heads"] + 2 * c["kv_heads"]) * d, h, dtype=bf16))  # qkv_proj
    torch.nn.functional.linear(torch.zeros(t, c["q_heads"] * d, dtype=bf16), big(h, c["q_heads"] * d, dtype=bf16))
    e, i, k = c["experts"], c["moe_inter"], c["top_k"]
    logits = torch.nn.functional.linear(x, big(e, h, dtype=bf16))                # the router
    weights, ids = torch.topk(logits.float().softmax(-1), k)
    ids = ids.to(i32)
    w1, w2 = torch.zeros(e, 2 * i, h, dtype=bf16), torch.zeros(e, h, i, dtype=bf16)
    config = configs.try_get_optimal_moe_config(w1.shape, w2.shape, k, None, t)  # as fused_experts asks
    up = triton_experts(x, w1, ids, weights, k, False, config)
    act = torch.nn.functional.silu(up[..., :i]) * up[..., i:]
    triton_experts(act.view(t * k, i), w2, ids, weights, 1, True, config)


torch.manual_seed(0)
layer = {"deepseek": deepseek_layer, "qwen3": qwen3_layer}[which]
prof = ShapeProfiler(out)
for phase, t in passes:
    with prof.forward_pass(phase):
        layer(cfg, t, phase)
prof.close()
'''


def record(tmp_path_factory, which, cfg):
    if not os.path.isfile(os.path.join(FLASHINFER_DIR, "flashinfer", "__init__.py")):
        pytest.skip(f"flashinfer-python 0.7.2 is not in {FLASHINFER_DIR} (tests/sglang_env/setup.sh)")
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    path = str(tmp_path_factory.mktemp(which) / "shapes.jsonl")
    env = dict(os.environ, SGLANG_PROFILE_SHAPES="1", SGLANG_USE_CPU_ENGINE="1", TRITON_INTERPRET="1",
               SGLANG_NCCL_SO_PATH="/nonexistent/libnccl.so.2", PYTHONPATH=os.pathsep.join(
                   [FLASHINFER_DIR, os.path.join(ROOT, "tests", "sglang_env", "stubs"), PKG_ROOT]))
    r = subprocess.run([sys.executable, "-c", CHILD, path, which, json.dumps(cfg), json.dumps(PASSES)],
                       capture_output=True, text=True, env=env, timeout=900, cwd=os.path.dirname(path))
    assert r.returncode == 0, r.stderr[-3000:]
    return path


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    return record(tmp_path_factory, "deepseek", DSV3)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return record(tmp_path_factory, "qwen3", QWEN3)


def cli_json(*argv):
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", *argv, "--json"], capture_output=True, text=True,
                       timeout=300, cwd=os.path.dirname(argv[1]))
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


DEEP_GEMM = "sglang.deep_gemm_fp8_fp8_bf16_nt.default"
BMM_FP8 = "flashinfer:gemm.gemm_base.bmm_fp8"
FI_MOE = "flashinfer:fused_moe.core.trtllm_fp8_block_scale_moe"
TRITON_MOE = "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel"


def deepseek_gemms(c, t):
    """(operation, M, N, K, batch) of each GEMM one layer runs on t tokens."""
    h, rows = c["hidden"], t * c["top_k"]
    return [(DEEP_GEMM, t, c["q_lora"] + c["kv_lora"] + c["rope"], h, 1),
            (DEEP_GEMM, t, c["heads"] * (c["nope"] + c["rope"]), c["q_lora"], 1),
            (BMM_FP8, t, c["kv_lora"], c["nope"], c["heads"]),
            (BMM_FP8, t, c["v_dim"], c["kv_lora"], c["heads"]),
            (DEEP_GEMM, t, h, c["heads"] * c["v_dim"], 1),
            ("aten.mm.default", t, c["experts"], h, 1),
            (FI_MOE + " [up]", rows, 2 * c["moe_inter"], h, 1),
            (FI_MOE + " [down]", rows, h, c["moe_inter"], 1),
            (DEEP_GEMM, t, 2 * c["shared_inter"], h, 1),
            (DEEP_GEMM, t, h, c["shared_inter"], 1)]


def qwen3_gemms(c, t):
    h, d, rows = c["hidden"], c["head_dim"], t * c["top_k"]
    return [("aten.mm.default", t, (c["q_heads"] + 2 * c["kv_heads"]) * d, h, 1),
            ("aten.mm.default", t, h, c["q_heads"] * d, 1),
            ("aten.mm.default", t, c["experts"], h, 1),
            (TRITON_MOE, rows, 2 * c["moe_inter"], h, 1),
            (TRITON_MOE, rows, h, c["moe_inter"], 1)]


def listed(path):
    return sorted((g["operation"], g["m"], g["n"], g["k"], g["batch"], g["count"])
                  for g in cli_json("gemm", path))


def wanted(gemms_of, cfg):
    counts = {}
    for _, t in PASSES:
        for g in gemms_of(cfg, t):
            counts[g] = counts.get(g, 0) + 1
    return sorted(g + (n,) for g, n in counts.items())


def test_gemm_lists_every_gemm_of_deepseek_v3_fp8_with_no_flag(deepseek):
    assert listed(deepseek) == wanted(deepseek_gemms, DSV3)


def test_gemm_lists_every_gemm_of_qwen3_moe_with_no_flag(qwen3):
    assert listed(qwen3) == wanted(qwen3_gemms, QWEN3)


def test_gemm_says_each_moe_gemms_experts_and_top_k_and_how_each_weight_is_scaled(deepseek, qwen3):
    """E and top-k where grouped; FP8 weights' scaling from their scale
    tensors, as the test built them: one scale per 128 x 128 block of each
    DeepGEMM and MoE weight, one per tensor for bmm_fp8's."""
    got = {(g["operation"].split(" [")[0], g["experts"], g["top_k"], g["b_scaling"]) for g in cli_json("gemm", deepseek)}
    c = DSV3
    assert got == {(DEEP_GEMM, None, None, "block [128, 128]"), (BMM_FP8, None, None, "per-tensor"),
                   ("aten.mm.default", None, None, None), (FI_MOE, c["experts"], c["top_k"], "block [128, 128]")}
    got = {(g["operation"], g["experts"], g["top_k"], g["m"], g["b_scaling"]) for g in cli_json("gemm", qwen3)
           if g["operation"] == TRITON_MOE}
    c = QWEN3
    assert got == {(TRITON_MOE, c["experts"], c["top_k"], t * c["top_k"], None) for _, t in PASSES}  # bf16


def flops_by_operation(gemms_of, cfg):
    total = {}
    for _, t in PASSES:
        for op, m, n, k, batch in gemms_of(cfg, t):
            op = op.split(" [")[0]  # a fused MoE's two GEMMs are one call
            total[op] = total.get(op, 0) + 2 * m * n * k * batch
    return total


@pytest.mark.parametrize("which", ["deepseek", "qwen3"])
def test_cost_counts_every_gemms_flops(which, request):
    path = request.getfixturevalue(which)
    gemms_of, cfg = {"deepseek": (deepseek_gemms, DSV3), "qwen3": (qwen3_gemms, QWEN3)}[which]
    rows = cli_json("cost", path)["rows"]
    got = {}
    for r in rows:
        if r["flops_per_call"]:
            got[r["operation"]] = got.get(r["operation"], 0) + r["flops_per_call"] * r["count"]
    want = flops_by_operation(gemms_of, cfg)
    assert {op: got.get(op) for op in want} == want


def test_cost_reads_only_the_routed_experts_weights_in_decode(deepseek, qwen3):
    """Decode: tokens x top-k rows reach at most that many of E experts
    (4 x 8 = 32 of 256, and of 128); extend: 16 x 8 = 128 rows, every one
    of Qwen3's 128 experts, 128 of DeepSeek's 256."""
    c = DSV3
    e, h, i = c["experts"], c["hidden"], c["moe_inter"]
    fi_weights = e * 2 * i * h + e * h * i                                  # fp8: a byte each
    fi_scales = 4 * (e * -(-2 * i // 128) * -(-h // 128) + e * -(-h // 128) * -(-i // 128))  # float32
    for phase, t in PASSES:
        (row,) = [r for r in cli_json("cost", deepseek, "--phase", phase)["rows"] if r["operation"] == FI_MOE]
        routed = min(e, t * c["top_k"])
        per_expert = (fi_weights + fi_scales) * routed // e
        assert per_expert <= row["bytes_per_call"] < per_expert + (fi_weights + fi_scales) // e
    c = QWEN3
    e, h, i = c["experts"], c["hidden"], c["moe_inter"]
    for phase, t in PASSES:
        rows = [r for r in cli_json("cost", qwen3, "--phase", phase)["rows"] if r["operation"] == TRITON_MOE]
        routed = min(e, t * c["top_k"])
        want = sorted([2 * (e * 2 * i * h) * routed // e, 2 * (e * h * i) * routed // e])  # bf16 weights
        got = sorted(r["bytes_per_call"] for r in rows)
        assert len(got) == 2 and all(w <= g < w + 2 * e * 2 * i * h // e for g, w in zip(got, want)), (got, want)


def test_tune_writes_each_tuners_input(deepseek, qwen3):
    """DeepSeek-V3: DeepGEMM's (N, K) list with the M that ran; FlashInfer's
    fused MoE with its tokens. Qwen3: SGLang's Triton MoE config key, and
    the config each launch ran against SGLang's own lookup."""
    report = cli_json("tune", deepseek, "--device", "B200")
    got = {(d["N"], d["K"]): sorted(m["m"] for m in d["m"]) for d in report["deepgemm"]}
    c = DSV3
    tokens = sorted(t for _, t in PASSES)
    assert got == {(n, k): tokens for op, m, n, k, _ in deepseek_gemms(c, 1) if op == DEEP_GEMM}
    (moe,) = report["library_moe"]
    assert (moe["experts"], moe["hidden"], moe["intermediate"], moe["top_k"]) == (
        c["experts"], c["hidden"], c["moe_inter"], c["top_k"])
    assert sorted(tok["m"] for tok in moe["tokens"]) == tokens
    report = cli_json("tune", qwen3, "--device", "H200")
    c = QWEN3
    launches = {(x["E"], x["N"], x["hidden_size"], x["top_k"], x["gemm"], x["m"], x["verdict"], x["calls"])
                for x in report["launches"]}
    # SGLang ships a tuned file for this key on H200 (named here by hand, not
    # by the code under test): each launch ran its config
    import sglang
    shipped = os.path.join(os.path.dirname(sglang.__file__), "srt", "layers", "moe", "moe_runner", "triton_utils",
                           "configs")
    name = f"E={c['experts']},N={c['moe_inter']},device_name=NVIDIA_H200.json"
    assert any(name in files for _, _, files in os.walk(shipped)), name
    assert launches == {(c["experts"], c["moe_inter"], c["hidden"], c["top_k"], gemm, t, "tuned", 1)
                        for gemm in ("up", "down") for _, t in PASSES}


def test_analyze_shows_mla_decode_and_the_moe_calls(deepseek):
    att = cli_json("analyze", deepseek)["attention"]
    (mla,) = att
    c = DSV3
    t = dict(PASSES)["decode"]
    assert (mla["batch"], mla["q_heads"], mla["head_dim"], mla["q_len"], mla["kv_len_max"]) == (
        t, c["heads"], c["kv_lora"] + c["rope"], 1, 4 * c["page"])
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", deepseek, "--show-shapes", "--filter-op",
                        "trtllm_fp8_block_scale_moe", "--no-summary"], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(deepseek))
    assert r.returncode == 0, r.stderr[-2000:]
    said = sorted(line.strip() for line in r.stdout.splitlines() if "= MoE:" in line)
    assert said == sorted(f"= MoE: tokens {n}, E {c['experts']}, top-k {c['top_k']}, N {2 * c['moe_inter']}, "
                          f"K {c['hidden']}" for _, n in PASSES)


BLOCKWISE = r'''
import sys, torch
from sglang.kernels.ops.gemm.fp8_blockwise_gemm import fp8_blockwise_scaled_mm
from sgl_shapeprof import ShapeProfiler


def on_cpu(out, mat_a, mat_b, scales_a, scales_b):  # the JIT CUTLASS kernel, standing in: writes out
    out.zero_()


lib = torch.library.Library("sglang", "IMPL")
lib.impl("fp8_blockwise_scaled_mm", on_cpu, "CPU", allow_override=True)
m, n, k = (int(v) for v in sys.argv[2:5])
fp8 = torch.float8_e4m3fn
weight, weight_scale = torch.zeros(n, k, dtype=fp8), torch.ones(n // 128, k // 128)
with ShapeProfiler(sys.argv[1]) as prof, prof.forward_pass("decode"):
    # as fp8_utils' cutlass block-FP8 linear calls it: the weight transposed, [K, N]
    fp8_blockwise_scaled_mm(torch.zeros(m, k, dtype=fp8), weight.T, torch.ones(m, k // 128), weight_scale.T,
                            out_dtype=torch.bfloat16)
'''


def test_sglangs_cutlass_block_fp8_gemm_is_a_gemm(tmp_path):
    """SGLang 0.5.23's block-FP8 linear without DeepGEMM: its own custom op
    `sglang::fp8_blockwise_scaled_mm` (kernels/ops/gemm/fp8_blockwise_gemm.py),
    `out = mat_a [M, K] @ mat_b [K, N]` with mat_b the weight transposed."""
    m, n, k = 5, 1536, 7168
    path = str(tmp_path / "shapes.jsonl")
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "tests", "sglang_env", "stubs"), PKG_ROOT]))
    r = subprocess.run([sys.executable, "-c", BLOCKWISE, path, str(m), str(n), str(k)], capture_output=True,
                       text=True, env=env, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    (g,) = cli_json("gemm", path)
    assert (g["operation"], g["m"], g["n"], g["k"], g["batch"]) == ("sglang.fp8_blockwise_scaled_mm.default",
                                                                   m, n, k, 1)
    assert g["flops"] == 2 * m * n * k and g["a_dtype"] == g["b_dtype"] == "float8_e4m3fn"
