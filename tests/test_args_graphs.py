"""Opt-in argument recording (args=True) and graph captures (capture_graph /
graph_replayed), through the real fallback on CPU."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from helpers import PKG_ROOT, load, run_python

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.cli import main
from sgl_shapeprof.records.scan import scan


def _record(tmp_path, fn, name="a.jsonl", **opts):
    prof = ShapeProfiler(str(tmp_path / name), **opts)
    with torch.inference_mode(), prof.forward_pass():
        fn()
    prof.close()
    return load(prof.path), prof


def by_op(recs, op):
    found = [r for r in recs if r["operation"] == op]
    assert found, f"no {op} in {[r['operation'] for r in recs]}"
    return found[0]


def test_default_records_have_no_arguments(tmp_path):
    x = torch.randn(4, 6)
    recs, _ = _record(tmp_path, lambda: torch.sum(x.t()[1:], dim=1))
    assert recs and all("args" not in r for r in recs)
    assert all(set(t) == {"shape", "dtype"} for r in recs for t in r["inputs"].values())


def test_arguments_of_every_kind(tmp_path):
    x = torch.randn(4, 6)
    img, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)

    def work():
        y = x.t()[1:]                                   # a strided view at offset 1
        torch.sum(y, dim=1, keepdim=True, dtype=torch.float64)
        x + 2.5                                         # a Python number where a Tensor goes
        x * 3                                           # an int one
        torch.nn.functional.gelu(x, approximate="tanh")
        torch.nn.functional.conv2d(img, w, stride=2, padding=1)
        torch.empty(3, 4, memory_format=torch.contiguous_format)
        torch.clamp(x, max=math.inf)
        torch.cat([x, x], 1)
        torch.full((2,), 1 + 2j)

    recs, _ = _record(tmp_path, work, args=True)
    s = by_op(recs, "aten.sum.dim_IntList")
    assert s["inputs"]["self"] == {"shape": [5, 4], "dtype": "torch.float32", "stride": [1, 6],
                                   "offset": 1, "device": "cpu"}
    assert s["args"] == {"dim": [1], "keepdim": True, "dtype": "torch.float64"}
    assert by_op(recs, "aten.slice.Tensor")["args"] == {"dim": 0, "start": 1, "end": 2 ** 63 - 1, "step": 1}
    assert by_op(recs, "aten.add.Tensor")["args"] == {"other": 2.5, "alpha": 1}
    assert by_op(recs, "aten.mul.Tensor")["args"] == {"other": 3}
    assert by_op(recs, "aten.gelu.default")["args"] == {"approximate": "tanh"}
    conv = by_op(recs, "aten.conv2d.default")
    assert conv["args"] == {"bias": None, "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 1}
    assert conv["inputs"]["weight"]["stride"] == [27, 9, 3, 1]
    assert by_op(recs, "aten.empty.memory_format")["args"]["memory_format"] == "torch.contiguous_format"
    assert by_op(recs, "aten.clamp.default")["args"] == {"min": None, "max": "inf"}
    cat = by_op(recs, "aten.cat.default")
    assert cat["args"] == {"dim": 1} and [t["stride"] for t in cat["inputs"]["tensors"]] == [[6, 1], [6, 1]]
    full = by_op(recs, "aten.full.default")
    assert full["args"]["fill_value"] == {"real": 1.0, "imag": 2.0}
    assert full["args"]["size"] == [2] and full["args"]["dtype"] is None
    assert all("stride" not in r["outputs"] for r in recs if isinstance(r["outputs"], dict))
    assert by_op(recs, "aten.t.default")["args"] == {}  # arguments on, none to record


def test_floats_read_back_exactly(tmp_path):
    x = torch.randn(3)
    # whole numbers (written without printf), zeros of both signs, and
    # values again after others took their place in the recent ones kept
    values = [0.1, 1e-300, 1 / 3, 2.0 ** 70, -0.0, 5e-324, 0.0, 3.0, -7.0, 1e15 - 1, 1e15, -1e15, 2.0 ** 53]
    values += [i / 7 for i in range(40)] + [0.1, 1 / 3, -0.0, 1e-300]
    recs, _ = _record(tmp_path, lambda: [torch.add(x, v) for v in values], args=True)
    got = [r["args"]["other"] for r in recs if r["operation"] == "aten.add.Tensor"]
    assert got == values and all(isinstance(v, float) for v in got)
    assert [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in values]


def test_dedupe_keys_on_arguments(tmp_path):
    x = torch.randn(4, 6)

    def work():
        for dim in (0, 1, 0, 1, 1):
            torch.sum(x, dim=dim)

    recs, prof = _record(tmp_path, work, dedupe=True, args=True)
    sums = [r for r in recs if r["operation"] == "aten.sum.dim_IntList"]
    assert [r["args"]["dim"] for r in sums] == [[0], [1]]
    counts = json.load(open(prof.summary_path))["signature_counts"]
    assert [counts.get(str(r["call_id"]), 1) for r in sums] == [2, 3]
    # without arguments the two dims are still two signatures: their outputs differ
    recs, _ = _record(tmp_path, work, name="b.jsonl", dedupe=True)
    assert [r["outputs"]["shape"] for r in recs if r["operation"] == "aten.sum.dim_IntList"] == [[6], [4]]


def test_a_raising_call_keeps_its_arguments(tmp_path):
    x = torch.randn(2, 3)

    def work():
        with pytest.raises(IndexError):
            torch.select(x, 0, 7)

    recs, _ = _record(tmp_path, work, args=True)
    r = by_op(recs, "aten.select.int")
    assert r["args"] == {"dim": 0, "index": 7} and r["error"]["error_type"] == "IndexError"


def test_args_from_env_and_record_cli(tmp_path):
    code = ("import torch, sgl_shapeprof\n"
            "p = sgl_shapeprof.from_env()\n"
            "with p.forward_pass():\n"
            "    torch.randn(3).softmax(0)\n")
    out = tmp_path / "env.jsonl"
    r = run_python(code, {"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_FILE": str(out),
                          "SGLANG_PROFILE_SHAPES_ARGS": "1"})
    assert r.returncode == 0, r.stderr
    assert by_op(load(out), "aten._softmax.default")["args"] == {"dim": 0, "half_to_float": False}
    r = run_python(code, {"SGLANG_PROFILE_SHAPES": "1", "SGLANG_PROFILE_SHAPES_FILE": str(out),
                          "SGLANG_PROFILE_SHAPES_ARGS": "yes"})
    assert r.returncode != 0  # from_env gave None: the script's own p.forward_pass fails
    assert "SGLANG_PROFILE_SHAPES_ARGS='yes' must be 0 or 1; profiling is off" in r.stderr
    script = tmp_path / "s.py"
    script.write_text("import torch\ntorch.randn(2, 5).topk(2)\n")
    out = tmp_path / "rec.jsonl"
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "record", "--args", "-o", str(out), "--",
                        sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert by_op(load(out), "aten.topk.default")["args"] == {"k": 2, "dim": -1, "largest": True, "sorted": True}


# ---- graph captures -----------------------------------------------------------

def _decode_step(w, bs):
    x = torch.ones(bs, 8)
    return torch.relu(torch.mm(x, w))


def test_graph_capture_and_replays(tmp_path, capsys):
    w = torch.randn(8, 8)
    prof = ShapeProfiler(str(tmp_path / "g.jsonl"), dedupe=True, skip_warmup=1)
    with torch.inference_mode():
        for bs in (4, 2):
            _decode_step(w, bs)  # a warm-up run: outside the capture, not recorded
            with prof.capture_graph(bs) as logged:
                assert logged
                _decode_step(w, bs)
                _decode_step(w, bs)  # two layers with the same shapes
        for step, bs in enumerate([4, 2, 4, 4, 2]):
            with prof.forward_pass("decode"):
                if step:  # the first pass is a warm-up: its replay is not counted
                    # step 2 knows the batch it padded from 3 to 4
                    assert prof.graph_replayed(bs, real=3 if step == 2 else None)
                else:
                    assert not prof.graph_replayed(bs)
                torch.argmax(torch.ones(bs, 8), 1)  # work outside the graph
        assert not prof.graph_replayed(4)  # outside a pass
    prof.close()
    recs = load(prof.path)
    caps = [r for r in recs if "graph" in r]
    assert [(r["forward_pass"], r["phase"], r["graph"], r["operation"]) for r in caps] == [
        (0, "decode", 4, "aten.ones.default"), (0, "decode", 4, "aten.mm.default"),
        (0, "decode", 4, "aten.relu.default"),
        (0, "decode", 2, "aten.ones.default"), (0, "decode", 2, "aten.mm.default"),
        (0, "decode", 2, "aten.relu.default")]
    s = json.load(open(prof.summary_path))
    assert s["graphs"] == {"4": {"captures": 1, "replays": 2, "real_sizes": {"3": 1}},
                           "2": {"captures": 1, "replays": 2}}
    assert s["forward_passes"] == 5 and s["logged_forward_passes"] == 4
    assert s["phase_passes"] == {"decode": 4}
    # true counts: each captured call x its graph's replays
    src = scan(prof.path)
    mm = {sig.graph: sig.count for sig in src.signatures.values() if sig.operation == "aten.mm.default"}
    assert mm == {4: 2 * 2, 2: 2 * 2}
    assert sorted(src.passes) == [2, 3]  # captures are not a pass (4, 5: repeats only, deduplicated)
    assert main(["analyze", prof.path, "--json", "--filter-op", "aten.mm"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["operations"][0]["calls"] == 8
    assert data["files"][0]["graphs"] == s["graphs"]  # real sizes' keys as strings again
    assert main(["analyze", prof.path]) == 0
    assert "graphs: 2 captured (2, 4), 4 replays in logged passes" in capsys.readouterr().out
    assert main(["gemm", prof.path, "--json"]) == 0
    gemms = json.loads(capsys.readouterr().out)
    assert sorted((g["m"], g["count"]) for g in gemms) == [(2, 4), (4, 4)]


def test_graph_capture_respects_the_phase_filter_and_checks_keys(tmp_path):
    prof = ShapeProfiler(str(tmp_path / "p.jsonl"), phases="extend")
    with prof.capture_graph(1, phase="decode") as logged:
        torch.ones(2).neg()
    assert not logged
    with pytest.raises(TypeError, match="graph key must be an int"):
        prof.graph_replayed("8")
    with pytest.raises(TypeError, match="graph key must be an int"):
        with prof.capture_graph(1.5):
            pass
    prof.close()
    assert load(prof.path) == []
    assert "graphs" not in json.load(open(prof.summary_path))


def test_replays_of_an_unrecorded_capture_and_a_key_captured_twice_are_flagged(tmp_path, capsys):
    prof = ShapeProfiler(str(tmp_path / "u.jsonl"))
    for _ in range(2):
        with prof.capture_graph(4):
            torch.ones(2).neg()
    with prof.forward_pass("decode"):
        torch.ones(2).neg()
        prof.graph_replayed(16, n=3)
    prof.close()
    assert json.load(open(prof.summary_path))["graphs"] == {"4": {"captures": 2, "replays": 0},
                                                            "16": {"captures": 0, "replays": 3}}
    assert main(["analyze", prof.path]) == 0
    out = capsys.readouterr().out
    assert "graphs 16 were replayed but their captures are not in this file" in out
    assert "graphs 4 were captured more than once" in out
