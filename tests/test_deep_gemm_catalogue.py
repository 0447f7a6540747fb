"""Issue 53: gemm and cost read DeepGEMM's own ops (torch.ops.deep_gemm, the
sgl-deep-gemm that SGLang 0.5.23 pins) with no --op flag: its normal, grouped
(contiguous) and masked GEMMs, named as its schemas name them (a, b, d).
The oracle is arithmetic on the shapes the test writes;
tests/sglang/test_deep_gemm.py records the real ops' calls."""
import json

from helpers import nbytes, write_records
from helpers import tensor as t
from sgl_shapeprof.cli.main import main

BF16, FP8, I32, F32 = "torch.bfloat16", "torch.float8_e4m3fn", "torch.int32", "torch.float32"


def write(path, records):
    write_records(path, records, outputs=None)


def run(capsys, *argv):
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def fp8_gemm(m, n, k, nn=False):
    b = t([k, n] if nn else [n, k], FP8)
    return {"operation": f"deep_gemm.fp8_fp4_gemm_{'nn' if nn else 'nt'}.default",
            "inputs": {"a": t([m, k], FP8), "a_sf": t([m, k // 128], F32), "b": b,
                       "b_sf": t([n // 128, k // 128], F32), "d": t([m, n], BF16)}}


def grouped(m, groups, n, k):
    return {"operation": "deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous.default",
            "inputs": {"a": t([m, k], FP8), "a_sf": t([m, k // 128], F32), "b": t([groups, n, k], FP8),
                       "b_sf": t([groups, n // 128, k // 128], F32), "d": t([m, n], BF16),
                       "grouped_layout": t([m], I32)}}


def masked(groups, m_max, n, k):
    return {"operation": "deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked.default",
            "inputs": {"a": t([groups, m_max, k], FP8), "a_sf": t([groups, m_max, k // 128], F32),
                       "b": t([groups, n, k], FP8), "b_sf": t([groups, n // 128, k // 128], F32),
                       "d": t([groups, m_max, n], BF16), "masked_m": t([groups], I32)},
            "args": {"expected_m": 3}}


def test_gemm_and_cost_read_deep_gemms_ops_with_no_flag(tmp_path, capsys):
    path = tmp_path / "dg.jsonl"
    recs = [fp8_gemm(6, 256, 512), fp8_gemm(5, 384, 256, nn=True), grouped(10, 8, 512, 256), masked(4, 16, 256, 384)]
    write(path, recs)
    got = {g["operation"]: (g["m"], g["n"], g["k"], g["batch"], g["groups"], g["out_dtype"])
           for g in run(capsys, "gemm", str(path), "--json")}
    assert got == {
        "deep_gemm.fp8_fp4_gemm_nt.default": (6, 256, 512, 1, None, "bfloat16"),
        "deep_gemm.fp8_fp4_gemm_nn.default": (5, 384, 256, 1, None, "bfloat16"),
        "deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous.default": (10, 512, 256, 1, 8, "bfloat16"),
        "deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked.default [masked: rows at most]": (16, 256, 384, 4, None,
                                                                                       "bfloat16")}
    flops = {r["operation"]: r["flops_per_call"] for r in run(capsys, "cost", str(path), "--json")["rows"]}
    assert flops == {"deep_gemm.fp8_fp4_gemm_nt.default": 2 * 6 * 256 * 512,
                     "deep_gemm.fp8_fp4_gemm_nn.default": 2 * 5 * 384 * 256,
                     "deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous.default": 2 * 10 * 512 * 256,
                     "deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked.default": 2 * 4 * 16 * 256 * 384}


def test_a_grouped_gemm_with_fewer_rows_than_groups_reads_only_their_weights(tmp_path, capsys):
    rows, groups = 3, 64
    rec = grouped(rows, groups, 512, 256)
    path = tmp_path / "grouped.jsonl"
    write(path, [rec])
    [row] = run(capsys, "cost", str(path), "--json")["rows"]
    ins = rec["inputs"]
    per_group = nbytes(ins["b"]) + nbytes(ins["b_sf"])
    want = sum(nbytes(v) for k, v in ins.items() if not k.startswith("b")) + per_group * rows // groups
    assert row["bytes_per_call"] == want


def cublaslt(m, n, k, form):
    """DeepGEMM's cuBLASLt GEMMs (a, b, d, c), its letters a's then b's:
    a "n" [M, K], "t" [K, M]; b "n" [K, N], "t" [N, K]."""
    a = t([k, m] if form[0] == "t" else [m, k], BF16)
    b = t([n, k] if form[1] == "t" else [k, n], BF16)
    return {"operation": f"deep_gemm.cublaslt_gemm_{form}.default", "inputs": {"a": a, "b": b, "d": t([m, n], BF16)}}


def test_deep_gemms_cublaslt_gemms_are_read(tmp_path, capsys):
    path = tmp_path / "dg.jsonl"
    write(path, [cublaslt(6, 256, 512, "nt"), cublaslt(5, 384, 256, "tn"), cublaslt(7, 128, 640, "tt")])
    got = {g["operation"]: (g["m"], g["n"], g["k"]) for g in run(capsys, "gemm", str(path), "--json")}
    assert got == {"deep_gemm.cublaslt_gemm_nt.default": (6, 256, 512),
                   "deep_gemm.cublaslt_gemm_tn.default": (5, 384, 256),
                   "deep_gemm.cublaslt_gemm_tt.default": (7, 128, 640)}


def transposed(m, n, k, tt=False, bf16=False):
    """DeepGEMM's "tn"/"tt" forms: a is [K, M] (M-major), b [N, K] ("tn") or [K, N] ("tt")."""
    dtype = BF16 if bf16 else FP8
    ins = {"a": t([k, m], dtype), "b": t([k, n] if tt else [n, k], dtype), "d": t([m, n], BF16)}
    if not bf16:
        ins.update(a_sf=t([k // 128, m], F32), b_sf=t([n // 128, k // 128], F32))
    kind = "tt" if tt else "tn"
    return {"operation": f"deep_gemm.{'bf16' if bf16 else 'fp8_fp4'}_gemm_{kind}.default", "inputs": ins}


def test_the_forms_with_a_transposed_are_read_as_m_by_k(tmp_path, capsys):
    """a [K, M]: M and K from its two dimensions the other way round, N from
    b by K -- never a [K, M] read as M=K rows of M."""
    path = tmp_path / "dg.jsonl"
    write(path, [transposed(6, 256, 512), transposed(5, 384, 256, tt=True),
                 transposed(7, 128, 640, bf16=True), transposed(3, 640, 128, tt=True, bf16=True)])
    got = {g["operation"]: (g["m"], g["n"], g["k"]) for g in run(capsys, "gemm", str(path), "--json")}
    assert got == {"deep_gemm.fp8_fp4_gemm_tn.default": (6, 256, 512),
                   "deep_gemm.fp8_fp4_gemm_tt.default": (5, 384, 256),
                   "deep_gemm.bf16_gemm_tn.default": (7, 128, 640),
                   "deep_gemm.bf16_gemm_tt.default": (3, 640, 128)}
    flops = {r["operation"]: r["flops_per_call"] for r in run(capsys, "cost", str(path), "--json")["rows"]}
    assert flops == {"deep_gemm.fp8_fp4_gemm_tn.default": 2 * 6 * 256 * 512,
                     "deep_gemm.fp8_fp4_gemm_tt.default": 2 * 5 * 384 * 256,
                     "deep_gemm.bf16_gemm_tn.default": 2 * 7 * 128 * 640,
                     "deep_gemm.bf16_gemm_tt.default": 2 * 3 * 640 * 128}


def test_tune_lists_the_kernels_deep_gemm_compiles_with_the_m_that_ran(tmp_path, capsys):
    """DeepGEMM compiles a kernel per function, N, K (and groups); M is an
    argument. tune lists each such kernel with the M of its calls: the
    pairs and ranges are the ones the test wrote."""
    path = tmp_path / "dg.jsonl"
    recs = ([dict(fp8_gemm(m, 256, 512), phase="decode") for m in (1, 2, 2, 7)] +
            [dict(fp8_gemm(300, 256, 512), phase="prefill"), dict(fp8_gemm(4, 384, 256), phase="decode")] +
            [dict(grouped(m, 8, 512, 256), phase="prefill") for m in (64, 128)] +
            [dict(masked(4, 16, 256, 384), phase="decode")] * 3)
    write(path, recs)
    configs = tmp_path / "configs"
    configs.mkdir()
    doc = run(capsys, "tune", str(path), "--device", "H100", "--configs", str(configs), "--json")
    got = {(k["function"], k["N"], k["K"], k["groups"], k["masked"]): (k["calls"], k["m_min"], k["m_max"])
           for k in doc["deep_gemm_kernels"]}
    assert got == {("deep_gemm.fp8_fp4_gemm_nt", 256, 512, None, False): (5, 1, 300),
                   ("deep_gemm.fp8_fp4_gemm_nt", 384, 256, None, False): (1, 4, 4),
                   ("deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous", 512, 256, 8, False): (2, 64, 128),
                   ("deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked", 256, 384, 4, True): (3, 16, 16)}
    first = doc["deep_gemm_kernels"][0]  # most called first
    assert (first["N"], first["K"]) == (256, 512)
    assert sorted((x["phase"], x["m"], x["calls"]) for x in first["m"]) == [
        ("decode", 1, 1), ("decode", 2, 2), ("decode", 7, 1), ("prefill", 300, 1)]
    capsys.readouterr()
    assert main(["tune", str(path), "--device", "H100", "--configs", str(configs)]) == 0
    text = capsys.readouterr().out
    assert "deep_gemm.fp8_fp4_gemm_nt N=256 K=512 float8_e4m3fn,float8_e4m3fn: M 1-300 (4 distinct)  (5 calls)" in text
    assert "deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked N=256 K=384 groups=4" in text
