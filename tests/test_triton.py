"""Triton kernel launches (docs/FORMAT.md, "Kernel launches"), under
Triton's interpreter on the CPU: a kernel of our own with several
constexprs, an autotuned one (a stand-in benchmark: the interpreter has no
GPU timer), and SGLang's own fused-MoE kernels through its own functions.
The oracle is what the tests passed to the kernels (tests/triton_child.py
computes it from its arguments), never our records."""
import json
import os

import pytest

from helpers import load, run_python, needs_sglang

pytest.importorskip("triton")

INTERPRET = {"TRITON_INTERPRET": "1"}
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_child.py")
OP = "triton:__main__.scale_add"


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    out = tmp_path_factory.mktemp("triton")
    r = run_python(f"import runpy, sys; sys.argv = ['child', {str(out)!r}]; "
                   f"runpy.run_path({CHILD!r}, run_name='__main__')", env_extra=INTERPRET, timeout=300,
                   cwd=str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def launches(path, op=OP):
    return [r for r in load(path) if r["operation"] == op]


def test_each_launch_in_a_pass_is_one_record_with_what_it_was_given(child):
    plain = child["plain"]
    recs = load(plain["path"])
    assert plain["result_ok"], "the kernels' results changed under the profiler"
    # only the three launches inside the pass, and nothing of the interpreter's own copies
    assert [r["operation"] for r in recs] == [OP] * 3
    for rec, want in zip(recs, plain["expected"]):
        assert rec["inputs"] == want["inputs"]
        assert rec["args"] == want["args"]
        assert rec["outputs"] is None and "error" not in rec
    assert recs[0]["phase"] == "decode" and {r["forward_pass"] for r in recs} == {1}


def test_a_timed_launch_has_its_own_time(child):
    """Each launch's record holds its time on the launching thread: more
    than nothing, at most what the caller waited for the launch."""
    t = child["timed"]
    recs = launches(t["path"])
    assert len(recs) == len(t["waited_ns"]) == 3
    for rec, waited in zip(recs, t["waited_ns"]):
        assert 0 < round(rec["time_us"] * 1000) <= waited


def test_outside_passes_the_launch_path_is_tritons_own(child):
    assert child["outside_is_triton_own"] and child["after_is_triton_own"]
    assert not child["inside_is_triton_own"]


def test_deduplication_keeps_every_distinct_launch_with_true_counts(child):
    d = child["dedupe"]
    recs = launches(d["path"])
    assert sorted(r["args"]["n"] for r in recs) == [50, 100]
    with open(d["path"].replace(".jsonl", "_summary.json")) as f:
        summary = json.load(f)
    assert summary["operation_counts"][OP] == sum(d["calls"].values())
    assert summary["dedupe_skipped_count"] == sum(d["calls"].values()) - 2
    from sgl_shapeprof.records.scan import scan
    counts = {s.args["n"]: s.count for s in scan(d["path"]).signatures.values() if s.operation == OP}
    assert counts == {100: d["calls"]["n=100"], 50: d["calls"]["n=50"]}


def test_a_launch_in_a_graph_capture_counts_once_per_replay(child):
    g = child["graph"]
    (rec,) = load(g["path"])
    assert (rec["operation"], rec["forward_pass"], rec["graph"], rec["phase"]) == (OP, 0, g["key"], "decode")
    from sgl_shapeprof.records.scan import scan
    (sig,) = scan(g["path"]).signatures.values()
    assert sig.count == g["replays"]


def test_kernels_of_one_name_keep_their_own_defaults(child):
    t = child["twins"]
    assert [r["args"]["K"] for r in launches(t["path"], t["operation"])] == t["K"]


def test_triton_imported_after_the_pass_began_is_recorded_from_its_import(tmp_path):
    """`sgl-shapeprof record` opens its whole-run pass before the script
    imports anything."""
    path = tmp_path / "late.jsonl"
    r = run_python(f"""
import torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler({str(path)!r})
with prof.forward_pass():
    import triton, triton.language as tl
    @triton.jit
    def late(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
    x = torch.zeros(8)
    late[(1,)](x, BLOCK=8)
prof.close()
""", env_extra=INTERPRET, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert [(r["operation"], r["args"]) for r in load(path) if r["operation"].startswith("triton:")] == [
        ("triton:__main__.late", {"BLOCK": 8, "grid": [1]})]


def test_an_unknown_object_is_written_by_its_type_never_str(monkeypatch):
    """A TensorDescriptor's str() would copy its tensor from the device:
    values the recorder does not know are handed over as they are (the
    native module writes their type's name)."""
    from sgl_shapeprof.recording import doors as hook

    class Descriptor:
        def __str__(self):
            raise AssertionError("str() called")
        __repr__ = __str__
    d = Descriptor()
    assert hook.launch_value(d) is d
    assert hook.launch_value((1, 2)) == (1, 2) and hook.launch_value(3.5) == 3.5


def test_a_launch_that_raised_is_recorded_with_its_error(child):
    e = child["error"]
    recs = launches(e["path"])
    assert len(recs) == 1 and recs[0]["outputs"] is None
    assert recs[0]["error"] == {"error_type": e["type"], "error_message": e["message"]}
    assert recs[0]["args"]["BLOCK"] == 30


def test_an_autotuned_launch_is_recorded_once_with_the_chosen_config(child):
    a = child["autotune"]
    assert a["benchmarks"] == 2, "the stand-in benchmark did not run once per config"
    recs = load(a["path"])
    first = [r for r in recs if r["forward_pass"] == 1]
    assert [r["operation"] for r in first] == ["triton:__main__.tuned_inc"]
    assert first[0]["inputs"] == {"x_ptr": a["x"]}
    assert first[0]["args"] == {"n": 64, "BLOCK": a["chosen"]["BLOCK"], "grid": a["grid"],
                                "num_warps": a["chosen"]["num_warps"],
                                "num_stages": a["chosen"]["num_stages"], "num_ctas": 1}
    # the control: the same benchmark run as the model's own work is recorded
    second = {r["operation"] for r in recs if r["forward_pass"] == 2}
    assert {"aten.empty.memory_format", "aten.zero_.default"} <= second


# -- SGLang's own kernels ---------------------------------------------------------
DEVICE = "NVIDIA_H100_80GB_HBM3"
MOE = "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels.fused_moe_kernel"
REDUCE = "triton:sglang.kernels.ops.moe.fused_moe_triton_kernels._moe_sum_reduce_kernel"


@pytest.fixture(scope="module")
def sglang_moe(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe")
    from helpers import ROOT, PKG_ROOT
    env = dict(INTERPRET, SGLANG_MOE_CONFIG_DIR=str(out / "cfg"), PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "tests", "sglang_env", "stubs"), PKG_ROOT]))
    r = run_python(f"import runpy, sys; sys.argv = ['child', {str(out)!r}, {DEVICE!r}]; "
                   f"runpy.run_path({os.path.join(os.path.dirname(CHILD), 'sglang_moe_child.py')!r}, "
                   f"run_name='__main__')", env_extra=env, timeout=300, cwd=str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    got["config_dir"] = str(out / "cfg")
    return got


@needs_sglang("0.5.23")
def test_sglang_fused_moe_launches_are_recorded_as_they_were_made(sglang_moe):
    recs = load(sglang_moe["path"])
    moe = [r for r in recs if r["operation"] == MOE]
    for layer in sglang_moe["layers"]:
        assert layer["max_error"] < 1e-4, "SGLang's kernel computed something else under the profiler"
        for gemm in ("up", "down"):
            want = layer[gemm]
            hits = [r for r in moe if r["inputs"] == want["inputs"]
                    and all(r["args"].get(k) == v for k, v in want["args"].items())]
            assert hits, f"no record of E={layer['E']} {gemm}: {json.dumps(want)}"
        reduce = [r for r in recs if r["operation"] == REDUCE and r["inputs"] == {
            "input_ptr": layer["reduce"]["input"], "output_ptr": layer["reduce"]["output"]}]
        assert reduce and all(r["args"]["num_warps"] == 16 and r["args"]["BLOCK_DIM"] == 2048 for r in reduce)


@needs_sglang("0.5.23")
def test_tune_says_which_config_each_fused_moe_launch_ran(sglang_moe, capsys, monkeypatch):
    from sgl_shapeprof.cli.main import main
    monkeypatch.setenv("SGLANG_MOE_CONFIG_DIR", sglang_moe["config_dir"])
    capsys.readouterr()
    assert main(["tune", sglang_moe["path"], "--device", DEVICE, "--json"]) == 0
    launches = json.loads(capsys.readouterr().out)["launches"]
    # the oracle: where SGLang's own try_get_optimal_moe_config took each layer's config
    verdict = {"file": "tuned", "default": "default", "given": "other"}
    for layer in sglang_moe["layers"]:
        for gemm in ("up", "down"):
            mine = [x for x in launches if x["E"] == layer["E"] and x["gemm"] == gemm
                    and x["top_k"] == layer["top_k"]
                    and x["launched"] == {k: v for k, v in layer["config"].items()}]
            assert len(mine) == 1, (layer["E"], gemm, launches)
            x = mine[0]
            assert (x["N"], x["m"]) == (sglang_moe["N"], sglang_moe["M"])
            assert not x["assumed"], x
            assert x["verdict"] == verdict[layer["source"]], x
            if layer["source"] == "file":
                assert x["file"] == sglang_moe["file"] and x["tuned_m"] == sglang_moe["tuned_m"]
            if layer["source"] == "default":
                assert x["expected"] == layer["config"]
    capsys.readouterr()
    assert main(["tune", sglang_moe["path"], "--device", DEVICE]) == 0
    text = capsys.readouterr().out
    assert "SGLang's default config: an untuned shape" in text
    assert "launches ran SGLang's default config" in text


@needs_sglang("0.5.23")
def test_gemm_and_cost_count_fused_moe_launches_as_gemms(sglang_moe, capsys):
    from sgl_shapeprof.cli.main import main
    capsys.readouterr()
    assert main(["gemm", sglang_moe["path"], "--json"]) == 0
    gs = [g for g in json.loads(capsys.readouterr().out) if g["operation"] == MOE]
    layer = sglang_moe["layers"][0]
    for gemm in ("up", "down"):
        a = layer[gemm]["args"]
        assert any((g["m"], g["n"], g["k"]) == (a["num_valid_tokens"], a["N"], a["K"])
                   and g["flops"] == 2 * a["num_valid_tokens"] * a["N"] * a["K"] for g in gs), gs
    capsys.readouterr()
    assert main(["cost", sglang_moe["path"], "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["operation"] == MOE]
    a = layer["up"]["args"]
    assert any(r["flops_per_call"] == 2 * a["num_valid_tokens"] * a["N"] * a["K"]
               and r["inputs"]["b_ptr"] == layer["up"]["inputs"]["b_ptr"] for r in rows), rows


def test_analyze_diff_and_report_show_launches_beside_operators(child, capsys, tmp_path):
    from sgl_shapeprof.cli.main import main
    plain, dedupe = child["plain"]["path"], child["dedupe"]["path"]
    capsys.readouterr()
    assert main(["analyze", plain, "--filter-op", "scale_add", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["calls"] == 3 and [o["operation"] for o in got["operations"]] == [OP]
    assert main(["diff", plain, dedupe]) == 1  # they differ (the exit status of diff(1))
    text = capsys.readouterr().out
    assert OP in text
    pytest.importorskip("plotly")  # report's extra (the GPU machine has none)
    out = tmp_path / "r.html"
    assert main(["report", plain, "-o", str(out)]) == 0
    assert OP in out.read_text()
