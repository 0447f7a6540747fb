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
