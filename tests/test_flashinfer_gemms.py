"""Issue 53: gemm and cost read FlashInfer's GEMMs by FlashInfer's own
templates (its flashinfer.trace TraceTemplates, shipped as data in
integrations/flashinfer/templates.json), with no FlashInfer installed here.
Records carry the real functions' parameter names (FlashInfer 0.7.2's); the
oracle is arithmetic on the shapes the test writes."""
import json

import pytest

from helpers import nbytes, write_records
from helpers import tensor as t
from sgl_shapeprof.cli.main import main

BF16, FP8, I32, F32 = "torch.bfloat16", "torch.float8_e4m3fn", "torch.int32", "torch.float32"
FI = "flashinfer:gemm.gemm_base."


def write(path, records):
    write_records(path, records, args={})


def run(capsys, *argv):
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


# (function, inputs, args, output, (M, N, K, batch, groups))
CALLS = [
    ("mm_fp8", {"a": t([9, 256], FP8), "b": t([2, 64, 128], FP8)}, {}, t([9, 64], BF16), (9, 64, 256, 1, None)),
    ("mm_bf16", {"a": t([11, 96], BF16), "b": t([96, 40], BF16)}, {}, t([11, 40], BF16), (11, 40, 96, 1, None)),
    ("bmm_fp8", {"A": t([2, 5, 32], FP8), "B": t([2, 32, 24], FP8), "A_scale": t([1], F32), "B_scale": t([1], F32)},
     {}, t([2, 5, 24], BF16), (5, 24, 32, 2, None)),
    ("tgv_gemm_sm100", {"a": t([3, 64], BF16), "b": t([64, 80], BF16), "bias": t([80], BF16)}, {},
     t([3, 80], BF16), (3, 80, 64, 1, None)),
    ("group_gemm_fp8_nt_groupwise_contiguous",
     {"a": t([6, 256], FP8), "b": t([8, 128, 256], FP8), "a_scale": t([6, 2], F32), "b_scale": t([8, 1, 2], F32),
      "m_indices": t([6], I32)}, {}, t([6, 128], BF16), (6, 128, 256, 1, 8)),
    ("SegmentGEMMWrapper.run", {"x": t([10, 32], BF16), "weights": t([4, 32, 48], BF16)},
     {"batch_size": 4, "weight_column_major": False}, t([10, 48], BF16), (10, 48, 32, 1, 4)),
]


def test_gemm_reads_flashinfers_gemms_by_its_own_templates(tmp_path, capsys):
    path = tmp_path / "fi.jsonl"
    write(path, [{"operation": FI + fn, "inputs": ins, "args": args, "outputs": out} for fn, ins, args, out, _ in CALLS])
    got = {g["operation"]: (g["m"], g["n"], g["k"], g["batch"], g.get("groups")) for g in run(capsys, "gemm", str(path), "--json")}
    assert got == {FI + fn: dims for fn, _, _, _, dims in CALLS}
    flops = {r["operation"]: r["flops_per_call"] for r in run(capsys, "cost", str(path), "--json")["rows"]}
    for fn, _, _, _, (m, n, k, batch, _) in CALLS:
        assert flops[FI + fn] == 2 * m * n * k * batch, fn


def test_a_masked_grouped_gemm_says_its_rows_are_an_upper_bound(tmp_path, capsys):
    path = tmp_path / "masked.jsonl"
    ins = {"a": t([4, 16, 256], FP8), "b": t([4, 128, 256], FP8), "a_scale": t([4, 16, 2], F32),
           "b_scale": t([4, 1, 2], F32), "masked_m": t([4], I32)}
    write(path, [{"operation": FI + "batch_deepgemm_fp8_nt_groupwise", "inputs": ins, "args": {"expected_m": 5},
                  "outputs": t([4, 16, 128], BF16)}])
    [g] = run(capsys, "gemm", str(path), "--json")
    assert (g["operation"], g["m"], g["n"], g["k"], g["batch"]) == (
        FI + "batch_deepgemm_fp8_nt_groupwise [masked: rows at most]", 16, 128, 256, 4)


def test_a_grouped_gemm_with_fewer_rows_than_groups_reads_only_their_weights(tmp_path, capsys):
    rows, groups, n, k = 3, 64, 128, 256
    ins = {"a": t([rows, k], FP8), "b": t([groups, n, k], FP8), "a_scale": t([rows, k // 128], F32),
           "b_scale": t([groups, n // 128, k // 128], F32), "m_indices": t([rows], I32)}
    out = t([rows, n], BF16)
    path = tmp_path / "grouped.jsonl"
    op = FI + "group_gemm_fp8_nt_groupwise_contiguous"
    write(path, [{"operation": op, "inputs": ins, "outputs": out}])
    [row] = [r for r in run(capsys, "cost", str(path), "--json")["rows"] if r["operation"] == op]
    per_group = nbytes(ins["b"]) + nbytes(ins["b_scale"])
    want = nbytes(ins["a"]) + nbytes(ins["a_scale"]) + nbytes(ins["m_indices"]) + nbytes(out) + per_group * rows // groups
    assert row["bytes_per_call"] == want


@pytest.mark.parametrize("weights", [[4, 48, 32]])
def test_a_record_that_does_not_fit_the_template_is_read_as_nothing(tmp_path, capsys, weights):
    # a column-major segment GEMM's weights are [batch, N, K]; FlashInfer's
    # template says [batch, K, N]: K would be 32 and 48 at once, so no reading
    path = tmp_path / "col.jsonl"
    write(path, [{"operation": FI + "SegmentGEMMWrapper.run", "inputs": {"x": t([10, 32], BF16),
                  "weights": t(weights, BF16)}, "args": {"batch_size": 4, "weight_column_major": True},
                  "outputs": t([10, 48], BF16)}])
    assert run(capsys, "gemm", str(path), "--json") == []


def test_tune_flashinfer_bench_says_in_one_line_why_it_writes_nothing(tmp_path, capsys):
    # this environment has no FlashInfer: its fi_trace writes the definitions
    path = tmp_path / "fi.jsonl"
    op, ins, args, out, _ = CALLS[0]
    write(path, [{"operation": FI + op, "inputs": ins, "args": args, "outputs": out}])
    out_dir = tmp_path / "bench"
    assert main(["tune", str(path), "--flashinfer-bench", str(out_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("sgl-shapeprof tune: --flashinfer-bench: nothing to write: FlashInfer cannot be "
                              "imported here (")
    assert not out_dir.exists()
    write(path, [{"operation": "aten.mm.default", "inputs": {"self": t([2, 3], BF16), "mat2": t([3, 4], BF16)},
                  "outputs": t([2, 4], BF16)}])
    assert main(["tune", str(path), "--flashinfer-bench", str(out_dir)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sgl-shapeprof tune: --flashinfer-bench: nothing to write: the records have no FlashInfer calls")


def test_a_definition_axis_the_record_does_not_give_is_a_reason_not_a_crash(tmp_path, monkeypatch):
    # FlashInfer's definition (stood in: this environment has no FlashInfer)
    # names a variable axis no recorded tensor carries
    from sgl_shapeprof.analysis.tune import flashinfer_bench
    from sgl_shapeprof.records.signature import Signature
    op, ins, args, out, _ = CALLS[1]  # mm_bf16: a [M, K], b [K, N]
    defn = {"name": "gemm_bf16_N40_K96", "op_type": "gemm_bf16",
            "axes": {"M": {"type": "var"}, "seq": {"type": "var"}, "N": {"type": "const", "value": 40}},
            "inputs": {"A": {"shape": ["M", "K"]}, "B": {"shape": ["K", "N"]}}}
    monkeypatch.setattr(flashinfer_bench, "definition", lambda *a: (defn, "{}"))
    sig = Signature(FI + op, ins, out, None, "decode", count=1, args=args)
    b = flashinfer_bench.bench_set([sig])
    assert (b.definitions, b.skipped) == ({}, {"the record does not give the axis seq": 1})
