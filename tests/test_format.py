"""FORMAT.md, field by field: spelling of operations and dtypes, argument
names, lists with null, the three kinds of outputs, escaping, the summary."""
import json
import os
import warnings

import pytest
import torch
from helpers import load

from sgl_shapeprof import ShapeProfiler, read_summary


def profile(tmp_path, fn, **opts):
    path = tmp_path / "s.jsonl"
    prof = ShapeProfiler(path, **opts)
    with prof.forward_pass():
        fn()
    prof.close()
    return load(path), read_summary(prof.summary_path), prof


def all_dtypes():
    return sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)


def test_every_dtype_spelled_like_python(tmp_path):
    made = []

    def run():
        for dt in all_dtypes():
            try:
                with warnings.catch_warnings():  # experimental/deprecated dtypes warn
                    warnings.simplefilter("ignore")
                    t = torch.empty((2, 3), dtype=dt)
            except Exception:
                continue  # a dtype this build cannot allocate on CPU
            made.append(dt)
            torch.ops.aten.alias.default(t)

    recs, _, _ = profile(tmp_path, run)
    seen = [r["outputs"]["dtype"] for r in recs if r["operation"] == "aten.alias.default"]
    assert seen == [str(dt) for dt in made]
    assert len(made) >= 20  # float8s, complex, quantized ints, bits, uints...


def test_argument_names_lists_and_outputs(tmp_path):
    a = torch.randn(4, 6)

    def run():
        torch.cat([a, a], dim=0)                    # Tensor[] input
        a[:, torch.tensor([0, 2])]                  # Tensor?[] with None
        torch.max(a, dim=1)                         # two returns
        torch.split(a, 2)                           # Tensor[] return
        torch.zeros(3)                              # no tensor input
        torch.addmm(torch.zeros(4, 4), a, a.t(), beta=0.5)
        a.sum().item()                              # non-tensor return

    recs, summary, _ = profile(tmp_path, run)
    by_op = {}
    for r in recs:
        by_op.setdefault(r["operation"], r)
    t46 = {"shape": [4, 6], "dtype": "torch.float32"}
    assert by_op["aten.cat.default"]["inputs"] == {"tensors": [t46, t46]}
    assert by_op["aten.index.Tensor"]["inputs"] == {
        "self": t46, "indices": [None, {"shape": [2], "dtype": "torch.int64"}]}
    assert by_op["aten.max.dim"]["outputs"] == [
        {"shape": [4], "dtype": "torch.float32"}, {"shape": [4], "dtype": "torch.int64"}]
    assert by_op["aten.split.Tensor"]["outputs"] == [
        {"shape": [2, 6], "dtype": "torch.float32"}] * 2
    assert by_op["aten.zeros.default"]["inputs"] == {}
    assert list(by_op["aten.addmm.default"]["inputs"]) == ["self", "mat1", "mat2"]
    assert by_op["aten._local_scalar_dense.default"]["outputs"] is None
    assert [r["call_id"] for r in recs] == list(range(1, len(recs) + 1))
    assert summary["total_operations"] == len(recs)
    assert summary["unique_operations"] == len(by_op)
    counts = list(summary["operation_counts"].values())
    assert counts == sorted(counts, reverse=True)
    assert sum(counts) == len(recs)


def test_summary_fields_and_dedupe(tmp_path):
    a = torch.randn(8, 8)

    def run():
        for _ in range(10):
            torch.relu(a)
        torch.relu(torch.randn(2, 2))

    recs, s, _ = profile(tmp_path, run, dedupe=True)
    relu = [r for r in recs if r["operation"] == "aten.relu.default"]
    assert len(relu) == 2
    assert s["dedupe_enabled"] is True
    assert s["operation_counts"]["aten.relu.default"] == 11
    assert s["dedupe_skipped_count"] == 9
    assert sum(s["operation_counts"].values()) == s["total_operations"] + s["dedupe_skipped_count"]
    assert s["unique_op_signatures"] == len(recs)
    for key in ("rank", "total_operations", "forward_passes", "unique_operations",
                "operation_counts", "dedupe_enabled", "dedupe_skipped_count", "unique_op_signatures"):
        assert key in s


def test_every_line_is_json_and_newline_terminated(tmp_path):
    recs, _, prof = profile(tmp_path, lambda: torch.randn(3).cos())
    data = open(prof.path, "rb").read()
    assert data.endswith(b"\n") and b"\0" not in data
    assert all(json.loads(line) for line in data.splitlines())


def test_summary_of_a_path_that_is_not_utf8_is_valid_json(tmp_path):
    import os
    import torch
    from sgl_shapeprof import ShapeProfiler
    path = os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9.jsonl")   # Latin-1 bytes
    prof = ShapeProfiler(os.fsdecode(path))
    with prof.forward_pass():
        torch.ones(2).neg()
    prof.close()
    summary = json.loads(open(os.path.join(os.fsencode(str(tmp_path)), b"caf\xe9_summary.json"), "rb").read())
    assert summary["total_operations"] == 2
    assert summary["records_file"].endswith("caf\ufffd.jsonl")   # the one escaper: U+FFFD for bad bytes


def test_every_phase_label_is_counted(tmp_path):
    import torch
    from sgl_shapeprof import ShapeProfiler
    long_label = "decode_" + "x" * 100
    labels = [f"p{i}" for i in range(40)] + [long_label, long_label]
    prof = ShapeProfiler(str(tmp_path / "l.jsonl"))
    for label in labels:
        with prof.forward_pass(label):
            torch.ones(2).neg()
    prof.close()
    summary = json.loads((tmp_path / "l_summary.json").read_text())
    assert summary["phase_passes"] == {**{f"p{i}": 1 for i in range(40)}, long_label: 2}
    assert summary["phase_operations"][long_label] == 4


@pytest.mark.parametrize("name", ["shapes.jsonl", "run.json", "plain", "a.b.jsonl", "shapes_tp0_of_2.jsonl"])
def test_the_native_core_names_the_summary_as_the_reader_looks_for_it(tmp_path, name):
    """The summary's name has two writers: the C core (sp_profiler.c) makes
    it, records/reader.py's summary_path_for finds it. Real files agree."""
    from sgl_shapeprof.records.reader import summary_path_for
    path = tmp_path / name
    prof = ShapeProfiler(str(path))
    with prof.forward_pass():
        torch.ones(2).neg()
    prof.close()
    written = sorted(set(os.listdir(tmp_path)) - {name})
    assert [str(tmp_path / n) for n in written] == [summary_path_for(str(path))] == [prof.summary_path]
