"""Issue 53, cost of a decode MoE: a fused MoE call reads the weights of the
experts its rows are routed to, at most min(E, tokens x top-k) of E, not
all E experts' (the issue's example: 4 tokens x top-2 over 64 experts read
at most 8 experts' weights). The oracle is arithmetic on the shapes the test
writes."""
import json

from helpers import nbytes
from helpers import write_records as write
from helpers import tensor as t
from sgl_shapeprof.cli.main import main

BF16, FP8, I32, F32 = "torch.bfloat16", "torch.float8_e4m3fn", "torch.int32", "torch.float32"
TRITON_MOE = "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel"
FLASHINFER_MOE = "flashinfer:fused_moe.core.trtllm_bf16_moe"


def cost_rows(path, capsys):
    capsys.readouterr()
    assert main(["cost", str(path), "--json"]) == 0
    return {r["operation"]: r for r in json.loads(capsys.readouterr().out)["rows"]}


def triton_launch(tokens, top_k, experts, n, k):
    rows = tokens * top_k
    inputs = {"a_ptr": t([tokens, k], FP8), "b_ptr": t([experts, n, k], FP8), "c_ptr": t([tokens, top_k, n], BF16),
              "a_scale_ptr": t([tokens, k // 128], F32), "b_scale_ptr": t([experts, n // 128, k // 128], F32),
              "topk_weights_ptr": t([tokens, top_k], F32), "sorted_token_ids_ptr": t([rows + 64], I32),
              "expert_ids_ptr": t([4], I32), "num_tokens_post_padded_ptr": t([1], I32)}
    args = {"N": n, "K": k, "EM": rows + 64, "num_valid_tokens": rows, "top_k": top_k}
    return {"operation": TRITON_MOE, "inputs": inputs, "args": args, "outputs": None}


def test_a_decode_triton_moe_launch_reads_only_the_routed_experts(tmp_path, capsys):
    tokens, top_k, experts, n, k = 4, 2, 64, 512, 256
    rec = triton_launch(tokens, top_k, experts, n, k)
    path = tmp_path / "moe.jsonl"
    write(path, [rec])
    row = cost_rows(path, capsys)[TRITON_MOE]
    ins = rec["inputs"]
    routed = min(experts, tokens * top_k)                        # 8 of 64
    want = sum(nbytes(v) for name, v in ins.items() if not name.startswith("b_")) \
        + (nbytes(ins["b_ptr"]) + nbytes(ins["b_scale_ptr"])) * routed // experts
    assert row["bytes_per_call"] == want
    assert row["bytes_per_call"] < nbytes(ins["b_ptr"]) // 4      # not all 64 experts' weights
    assert row["flops_per_call"] == 2 * tokens * top_k * n * k


def test_a_prefill_launch_reads_every_expert(tmp_path, capsys):
    """Rows past E: every expert can be reached, all weights read."""
    tokens, top_k, experts, n, k = 512, 8, 64, 512, 256
    rec = triton_launch(tokens, top_k, experts, n, k)
    path = tmp_path / "moe.jsonl"
    write(path, [rec])
    row = cost_rows(path, capsys)[TRITON_MOE]
    assert row["bytes_per_call"] == sum(nbytes(v) for v in rec["inputs"].values())


def test_a_flashinfer_trtllm_moe_reads_only_the_routed_experts(tmp_path, capsys):
    tokens, top_k, experts, hidden, inter = 3, 2, 32, 256, 512
    ins = {"routing_logits": t([tokens, experts], F32), "hidden_states": t([tokens, hidden], BF16),
           "gemm1_weights": t([experts, 2 * inter, hidden], BF16), "gemm2_weights": t([experts, hidden, inter], BF16)}
    args = {"num_experts": experts, "top_k": top_k, "intermediate_size": inter, "local_expert_offset": 0,
            "local_num_experts": experts, "routing_bias": None}
    path = tmp_path / "fi.jsonl"
    write(path, [{"operation": FLASHINFER_MOE, "inputs": ins, "args": args, "outputs": t([tokens, hidden], BF16)}])
    row = cost_rows(path, capsys)[FLASHINFER_MOE]
    routed = min(experts, tokens * top_k)                        # 6 of 32
    want = nbytes(ins["routing_logits"]) + nbytes(ins["hidden_states"]) + nbytes(t([tokens, hidden], BF16)) \
        + (nbytes(ins["gemm1_weights"]) + nbytes(ins["gemm2_weights"])) * routed // experts
    assert row["bytes_per_call"] == want
    assert row["flops_per_call"] == 2 * tokens * top_k * (2 * inter * hidden + hidden * inter)


def test_a_custom_op_without_a_formula_is_costed_by_the_gemms_launched_within_it(tmp_path, capsys):
    """SGLang's fused-experts custom op has no FLOP formula of its own; the
    two Triton MoE GEMMs its kernel launched (recorded within it) have one.
    The totals count the launches' work, and the op's row is shown but not
    added: each call's work once, never both, never neither."""
    from sgl_shapeprof.analysis.analyze import analyze_file
    from sgl_shapeprof.analysis.cost import OUTER, costs
    tokens, top_k, experts, hidden, inter = 4, 2, 64, 256, 512
    outer = "sglang.inplace_fused_experts.default"
    w13 = dict(triton_launch(tokens, top_k, experts, 2 * inter, hidden), within=outer)
    w2 = dict(triton_launch(tokens, top_k, experts, hidden, inter), within=outer)
    w2["args"] = dict(w2["args"], top_k=1)  # the down projection: one row per routed token
    op = {"operation": outer, "inputs": {"hidden_states": t([tokens, hidden], BF16),
                                         "w1": t([experts, 2 * inter, hidden], FP8),
                                         "w2": t([experts, hidden, inter], FP8),
                                         "topk_weights": t([tokens, top_k], F32),
                                         "topk_ids": t([tokens, top_k], I32)},
          "outputs": t([tokens, hidden], BF16)}
    path = tmp_path / "moe.jsonl"
    write(path, [w13, w2, op] * 3)  # three layers' calls
    cs = costs(analyze_file(str(path)).signatures, None)
    rows = tokens * top_k
    want = 3 * (2 * rows * (2 * inter) * hidden + 2 * rows * hidden * inter)  # the arithmetic of both GEMMs
    assert sum(c.total_flops for c in cs) == want
    (outer_cost,) = [c for c in cs if c.sig.operation == outer]
    assert outer_cost.bound == OUTER and outer_cost.total_seconds == 0 and outer_cost.flops is None
    capsys.readouterr()
    assert main(["cost", str(path), "--gpu", "h100"]) == 0
    said = capsys.readouterr().out
    assert f"{OUTER}: calls with no FLOP formula" in said and "within: calls made" not in said
