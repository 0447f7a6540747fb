"""FORMAT.md, field by field: spelling of operations and dtypes, argument
names, lists with null, the three kinds of outputs, escaping, the summary."""
import json
import re
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


@pytest.fixture(scope="module")
def custom_ops():
    lib = torch.library.Library("shapeprof_test", "DEF")
    lib.define("scale(Tensor x, float k) -> Tensor")
    lib.define("pair(Tensor x) -> (Tensor, Tensor)")
    lib.define("fail(Tensor x, str msg) -> Tensor")
    lib.impl("scale", lambda x, k: x * k, "CPU")
    lib.impl("pair", lambda x: (x + 1, x - 1), "CPU")

    def fail(x, msg):
        raise ValueError(msg)
    lib.impl("fail", fail, "CPU")
    yield torch.ops.shapeprof_test
    lib._destroy()


def test_custom_ops_and_escaping(tmp_path, custom_ops):
    x = torch.randn(3, 5)
    nasty = 'quote " backslash \\ newline \n tab \t bell \x07 é 漢字'

    def run():
        custom_ops.scale(x, 2.0)
        custom_ops.pair.default(x)
        with pytest.raises(ValueError) as info:
            custom_ops.fail(x, nasty)
        assert str(info.value) == nasty

    recs, _, _ = profile(tmp_path, run)
    ops = [r["operation"] for r in recs if r["operation"].startswith("shapeprof_test")]
    assert ops == ["shapeprof_test.scale.default", "shapeprof_test.pair.default",
                   "shapeprof_test.fail.default"]
    err = recs[-1]
    assert err["outputs"] is None
    assert err["error"] == {"error_type": "ValueError", "error_message": nasty}
    assert err["inputs"] == {"x": {"shape": [3, 5], "dtype": "torch.float32"}}


class Élan_Error(Exception):
    """A class name that is not ASCII."""


def _punctuated():
    # a name no `class` statement can give, as some libraries make them
    return type("Odd-Name.With Spaces!", (RuntimeError,), {})


class BadStr(ValueError):
    def __str__(self):
        raise TypeError("no str for you")


@pytest.mark.parametrize("make", [
    lambda: ValueError("nul \0 inside"),
    lambda: AssertionError(),                          # a bare assert: str(e) == ""
    lambda: ValueError("lone \udc80 surrogate \ud800"),
    lambda: ValueError("before\n\nAt:\n  not a traceback"),
    lambda: Élan_Error("non-ASCII class"),
    lambda: _punctuated()("punctuated class"),
    lambda: KeyError("quoted by str()"),
], ids=["nul", "empty", "surrogates", "at-marker", "non-ascii-class", "punctuated-class", "keyerror"])
def test_python_kernel_errors_are_recorded_exactly(tmp_path, custom_ops, make):
    """type(e).__name__ and str(e) of the exception the caller receives,
    taken from the exception object, not rebuilt from pybind11's text."""
    exc = make()
    lib = torch.library.Library("shapeprof_exc", "FRAGMENT")
    name = f"raise_{abs(hash(repr(exc))) % 10**8}"
    lib.define(f"{name}(Tensor x) -> Tensor")

    def kernel(x):
        raise exc
    lib.impl(name, kernel, "CPU")
    got = []

    def run():
        with pytest.raises(type(exc)) as info:
            getattr(torch.ops.shapeprof_exc, name)(torch.ones(2))
        got.append(info.value)

    try:
        recs, _, _ = profile(tmp_path, run)
    finally:
        lib._destroy()
    assert got[0] is exc                                 # the caller gets the very exception
    (err,) = [r for r in recs if r["operation"] == f"shapeprof_exc.{name}.default"]
    # only valid Unicode is written: a lone surrogate (not UTF-8) becomes
    # U+FFFD, as Python's own UTF-8 decoder replaces it
    said = str(exc).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    assert err["error"] == {"error_type": type(exc).__name__, "error_message": said}
    assert (said == str(exc)) == ("surrogate" not in str(exc))
    raw = (tmp_path / "s.jsonl").read_bytes()
    raw.decode("utf-8")                                  # strict: valid UTF-8 ...
    assert not re.search(rb"\\u[dD][89a-fA-F]", raw)   # ... and no surrogate escape
    assert err["outputs"] is None


def test_python_kernel_error_whose_str_raises(tmp_path):
    lib = torch.library.Library("shapeprof_exc2", "DEF")
    lib.define("f(Tensor x) -> Tensor")

    def kernel(x):
        raise BadStr("x")
    lib.impl("f", kernel, "CPU")

    def run():
        with pytest.raises(BadStr):
            torch.ops.shapeprof_exc2.f(torch.ones(2))
    try:
        recs, _, _ = profile(tmp_path, run)
    finally:
        lib._destroy()
    (err,) = [r for r in recs if r["operation"] == "shapeprof_exc2.f.default"]
    assert err["outputs"] is None and err["error"]["error_type"]  # recorded, the host unharmed


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
