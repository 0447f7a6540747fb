"""A kernel library's API calls through a door (recording/doors.py;
docs/FORMAT.md, "Kernel library calls"), with a stand-in library of our own
here: its functions run torch operators and call each other, as FlashInfer's
do. The real FlashInfer's door is tested in tests/sglang/test_flashinfer.py.
The oracle is what each test passed in and got back, never our records."""
import contextlib
import enum
import io
import json

import pytest
import torch
from helpers import load

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.analysis.analyze import analyze_file
from sgl_shapeprof.analysis.cost import GPUS, WITHIN, costs
from sgl_shapeprof.cli.main import main
from sgl_shapeprof.recording.doors import api_door, operation_name


class Layout(enum.Enum):
    HND = 1
    NHD = 2


def _norm(input, weight, eps=1e-6, out=None):
    y = input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y if out is None else out.copy_(y)


def _decode(query, kv_cache, block_tables, scale=1.0, layout=Layout.HND, backend="auto"):
    k, v = kv_cache
    if backend == "boom":
        raise ValueError(f"unsupported backend {backend!r} for {tuple(query.shape)}")
    return (query * scale) @ k[0].t() @ v[0], block_tables.sum()


def _fused(x, w):
    return norm(x, w)  # an API call inside another: the outer one is the record


_norm.__module__ = _decode.__module__ = _fused.__module__ = "stand_in.ops"
norm = api_door(_norm, operation_name("stand_in", _norm))
decode = api_door(_decode, operation_name("stand_in", _decode))
fused = api_door(_fused, operation_name("stand_in", _fused))


def record(tmp_path, work, **opts):
    path = str(tmp_path / "doors.jsonl")
    prof = ShapeProfiler(path, **opts)
    with torch.inference_mode():
        work()  # outside a pass: not recorded
        prof.start_forward_pass("decode")
        try:
            out = work()
        finally:
            prof.end_forward_pass()
            prof.close()
    with open(str(tmp_path / "doors_summary.json")) as f:
        return load(path), json.load(f), out


def test_a_call_is_one_record_with_its_tensors_by_name_values_and_outputs(tmp_path):
    q, k, v = torch.randn(2, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    tables = torch.zeros(2, 5, dtype=torch.int32)

    def work():
        return decode(q, (k, v), tables, scale=0.5, layout=Layout.NHD)
    recs, summary, (out, total) = record(tmp_path, work)
    assert [r["operation"] for r in recs] == ["stand_in:ops._decode"]  # none of its operators
    r = recs[0]
    assert r["inputs"] == {
        "query": {"shape": list(q.shape), "dtype": "torch.float32"},
        "kv_cache": [{"shape": list(k.shape), "dtype": "torch.float32"},
                     {"shape": list(v.shape), "dtype": "torch.float32"}],
        "block_tables": {"shape": list(tables.shape), "dtype": "torch.int32"}}
    assert r["args"] == {"scale": 0.5, "layout": "Layout.NHD", "backend": "auto"}
    assert r["outputs"] == [{"shape": list(out.shape), "dtype": str(out.dtype)},
                            {"shape": list(total.shape), "dtype": str(total.dtype)}]
    assert summary["operation_counts"] == {"stand_in:ops._decode": 1}


def test_a_call_that_raises_is_recorded_with_its_exception_and_raises_as_it_was(tmp_path):
    q, kv = torch.randn(2, 8), (torch.randn(3, 4, 8), torch.randn(3, 4, 8))
    tables = torch.zeros(2, 5, dtype=torch.int32)
    caught = []

    def work():
        try:
            decode(q, kv, tables, backend="boom")
        except ValueError as e:
            caught.append(e)
    recs, _, _ = record(tmp_path, work)
    assert len(caught) == 2  # outside the pass and inside: the same exception
    assert [r["operation"] for r in recs] == ["stand_in:ops._decode"]
    assert recs[0]["error"] == {"error_type": "ValueError", "error_message": str(caught[1])}
    assert recs[0]["args"]["backend"] == "boom"


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def _raising(x, error):
    raise error


raising = api_door(_raising, operation_name("stand_in", _raising))


def test_an_exception_is_the_callers_own_and_its_text_is_what_str_gives(tmp_path):
    """The door's native path hands the caller the very exception raised,
    its traceback with it; the record carries type(e).__name__ and str(e):
    a NUL byte kept, a lone surrogate as valid Unicode, a __str__ that
    raises said so."""
    x = torch.randn(2)
    odd, unprintable = ValueError("a\x00b \udcff c"), _Unprintable()
    caught = []

    def work():
        for error in (odd, unprintable):
            try:
                raising(x, error)
            except Exception as e:
                caught.append((e, e.__traceback__.tb_next is not None))
    recs, _, _ = record(tmp_path, work)
    assert [e for e, _ in caught] == [odd, unprintable] * 2  # outside the pass, then inside: the same objects
    assert all(deep for _, deep in caught)  # raised where it was: the frames below the door are there
    assert [r["error"] for r in recs] == [
        # only valid Unicode is written: Python's own UTF-8 decoder says what a lone surrogate becomes
        {"error_type": "ValueError", "error_message": str(odd).encode("utf-8", "surrogatepass").decode(
            "utf-8", "replace")},
        {"error_type": "_Unprintable", "error_message": "<str() of _Unprintable raised>"}]


def test_the_outer_door_is_the_record_and_counts_are_true(tmp_path):
    x, w = torch.randn(4, 16), torch.randn(16)

    def work():
        return [fused(x, w) for _ in range(3)] + [norm(x, w, out=torch.empty(4, 16))]
    recs, summary, outs = record(tmp_path, work, dedupe=True)
    assert all(torch.allclose(o, _norm(x, w)) for o in outs)  # same results with the door
    ops = [r["operation"] for r in recs]
    # torch.empty is the caller's, outside any door: it is recorded
    assert ops == ["stand_in:ops._fused", "aten.empty.memory_format", "stand_in:ops._norm"]
    assert summary["operation_counts"] == {"stand_in:ops._fused": 3, "aten.empty.memory_format": 1,
                                          "stand_in:ops._norm": 1}
    assert recs[2]["inputs"]["out"] == {"shape": [4, 16], "dtype": "torch.float32"}
    assert recs[2]["outputs"] == {"shape": [4, 16], "dtype": "torch.float32"}


def test_with_arguments_on_tensors_carry_their_layout(tmp_path):
    x = torch.randn(16, 4).t()  # not contiguous
    w = torch.randn(16)

    def work():
        return norm(x, w)
    recs, _, _ = record(tmp_path, work, args=True)
    assert recs[0]["inputs"]["input"] == {"shape": [4, 16], "dtype": "torch.float32",
                                          "stride": [1, 4], "offset": 0, "device": "cpu"}


def test_outside_logged_passes_the_library_runs_as_it_is(tmp_path):
    x, w = torch.randn(4, 16), torch.randn(16)
    assert torch.equal(norm(x, w), _norm(x, w))
    assert norm.__name__ == "_norm" and norm.__wrapped__ is _norm
    with pytest.raises(ValueError):
        decode(x, (x, x), x, backend="boom")


def _opts(x, *rest, scale=1.0, **opts):
    return x * scale


_opts.__module__ = "stand_in.ops"
opts = api_door(_opts, operation_name("stand_in", _opts))


def test_values_it_does_not_name_are_kept_as_text(tmp_path):
    x = torch.randn(2, 3)

    def work():
        return opts(x, 7, scale=2.0, fancy="yes")
    recs, _, out = record(tmp_path, work)
    assert torch.equal(out, x * 2.0)
    assert recs[0]["inputs"] == {"x": {"shape": [2, 3], "dtype": "torch.float32"}}
    assert recs[0]["args"] == {"scale": 2.0, "other_args": "fancy='yes', 7"}


def test_a_call_inside_a_custom_ops_kernel_is_marked_within_it(tmp_path):
    # A custom op (a dispatcher record) whose kernel calls a library's API, as
    # an SGLang op calling FlashInfer: both are recorded, the inner one marked
    # with the op it ran in, so that no reader counts the work twice. The same
    # call made outside the op is another signature, unmarked.
    lib = torch.library.Library("shapeprof_within", "DEF")
    lib.define("outer(Tensor x, Tensor w) -> Tensor")
    lib.impl("outer", lambda x, w: norm(x, w), "CompositeExplicitAutograd")
    x, w = torch.randn(3, 16), torch.randn(16)

    def work():
        a = torch.ops.shapeprof_within.outer(x, w)
        b = torch.ops.shapeprof_within.outer(x, w)  # a repeat: counted, not written again
        return a, b, norm(x, w)
    recs, summary, (a, b, c) = record(tmp_path, work, dedupe=True)
    torch.testing.assert_close(a, c)
    by_op = [(r["operation"], r.get("within")) for r in recs]
    assert by_op == [("stand_in:ops._norm", "shapeprof_within.outer.default"),
                     ("shapeprof_within.outer.default", None),
                     ("stand_in:ops._norm", None)]
    assert summary["operation_counts"] == {"shapeprof_within.outer.default": 2, "stand_in:ops._norm": 3}
    inner = recs[0]
    assert inner["inputs"] == {"input": {"shape": [3, 16], "dtype": "torch.float32"},
                               "weight": {"shape": [16], "dtype": "torch.float32"}}
    # readers: the ledger says which calls ran within others; cost counts
    # the op's work once, as the op (what its kernel ran through the
    # dispatcher is not recorded apart: only the op's own estimate holds it)
    path = str(tmp_path / "doors.jsonl")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", path, "--json"]) == 0
    f = json.loads(buf.getvalue())["files"][0]
    assert f["doors"] == {"custom_ops": 2, "stand_in": 3}
    assert f["doors_within"] == {"stand_in": 2}
    cs = {(c.sig.operation, c.sig.within): c for c in costs(analyze_file(path).signatures, GPUS["h100"])}
    io_bytes = (3 * 16 + 16 + 3 * 16) * 4  # x, w in; y out: float32
    outer = cs[("shapeprof_within.outer.default", None)]
    assert outer.bytes == io_bytes and outer.bound == "memory" and outer.total_seconds == 2 * outer.seconds > 0
    inner = cs[("stand_in:ops._norm", "shapeprof_within.outer.default")]
    assert inner.bytes == io_bytes and inner.sig.count == 2 and inner.seconds > 0
    assert inner.bound == WITHIN and inner.total_seconds == 0.0  # shown, not added to totals


def test_under_torch_profiler_a_recorded_call_is_a_range_named_as_its_record(tmp_path):
    # what lets the GPU check's coverage tell a library call's kernels
    # explained: they launch inside this range
    x, w = torch.randn(3, 16), torch.randn(16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        recs, _, _ = record(tmp_path, lambda: norm(x, w))
    names = [e.name for e in trace.events()]
    assert [r["operation"] for r in recs] == ["stand_in:ops._norm"]
    assert names.count("stand_in:ops._norm") == 1  # the call in the pass, not the one outside
    ranged = next(e for e in trace.events() if e.name == "stand_in:ops._norm")
    inside = {e.name for e in trace.events() if e.cpu_parent is ranged}
    assert "aten::mul" in inside or "aten::rsqrt" in inside  # its own work, under it
