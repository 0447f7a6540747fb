"""Issue 53, part: GEMMs of kernel libraries' custom ops that `gemm` lists
and `cost` counts with no --op flag (analysis/gemm.py CUSTOM_GEMMS, each
reading citing its source). The oracle: arithmetic on the shapes written."""
import json

import pytest

from sgl_shapeprof.cli.main import main

FP8, BF16, F32 = "torch.float8_e4m3fn", "torch.bfloat16", "torch.float32"


def t(shape, dtype):
    return {"shape": shape, "dtype": dtype}


def write(path, records):
    with open(path, "w") as f:
        for i, r in enumerate(records, 1):
            f.write(json.dumps({"call_id": i, "forward_pass": 1, "phase": "decode", **r}) + "\n")


@pytest.mark.parametrize("op", ["sglang.deep_gemm_fp8_fp8_bf16_nt.default",
                                "sglang.deep_gemm_mxfp8_fp8_bf16_nt.default"])
def test_sglang_deep_gemm_ops_are_gemms(tmp_path, capsys, op):
    """DeepSeek-V3's dense FP8 GEMMs on Hopper and Blackwell: SGLang's
    DeepGEMM custom op, C[M, N] = A[M, K] @ B[N, K]^T, written into C."""
    m, n, k = 7, 1536, 7168
    ins = {"A": t([m, k], FP8), "As": t([m, k // 128], F32), "B": t([n, k], FP8),
           "Bs": t([n // 128, k // 128], F32), "C": t([m, n], BF16)}
    path = tmp_path / "dg.jsonl"
    write(path, [{"operation": op, "inputs": ins, "args": {"block_n": 128, "block_k": 128}, "outputs": None}])
    capsys.readouterr()
    assert main(["gemm", str(path), "--json"]) == 0
    (g,) = json.loads(capsys.readouterr().out)
    assert (g["operation"], g["m"], g["n"], g["k"], g["batch"]) == (op, m, n, k, 1)
    assert (g["a_dtype"], g["b_dtype"], g["out_dtype"], g["b_layout"]) == ("float8_e4m3fn", "float8_e4m3fn",
                                                                           "bfloat16", "NK")
    assert g["flops"] == 2 * m * n * k
    assert main(["cost", str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["flops_per_call"] == 2 * m * n * k


I8, I32, U8 = "torch.int8", "torch.int32", "torch.uint8"


def test_sglangs_bf16_gemm_dispatch_is_a_linear(tmp_path, capsys):
    """SGLang's bf16 linear under torch.compile with its CuTe/GEMV back-ends
    (layers/quantization/unquant.py): bf16_gemm_dispatch(x [..., K],
    weight [N, K], bias) returns x @ weight^T."""
    op = "sglang.bf16_gemm_dispatch.default"
    ins = {"x": t([2, 3, 2048], BF16), "weight": t([5120, 2048], BF16)}
    path = tmp_path / "b.jsonl"
    write(path, [{"operation": op, "inputs": ins, "outputs": t([2, 3, 5120], BF16)}])
    capsys.readouterr()
    assert main(["gemm", str(path), "--json"]) == 0
    (g,) = json.loads(capsys.readouterr().out)
    assert (g["operation"], g["m"], g["n"], g["k"], g["flops"]) == (op, 6, 5120, 2048, 2 * 6 * 5120 * 2048)


def test_vllms_gemm_ops_are_gemms(tmp_path, capsys):
    """vLLM's GEMM ops by their schemas (csrc/torch_bindings.cpp):
    cutlass_scaled_mm writes a [M, K] @ b [K, N] into out; gptq_marlin_gemm
    returns [M, N] from a packed b_q_weight (N from the result); the CPU
    build's onednn_scaled_mm writes into c, its weight in a oneDNN handle."""
    recs = [
        {"operation": "_C.cutlass_scaled_mm.default",
         "inputs": {"out": t([9, 384], BF16), "a": t([9, 256], FP8), "b": t([256, 384], FP8),
                    "a_scales": t([9, 1], F32), "b_scales": t([1, 384], F32)}, "outputs": None},
        {"operation": "_C.gptq_marlin_gemm.default",
         "inputs": {"a": t([5, 512], BF16), "b_q_weight": t([32, 2048], I32), "b_scales": t([4, 1024], BF16),
                    "workspace": t([64], I32)}, "outputs": t([5, 1024], BF16)},
        {"operation": "_C.onednn_scaled_mm.default",
         "inputs": {"c": t([3, 64], BF16), "a": t([3, 128], I8), "a_scales": t([3], F32),
                    "handler_tensor": t([1], U8)}, "outputs": None},
    ]
    path = tmp_path / "vllm.jsonl"
    write(path, recs)
    capsys.readouterr()
    assert main(["gemm", str(path), "--json"]) == 0
    got = {g["operation"]: (g["m"], g["n"], g["k"], g["a_dtype"], g["out_dtype"])
           for g in json.loads(capsys.readouterr().out)}
    assert got == {"_C.cutlass_scaled_mm.default": (9, 384, 256, "float8_e4m3fn", "bfloat16"),
                   "_C.gptq_marlin_gemm.default": (5, 1024, 512, "bfloat16", "bfloat16"),
                   "_C.onednn_scaled_mm.default": (3, 64, 128, "int8", "bfloat16")}
    assert main(["cost", str(path), "--json"]) == 0
    flops = {r["operation"]: r["flops_per_call"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert flops == {"_C.cutlass_scaled_mm.default": 2 * 9 * 384 * 256, "_C.gptq_marlin_gemm.default": 2 * 5 * 1024 * 512,
                     "_C.onednn_scaled_mm.default": 2 * 3 * 64 * 128}


@pytest.mark.parametrize("op,dtype", [("sgl_kernel.fp8_scaled_mm.default", FP8),
                                      ("sgl_kernel.int8_scaled_mm.default", I8)])
def test_sgl_kernels_scaled_mm_ops_are_gemms(tmp_path, capsys, op, dtype):
    """sgl-kernel 0.4.10's schemas: (Tensor mat_a, Tensor mat_b, Tensor
    scales_a, Tensor scales_b, ScalarType out_dtype, Tensor? bias) -> Tensor,
    mat_b [K, N] (a column-major weight)."""
    m, n, k = 4, 2048, 7168
    ins = {"mat_a": t([m, k], dtype), "mat_b": t([k, n], dtype), "scales_a": t([m, 1], F32),
           "scales_b": t([n, 1], F32)}
    path = tmp_path / "sk.jsonl"
    write(path, [{"operation": op, "inputs": ins, "outputs": t([m, n], BF16)}])
    capsys.readouterr()
    assert main(["gemm", str(path), "--json"]) == 0
    (g,) = json.loads(capsys.readouterr().out)
    assert (g["m"], g["n"], g["k"], g["b_layout"], g["out_dtype"], g["flops"]) == (m, n, k, "KN", "bfloat16",
                                                                                 2 * m * n * k)


@pytest.mark.parametrize("case", ["per-channel", "block-kn", "block-kn-64", "block-64", "ue8m0", "other"])
def test_gemm_says_how_the_weight_is_scaled(tmp_path, capsys, case):
    """From the weight's scale tensor, under each library's own name for it:
    vLLM's cutlass_scaled_mm b [K, N] with b_scales [1, N] (one per output
    channel); sgl-kernel's fp8_blockwise_scaled_mm mat_b [K, N] with
    scales_b [K/128, N/128] (the weight's [N/128, K/128] transposed, as
    SGLang passes it), and with 64-wide N blocks; SGLang's DeepGEMM op with
    64 x 128 blocks; Blackwell's packed UE8M0 scales (int32, four to a
    word) and a scale of no such shape: nothing said."""
    m, n, k = 3, 512, 1024
    if case == "per-channel":
        rec = {"operation": "_C.cutlass_scaled_mm.default",
               "inputs": {"out": t([m, n], BF16), "a": t([m, k], FP8), "b": t([k, n], FP8),
                          "a_scales": t([m, 1], F32), "b_scales": t([1, n], F32)}, "outputs": None}
        want = "per-channel"
    elif case in ("block-kn", "block-kn-64"):
        bn = 128 if case == "block-kn" else 64
        if case == "block-kn-64":
            n = k  # square: only the layout tells which scale dimension is N's
        rec = {"operation": "sgl_kernel.fp8_blockwise_scaled_mm.default",
               "inputs": {"mat_a": t([m, k], FP8), "mat_b": t([k, n], FP8), "scales_a": t([m, k // 128], F32),
                          "scales_b": t([k // 128, n // bn], F32)}, "outputs": t([m, n], BF16)}
        want = f"block [{bn}, 128]"
    elif case == "ue8m0":  # Blackwell's packed power-of-two scales: four to an int32, [N, ceil(K/512)]
        k = 256  # one word per row, [N, 1]: per-channel's shape
        rec = {"operation": "sglang.deep_gemm_fp8_fp8_bf16_nt.default",
               "inputs": {"A": t([m, k], FP8), "As": t([m, 1], I32), "B": t([n, k], FP8),
                          "Bs": t([n, 1], I32), "C": t([m, n], BF16)}, "outputs": None}
        want = None
    else:
        bs = [n // 64, k // 128] if case == "block-64" else [7, 3]
        rec = {"operation": "sglang.deep_gemm_fp8_fp8_bf16_nt.default",
               "inputs": {"A": t([m, k], FP8), "As": t([m, k // 128], F32), "B": t([n, k], FP8),
                          "Bs": t(bs, F32), "C": t([m, n], BF16)}, "outputs": None}
        want = "block [64, 128]" if case == "block-64" else None
    path = tmp_path / "g.jsonl"
    write(path, [rec])
    capsys.readouterr()
    assert main(["gemm", str(path), "--json"]) == 0
    (g,) = json.loads(capsys.readouterr().out)
    assert (g["m"], g["n"], g["k"], g["b_scaling"]) == (m, n, k, want)


def test_gemm_reads_past_hostile_scale_and_output_shapes(tmp_path, capsys):
    """A records file is untrusted: scale and output shapes that are not
    whole numbers leave those fields unsaid, never a traceback; a GEMM
    whose weight's shape is not whole numbers is not read as one (its
    tensor is not a tensor to the readers: records/values.readable)."""
    m, n, k = 3, 256, 512
    recs = [{"operation": "sglang.deep_gemm_fp8_fp8_bf16_nt.default",
             "inputs": {"A": t([m, k], FP8), "B": t([n, k], FP8), "Bs": t([2, None], F32), "C": t([m, n], BF16)},
             "outputs": None},
            {"operation": "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel",
             "inputs": {"a_ptr": t([2, k], BF16), "b_ptr": t([8, n, k], BF16), "c_ptr": t(["a", "b", n], BF16),
                        "b_scale_ptr": t([8, -2, "x"], F32)},
             "args": {"N": n, "K": k, "num_valid_tokens": 4, "top_k": True}, "outputs": None},
            {"operation": "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel",
             "inputs": {"a_ptr": t([2, k], BF16), "b_ptr": t(["x", n, k], BF16), "c_ptr": t([2, 3, n], BF16)},
             "args": {"N": n, "K": k, "num_valid_tokens": 6, "top_k": 3}, "outputs": None}]
    path = tmp_path / "g.jsonl"
    write(path, recs)
    capsys.readouterr()
    assert main(["gemm", str(path), "--json"]) == 0
    got = sorted((g["m"], g["b_scaling"], g["experts"], g["top_k"]) for g in json.loads(capsys.readouterr().out))
    assert got == [(3, None, None, None), (4, None, 8, None)]
