"""`sgl-shapeprof tune` on records the profiler writes (dedupe, phases, a
graph's replays) of an operator with the schema of SGLang's fused-MoE op,
and on config folders made here: which file is found, the M each call falls
back to, the coverage, the tuner's command line, --fail-under. Runs with or
without SGLang installed (with it, SGLang's own naming is used: the files
made here carry the name it gives; tests/sglang/test_tune_sglang.py checks that
naming against SGLang's own)."""
import csv
import io
import json
import os

import pytest
from helpers import run_python

from sgl_shapeprof.analysis import tune
from sgl_shapeprof.cli.main import main

# the schema of SGLang 0.5.23's inplace_fused_experts (argument names as the records carry them)
SCHEMA = ("inplace_fused_experts(Tensor(a!) hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, "
          "Tensor topk_ids, Tensor? b1=None, Tensor? b2=None, str activation='silu', bool is_gated=True, "
          "bool apply_router_weight_on_input=False, bool use_fp8_w8a8=False, bool use_int8_w8a8=False, "
          "bool use_int8_w8a16=False, bool use_int4_w4a16=False, bool per_channel_quant=False, "
          "Tensor? w1_scale=None, Tensor? w2_scale=None, Tensor? w1_zp=None, Tensor? w2_zp=None, "
          "Tensor? a1_scale=None, Tensor? a2_scale=None, int[]? block_shape=None) -> ()")

RECORD = r"""
import sys, json, torch, sgl_shapeprof
spec = json.loads(sys.argv[2])
lib = torch.library.Library("sglang", "FRAGMENT")
lib.define(spec["schema"])
lib.impl("inplace_fused_experts", lambda *a, **k: None, "CompositeExplicitAutograd")
E, N, K, P = spec["E"], spec["N"], spec["K"], spec.get("pad", 0)
wd = getattr(torch, spec["wdtype"])
w1 = torch.empty(E, 2 * N, K + P, dtype=wd); w2 = torch.empty(E, K, N + P, dtype=wd)  # P: SGLANG_MOE_PADDING
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1], dedupe=True, args=spec["args"])
def call(m):
    x = torch.zeros(m, K, dtype=torch.bfloat16)
    torch.ops.sglang.inplace_fused_experts(x, w1, w2, torch.zeros(m, 2), torch.zeros(m, 2, dtype=torch.int32),
        w1_scale=torch.ones(*spec["w1_scale"]) if spec["w1_scale"] else None, block_shape=spec["block"],
        **spec["flags"])
layers = spec.get("layers", 1)
for phase, m in spec["eager"]:
    with prof.forward_pass(phase):
        for _ in range(layers):
            call(m)
for bs, replays in spec["graphs"]:
    with prof.capture_graph(bs):
        for _ in range(layers):
            call(bs)
    # a count: replays without their real size; a list: each replay's real size
    for real in replays if isinstance(replays, list) else [None] * replays:
        with prof.forward_pass("decode"):
            prof.graph_replayed(bs, real=real)
for bs, reals in spec.get("uncaptured", []):  # replays of graphs captured before recording began
    for real in reals:
        with prof.forward_pass("decode"):
            prof.graph_replayed(bs, real=real)
prof.close()
"""

DEVICE = "NVIDIA_H200"
# prefill M 100 (x2), 300; decode eager M 3 (x2), 5; decode graph bs 8 replayed 5 times
EAGER = [["extend", 100], ["extend", 300], ["extend", 100], ["decode", 3], ["decode", 3], ["decode", 5]]
GRAPHS = [[8, 5]]


def record(path, E=8, N=64, K=32, wdtype="float8_e4m3fn", w1_scale=(8,), flags=None, block=None,
           args=False, eager=EAGER, graphs=GRAPHS, layers=1, pad=0, uncaptured=()):
    spec = dict(schema=SCHEMA, E=E, N=N, K=K, wdtype=wdtype, w1_scale=list(w1_scale) if w1_scale else None,
                flags=flags if flags is not None else {"use_fp8_w8a8": True}, block=block, args=args,
                eager=eager, graphs=graphs, layers=layers, pad=pad, uncaptured=list(uncaptured))
    r = run_python(RECORD, args=[str(path), json.dumps(spec)], cwd=os.path.dirname(str(path)))
    assert r.returncode == 0, r.stderr[-2000:]
    return str(path)


def config_name(E, N, dtype):
    """The name as it must be (tests/sglang/test_tune_sglang.py holds SGLang's equal)."""
    return f"E={E},N={N},device_name={DEVICE}" + (f",dtype={dtype}" if dtype else "") + ".json"


def write_config(folder, ms, E=8, N=64, dtype="fp8_w8a8"):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, config_name(E, N, dtype))
    with open(path, "w") as f:
        json.dump({str(m): {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
                   for m in ms}, f)
    return path


def run_json(capsys, *argv):
    capsys.readouterr()
    rc = main(["tune", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def fp8_records(tmp_path_factory):
    return record(tmp_path_factory.mktemp("rec") / "moe.jsonl")


def test_counts_phases_replays_and_fallback(fp8_records, tmp_path, capsys):
    cfg = write_config(str(tmp_path / "cfg"), [1, 4, 128, 256])
    rc, d = run_json(capsys, fp8_records, "--device", "H200", "--configs", str(tmp_path / "cfg"))
    assert rc == 0 and d["device"] == DEVICE
    [k] = d["keys"]
    assert (k["E"], k["N"], k["dtype"], k["block_shape"], k["per_channel_quant"]) == (8, 64, "fp8_w8a8", None, False)
    assert k["file"] == cfg and k["tuned_m"] == [1, 4, 128, 256] and k["hidden_size"] == 32
    rows = {(r["phase"], r["m"]): (r["calls"], r["tuned_m"], r["distance"]) for r in k["m"]}
    # true counts: deduplicated records, a graph's calls once per replay; extend is prefill
    assert rows == {("prefill", 100): (2, 128, 28), ("prefill", 300): (1, 256, 44),
                    ("decode", 3): (2, 4, 1), ("decode", 5): (1, 4, 1), ("decode", 8): (5, 4, 4)}
    c = d["coverage"]
    assert c["decode"] == {"calls": 8, "tuned": 8, "exact_m": 0, "other_m": 8, "default": 0,
                           "distance_calls": 2 * 1 + 1 + 5 * 4}
    assert c["all"]["calls"] == 11 and c["prefill"]["calls"] == 3
    [cmd] = d["tuner_commands"]
    # observed M, most called first (ties: smaller M first)
    assert cmd.endswith("--dtype fp8_w8a8 --tune --batch-sizes 8 3 100 5 300"), cmd
    assert cmd.startswith("python " + tune.TUNER + " --model MODEL")


def test_down_file(fp8_records, tmp_path, capsys):
    """The second GEMM's `_down` file, looked up beside the up file's; none:
    SGLang reuses the up config for it (said)."""
    up = write_config(str(tmp_path / "cfg"), [1, 4])
    base = [fp8_records, "--device", "H200", "--configs", str(tmp_path / "cfg")]
    _, d = run_json(capsys, *base)
    assert d["keys"][0]["file"] == up and d["keys"][0]["down_file"] is None
    assert main(["tune", *base]) == 0
    assert "down GEMM: no " in capsys.readouterr().out
    down = up[:-len(".json")] + "_down.json"
    with open(down, "w") as f:
        json.dump({"8": {"BLOCK_SIZE_M": 16}}, f)
    _, d = run_json(capsys, *base)
    assert d["keys"][0]["file"] == up and d["keys"][0]["down_file"] == down and d["keys"][0]["down_tuned_m"] == [8]
    assert main(["tune", *base]) == 0
    assert f"down GEMM: {down}" in capsys.readouterr().out


@pytest.mark.parametrize("args", [False, True])
def test_moe_padding(tmp_path, capsys, args):
    """SGLANG_MOE_PADDING=1: w13 and w2 are 128 wider along K and N, and
    SGLang names the config by the unpadded N (fp8/int8 w8a8 without blocks)."""
    path = record(tmp_path / "pad.jsonl", N=64, pad=128, args=args, eager=EAGER[:1], graphs=[])
    _, d = run_json(capsys, path, "--device", "H200", "--configs", str(tmp_path))
    [k] = d["keys"]
    assert (k["E"], k["N"], k["hidden_size"]) == (8, 64, 32)
    assert any("SGLANG_MOE_PADDING" in a for a in k["assumed"])
    # block-wise keys are never padded: N is w2's
    path = record(tmp_path / "block.jsonl", N=256, K=256, pad=0, w1_scale=(8, 4, 2), block=[128, 128],
                  eager=EAGER[:1], graphs=[])
    _, d = run_json(capsys, path, "--device", "H200", "--configs", str(tmp_path))
    assert d["keys"][0]["N"] == 256 and not any("PADDING" in a for a in d["keys"][0]["assumed"])


def test_exact_m_and_text(fp8_records, tmp_path, capsys):
    write_config(str(tmp_path / "cfg"), [3, 5, 8, 100, 300])
    rc, d = run_json(capsys, fp8_records, "--device", "NVIDIA H200", "--configs", str(tmp_path / "cfg"))
    assert d["coverage"]["all"]["exact_m"] == 11 and d["tuner_commands"] == []
    assert main(["tune", fp8_records, "--device", "H200", "--configs", str(tmp_path / "cfg"),
                 "--model", "/models/mix", "--tp-size", "2", "--ep-size", "1"]) == 0
    out = capsys.readouterr().out
    assert "decode: 8 calls; 100.0% on tuned configs, 100.0% on one tuned for their own M" in out
    assert "tune the keys" not in out


def test_not_tuned_and_fail_under(fp8_records, tmp_path, capsys):
    write_config(str(tmp_path / "cfg"), [1], E=16)   # another key
    base = [fp8_records, "--device", "H200", "--configs", str(tmp_path / "cfg")]
    rc, d = run_json(capsys, *base)
    cov = d["coverage"]["all"]
    # in SGLang's venv its shipped folder is looked in too: no file there has E=8,N=64
    assert d["keys"][0]["file"] is None and cov["tuned"] == 0 and cov["default"] == 11
    assert main(["tune", *base, "--fail-under", "1"]) == 1
    assert main(["tune", *base, "--fail-under", "0"]) == 0
    assert main(["tune", *base, "--model", "/m", "--tp-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "NOT TUNED" in out and "--model /m --tp-size 4 --dtype fp8_w8a8 --tune --batch-sizes 8 3 100 5 300" in out
    write_config(str(tmp_path / "cfg"), [4])
    assert main(["tune", *base, "--fail-under", "100"]) == 0


def test_partial_coverage_is_per_call(tmp_path, capsys):
    """Two keys: one tuned, one not; the share is of calls, not keys."""
    a = record(tmp_path / "a.jsonl", eager=[["decode", 2]] * 3, graphs=[])
    b = record(tmp_path / "b.jsonl", N=96, eager=[["decode", 2]], graphs=[])
    write_config(str(tmp_path / "cfg"), [2])
    rc, d = run_json(capsys, a, b, "--device", "H200", "--configs", str(tmp_path / "cfg"))
    assert [(k["N"], k["calls"], k["file"] is not None) for k in d["keys"]] == [(64, 3, True), (96, 1, False)]
    assert d["coverage"]["all"]["tuned"] == 3 and d["coverage"]["all"]["calls"] == 4
    assert main(["tune", a, b, "--device", "H200", "--configs", str(tmp_path / "cfg"), "--fail-under", "75"]) == 0
    assert main(["tune", a, b, "--device", "H200", "--configs", str(tmp_path / "cfg"), "--fail-under", "76"]) == 1


def test_triton_version_folders(fp8_records, tmp_path, capsys):
    """SGLANG_MOE_CONFIG_DIR's layout: the running Triton's folder first,
    then the others newest first."""
    root = tmp_path / "root"
    old = write_config(str(root / "configs" / "triton_3_1_0"), [1, 2])
    new = write_config(str(root / "configs" / "triton_3_4_0"), [64])
    os.makedirs(root / "configs" / "triton_3_10_0")  # newest, empty: 3.10 > 3.4 as numbers
    base = [fp8_records, "--device", "H200", "--configs", str(root)]
    _, d = run_json(capsys, *base, "--triton", "3.1.0")
    k = d["keys"][0]
    assert (k["file"], k["file_triton"], k["other_triton_version"], k["tuned_m"]) == (old, "3.1.0", False, [1, 2])
    _, d = run_json(capsys, *base, "--triton", "3.9.0")
    k = d["keys"][0]
    assert (k["file"], k["file_triton"], k["other_triton_version"]) == (new, "3.4.0", True)
    assert tune.search_order(str(root), "3.1.0")[0][0] == "3.1.0"
    assert [v for v, _ in tune.search_order(str(root), None)] == ["3.10.0", "3.4.0", "3.1.0"]


def test_csv(fp8_records, tmp_path, capsys):
    write_config(str(tmp_path / "cfg"), [4])
    capsys.readouterr()
    assert main(["tune", fp8_records, "--device", "H200", "--configs", str(tmp_path / "cfg"), "--csv",
                 "--triton", "3.4.0"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 5 and set(rows[0]) == set(tune.CSV_FIELDS)
    r = next(r for r in rows if r["m"] == "300")
    assert (r["phase"], r["calls"], r["tuned_m"], r["distance"], r["device"], r["triton"]) == \
        ("prefill", "1", "4", "296", DEVICE, "3.4.0")


def test_keys_from_arguments_and_inferred(tmp_path, capsys):
    """With --args the flags and block shape are read; without, inferred
    from dtypes and scale shapes, and said to be."""
    one = [["decode", 4]]
    w8a16 = record(tmp_path / "a.jsonl", wdtype="int8", w1_scale=(8, 128), flags={"use_int8_w8a16": True},
                   args=True, eager=one, graphs=[])
    guess = record(tmp_path / "b.jsonl", wdtype="int8", w1_scale=(8, 128), flags={"use_int8_w8a16": True},
                   eager=one, graphs=[])
    block = record(tmp_path / "c.jsonl", N=256, K=512, w1_scale=(8, 4, 4), block=[128, 128], eager=one, graphs=[])
    block_args = record(tmp_path / "d.jsonl", N=256, K=512, w1_scale=(8, 4, 4), block=[128, 128], args=True,
                        eager=one, graphs=[])
    os.makedirs(tmp_path / "cfg")
    keys = {}
    for name, path in (("w8a16", w8a16), ("guess", guess), ("block", block), ("block_args", block_args)):
        _, d = run_json(capsys, path, "--device", "H200", "--configs", str(tmp_path / "cfg"))
        keys[name] = d["keys"][0]
    assert keys["w8a16"]["dtype"] == "int8_w8a16" and not keys["w8a16"]["assumed"]
    assert keys["guess"]["dtype"] == "int8_w8a8" and any("int8_w8a16" in a for a in keys["guess"]["assumed"])
    assert keys["guess"]["per_channel_quant"] is True   # w1_scale (E, 2N): per channel
    assert keys["block"]["block_shape"] == [128, 128] and any("block shape" in a for a in keys["block"]["assumed"])
    assert keys["block_args"]["block_shape"] == [128, 128] and not keys["block_args"]["assumed"]
    assert keys["block"]["N"] == 256 and keys["block"]["hidden_size"] == 512


def test_parse_file_name_and_device():
    k, dev, down = tune.parse_file_name(
        "E=256,N=256,device_name=NVIDIA_H20,dtype=fp8_w8a8,block_shape=[128, 128]_down.json")
    assert (k, dev, down) == (tune.MoeKey(256, 256, "fp8_w8a8", (128, 128), False), "NVIDIA_H20", True)
    k, dev, down = tune.parse_file_name("E=8,N=7168,device_name=AMD_Instinct_MI300X,per_channel_quant=True.json")
    assert (k.dtype, k.per_channel_quant, dev, down) == (None, True, "AMD_Instinct_MI300X", False)
    assert tune.parse_file_name("README.md") is None and tune.parse_file_name("x=1.json") is None
    known = ["NVIDIA_H20", "NVIDIA_H200", "NVIDIA_H100_80GB_HBM3"]
    assert tune.resolve_device("H200", known) == "NVIDIA_H200"
    assert tune.resolve_device("nvidia h20", known) == "NVIDIA_H20"
    assert tune.resolve_device("B300", known) == "B300"
    with pytest.raises(ValueError, match="several"):
        tune.resolve_device("H200", known + ["AMD_H200"])


def test_errors(fp8_records, tmp_path, capsys):
    assert main(["tune", fp8_records, "--device", "H200", "--fail-under", "101"]) == 2
    assert "--fail-under takes a percentage" in capsys.readouterr().err
    bad = tmp_path / "cfg"
    os.makedirs(bad)
    (bad / config_name(8, 64, "fp8_w8a8")).write_text("[1, 2]")
    assert main(["tune", fp8_records, "--device", "H200", "--configs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sgl-shapeprof tune: ") and "not a kernel config file" in err and err.count("\n") == 1
    empty = tmp_path / "none.jsonl"
    empty.write_text('{"call_id": 1, "forward_pass": 1, "operation": "aten.relu.default", "inputs": {}, '
                     '"outputs": null}\n')
    assert main(["tune", str(empty), "--device", "H200", "--configs", str(bad)]) == 0
    out = capsys.readouterr().out
    assert "no fused-MoE calls" in out and "--cuda-graph-bs" not in out  # no decode pass sized: no hint
    assert main(["tune", str(empty), "--device", "H200", "--configs", str(bad), "--fail-under", "50"]) == 2


@pytest.mark.skipif(tune.sglang_config_module() is not None, reason="SGLang is importable here")
def test_without_sglang_needs_configs(fp8_records, capsys):
    assert main(["tune", fp8_records, "--device", "H200"]) == 2
    err = capsys.readouterr().err
    assert "needs SGLang importable" in err and "--configs DIR" in err


# -- TunableOp: strides, results files ----------------------------------------

GEMMS = r"""
import sys, torch, sgl_shapeprof
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1], args=sys.argv[2] == "args", dedupe=True)
bf = torch.bfloat16
W = torch.randn(256, 128, dtype=bf); X = torch.randn(64, 200, dtype=bf)
with torch.inference_mode():
    for _ in range(3):
        with prof.forward_pass("decode"):
            torch.mm(torch.randn(64, 128, dtype=bf), W.t())            # a transposed weight view
            torch.mm(X[:, :128], torch.randn(128, 256, dtype=bf))      # a column slice: ld 200
            torch.mm(torch.randn(128, 64, dtype=bf).t(), torch.randn(128, 256, dtype=bf))  # column-major A
            torch.nn.functional.linear(torch.randn(2, 32, 128, dtype=bf), W)
prof.close()
"""


def gemm_records(tmp_path, args):
    path = str(tmp_path / f"g_{args}.jsonl")
    r = run_python(GEMMS, args=[path, args], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    return path


def test_tunableop_entries_from_strides(tmp_path, capsys):
    """With --args the layouts and leading dimensions are torch's addmm's
    (prepare_matrix_for_cublas); without, contiguous is assumed."""
    untuned = tmp_path / "u.csv"
    assert main(["gemm", gemm_records(tmp_path, "args"), "--tunableop", str(untuned)]) == 0
    assert sorted(untuned.read_text().splitlines()) == sorted([
        "GemmTunableOp_BFloat16_TN,tn_256_64_128_ld_128_128_256",   # W.t(): T, ld = W's row length
        "GemmTunableOp_BFloat16_NN,nn_256_64_128_ld_256_200_256",   # A's ld is X's row length
        "GemmTunableOp_BFloat16_NT,nt_256_64_128_ld_256_64_256",    # A column-major: T, ld 64
    ])
    assert "assume contiguous" not in capsys.readouterr().err
    assumed = tmp_path / "a.csv"
    assert main(["gemm", gemm_records(tmp_path, "shapes"), "--tunableop", str(assumed)]) == 0
    # without strides the three mm are one shape, taken as contiguous: one line, said to be assumed
    assert sorted(assumed.read_text().splitlines()) == sorted([
        "GemmTunableOp_BFloat16_NN,nn_256_64_128_ld_256_128_256",
        "GemmTunableOp_BFloat16_TN,tn_256_64_128_ld_128_128_256"])   # linear's weight is always TN
    assert "(1 assume contiguous operands" in capsys.readouterr().err


def test_tunableop_lines_round_trip_through_torch(tmp_path, monkeypatch):
    """torch.cuda.tunable's offline tuner parses each line and builds the
    matrices it names (_process_single_offline_gemm): on CPU, the mm it
    runs is recorded again, and its line is the line it was made from."""
    import torch
    import torch.cuda.tunable as tunable
    lines = ["GemmTunableOp_BFloat16_TN,tn_256_64_128_ld_128_128_256",
             "GemmTunableOp_BFloat16_NN,nn_256_64_128_ld_256_200_256",
             "GemmTunableOp_BFloat16_NT,nt_256_64_128_ld_256_64_256",
             "GemmTunableOp_float_TT,tt_48_32_16_ld_16_32_48"]
    made = []
    create = tunable._create_matrices
    monkeypatch.setattr(tunable, "_create_matrices", lambda *a, **k: create(*a[:9], "cpu", *a[10:], **k))
    monkeypatch.setattr(torch, "mm", lambda a, b: made.append((a, b)))
    monkeypatch.setattr(torch.cuda, "set_device", lambda *a: None)   # torch 2.14+ selects the GPU first
    for line in lines:
        tunable._process_single_offline_gemm(line, 0)
    monkeypatch.undo()
    assert len(made) == len(lines)
    from sgl_shapeprof import ShapeProfiler
    prof = ShapeProfiler(str(tmp_path / "rt.jsonl"), args=True)
    with prof.forward_pass():
        for a, b in made:
            torch.mm(a, b)
    prof.close()
    from sgl_shapeprof.analysis.analyze import analyze_file
    from sgl_shapeprof.analysis.gemm import gemms
    from sgl_shapeprof.analysis.tunableop import entry
    got = sorted(entry(g)[0] for g in gemms(analyze_file(prof.path).signatures))
    assert got == sorted(lines)


def test_tunableop_results_coverage(tmp_path, capsys):
    recs = gemm_records(tmp_path, "args")
    res = tmp_path / "tunableop_results0.csv"
    res.write_text("Validator,PT_VERSION,2.13.0\nValidator,ROCBLAS_VERSION,4.0\n"
                   "GemmTunableOp_BFloat16_TN,tn_256_64_128_ld_128_128_256,Gemm_Rocblas_1234,0.0123\n")
    base = [recs, "--device", "H200", "--configs", str(tmp_path)]
    rc, d = run_json(capsys, *base, "--tunableop-results", str(res))
    t = d["tunableop"]
    # mm with W.t() and linear are the same GEMM to TunableOp: 6 of the 12 calls
    assert (t["calls"], t["tuned_calls"]) == (12, 6)
    assert {g["entry"]: g["kernel"] for g in t["gemms"]}["GemmTunableOp_BFloat16_TN,tn_256_64_128_ld_128_128_256"] \
        == "Gemm_Rocblas_1234"
    out = tmp_path / "todo.csv"
    assert main(["tune", *base, "--tunableop-results", str(res), "--tunableop-untuned", str(out),
                 "--fail-under", "50"]) == 0
    assert sorted(out.read_text().splitlines()) == ["GemmTunableOp_BFloat16_NN,nn_256_64_128_ld_256_200_256",
                                                    "GemmTunableOp_BFloat16_NT,nt_256_64_128_ld_256_64_256"]
    assert main(["tune", *base, "--tunableop-results", str(res), "--fail-under", "51"]) == 1
    assert "50.0% of GEMM calls TunableOp tunes" in capsys.readouterr().err
    res.write_text("Validator,PT_VERSION,2.13.0\nnot,a,results,line\n")
    assert main(["tune", *base, "--tunableop-results", str(res)]) == 2
    assert "line 2 is not a TunableOp results entry" in capsys.readouterr().err


# -- block-quantized GEMMs ---------------------------------------------------

BLOCK = r"""
import sys, types, torch, sgl_shapeprof
from sgl_shapeprof.integrations.sglang import block_gemm
ran = []
def w8a8_block_fp8_matmul_triton(A, B, As, Bs, block_size, output_dtype=torch.float16):
    ran.append(A.shape[0])
    return torch.empty(A.shape[0], B.shape[0], dtype=output_dtype)
mod = types.SimpleNamespace(w8a8_block_fp8_matmul_triton=w8a8_block_fp8_matmul_triton)
block_gemm.patch_quantization_module(mod)
block_gemm.patch_quantization_module(mod)   # twice: wrapped once
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1], dedupe=True, args=sys.argv[2] == "args")
N, K = 384, 512
B = torch.empty(N, K, dtype=torch.float8_e4m3fn); Bs = torch.ones(3, 4)
def call(m):
    return mod.w8a8_block_fp8_matmul_triton(torch.empty(m, K, dtype=torch.float8_e4m3fn), B, torch.ones(m, 4),
                                            Bs, [128, 128], output_dtype=torch.bfloat16)
call(7)                                   # outside a pass: runs, not recorded
for phase, m in [("extend", 300), ("decode", 4), ("decode", 4), ("decode", 6)]:
    with prof.forward_pass(phase):
        assert call(m).shape == (m, N)
prof.close()
print(ran)
"""


def test_block_gemm_marker_and_coverage(tmp_path, capsys):
    path = str(tmp_path / "b.jsonl")
    r = run_python(BLOCK, args=[path, "shapes"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["[7,", "300,", "4,", "4,", "6]"]  # the kernel ran every time
    recs = [json.loads(x) for x in open(path)]
    marks = [x for x in recs if x["operation"] == "sgl_shapeprof.sglang_w8a8_block_fp8_matmul.default"]
    assert [m["inputs"]["A"]["shape"][0] for m in marks] == [300, 4, 6]   # deduplicated, in passes only
    cfg = tmp_path / "cfg"
    os.makedirs(cfg)
    (cfg / f"N=384,K=512,device_name={DEVICE},dtype=fp8_w8a8,block_shape=[128, 128].json").write_text(
        json.dumps({"1": {}, "8": {}, "256": {}}))
    (cfg / f"N=384,K=512,device_name={DEVICE},dtype=fp8_w8a8,block_shape=[64, 64].json").write_text("{}")
    rc, d = run_json(capsys, path, "--device", "H200", "--configs", str(cfg))
    [k] = d["block_gemm"]["keys"]
    assert (k["N"], k["K"], k["block_shape"], k["dtype"]) == (384, 512, [128, 128], "fp8_w8a8")
    assert os.path.basename(k["file"]).endswith("block_shape=[128, 128].json") and k["tuned_m"] == [1, 8, 256]
    assert any("inferred from Bs" in a for a in k["assumed"])
    assert {(x["phase"], x["m"]): (x["calls"], x["tuned_m"]) for x in k["m"]} == {
        ("prefill", 300): (1, 256), ("decode", 4): (2, 1), ("decode", 6): (1, 8)}
    assert d["block_gemm"]["coverage"]["all"]["tuned"] == 4 and d["keys"] == []
    assert main(["tune", path, "--device", "H200", "--configs", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "N=384 K=512 block=128x128 fp8_w8a8: 4 6 300" in out
    os.unlink(cfg / f"N=384,K=512,device_name={DEVICE},dtype=fp8_w8a8,block_shape=[128, 128].json")
    assert main(["tune", path, "--device", "H200", "--configs", str(cfg), "--fail-under", "1"]) == 1
    assert "0.0% of block-GEMM calls" in capsys.readouterr().err


def test_cuda_graph_bs(fp8_records, tmp_path, capsys):
    """Graph 8 replayed 5 times; eager decode at batch 3 (2 calls) and 5 (1)."""
    rc, d = run_json(capsys, fp8_records, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "60")
    g = d["cuda_graph_bs"]
    assert g["replays"] == {"8": 5} and g["unused"] == [] and g["eager_decode"] == {"3": 2, "5": 1}
    assert g["suggested"] == [3]   # 2 of 3 calls >= 60%
    assert g["padding_now"] == pytest.approx(1 - (2 * 3 + 5) / (3 * 8))   # both padded to 8
    assert g["padding_suggested"] == 0.0
    _, d = run_json(capsys, fp8_records, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs")
    assert d["cuda_graph_bs"]["suggested"] == [3, 5] and d["cuda_graph_bs"]["share"] == 95
    assert g["real_unknown"] == 5 and g["graphs"][0]["padding"] is None
    assert main(["tune", fp8_records, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs"]) == 0
    out = capsys.readouterr().out
    assert "--cuda-graph-bs covering 95% of them: 3 5" in out
    assert "5 replays without their real batch size" in out
    assert main(["tune", fp8_records, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "120"]) == 2


def test_cuda_graph_bs_real_sizes(tmp_path, capsys):
    """Replays that know the batch they padded: each graph's own padding,
    and the real sizes weighed against the eager calls in one unit (two
    fused-MoE layers: a replay stands for two calls)."""
    reals = {8: [5, 5, 8, 6], 16: [9, 12], 32: []}
    path = record(tmp_path / "real.jsonl", layers=2, graphs=[[b, r] for b, r in reals.items()])
    rc, d = run_json(capsys, path, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "60")
    g = d["cuda_graph_bs"]
    assert g["unused"] == [32] and g["real_unknown"] == 0 and g["unit"] == "fused-MoE calls"
    # a graph never replayed ran no call: not an M to tune
    assert 32 not in [r["m"] for r in d["keys"][0]["m"]] and " 32" not in d["tuner_commands"][0]
    for x in g["graphs"]:
        got = reals[x["size"]]
        assert x["replays"] == x["real_known"] == len(got)
        if got:
            assert x["mean_real"] == pytest.approx(sum(got) / len(got))
            assert x["padding"] == pytest.approx(1 - sum(got) / (x["size"] * len(got)))
    # the oracle: every decode pass's real batch size, two calls each
    passes = [m for phase, m in EAGER if phase == "decode"] + [r for rs in reals.values() for r in rs]
    want = {}
    for b in passes:
        want[str(b)] = want.get(str(b), 0) + 2
    assert g["batch_sizes"] == want
    assert g["suggested"] == [3, 5, 6]   # 5 (6 calls), 3 (4), then 6 reaches 60% of 18
    up = {b: min(s for s in reals if s >= b) for b in passes}
    assert g["padding_now"] == pytest.approx(1 - sum(passes) / sum(up[b] for b in passes))
    assert main(["tune", path, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "60"]) == 0
    out = capsys.readouterr().out
    assert "captured, never replayed: 32" in out
    assert f"{8:>10}  {4:>8,}  {4:>16,}  {6.0:>15.1f}  {25.0:>7.1f}%" in out
    assert "--cuda-graph-bs covering 60% of them: 3 5 6" in out and "without their real batch size" not in out


def test_cuda_graph_bs_uncaptured_graphs(tmp_path, capsys):
    """Replays of a graph whose capture is not in the records (an on-request
    recording, say) weigh what the recorded graphs' do; with none recorded
    they cannot be weighed against eager calls, and are said to be left out."""
    base = ["--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "100"]
    path = record(tmp_path / "u1.jsonl", layers=2, graphs=[[8, [6]]], uncaptured=[[16, [10, 12]]])
    _, d = run_json(capsys, path, *base)
    g = d["cuda_graph_bs"]
    assert g["unweighed"] == [] and g["batch_sizes"]["10"] == g["batch_sizes"]["12"] == 2   # 2 calls a replay
    path = record(tmp_path / "u2.jsonl", layers=2, graphs=[], uncaptured=[[16, [10, 12]]])
    _, d = run_json(capsys, path, *base)
    g = d["cuda_graph_bs"]
    assert g["unweighed"] == [16] and "10" not in g["batch_sizes"] and g["batch_sizes"]   # the eager calls stay
    assert main(["tune", path, *base]) == 0
    assert "left out: the replays of sizes 16" in capsys.readouterr().out


def test_report_coverage_section(fp8_records, tmp_path, capsys):
    pytest.importorskip("plotly")
    write_config(str(tmp_path / "cfg"), [3, 5, 8])   # decode M exact; prefill M 100, 300 fall back to 8
    out = tmp_path / "r.html"
    assert main(["report", fp8_records, "-o", str(out), "--tune-device", "H200", "--configs",
                 str(tmp_path / "cfg")]) == 0
    page = out.read_text()
    assert f"Tuned-config coverage on {DEVICE}" in page
    assert "decode: 8 calls, 100% own M; prefill: 3 calls, 0% own M" in page
    assert config_name(8, 64, "fp8_w8a8") in page
    plain = tmp_path / "p.html"
    assert main(["report", fp8_records, "-o", str(plain)]) == 0
    assert "Tuned-config coverage" not in plain.read_text()
    capsys.readouterr()
    assert main(["report", fp8_records, "-o", str(tmp_path / "x.html"), "--configs", str(tmp_path)]) == 2
    assert "--configs goes with --tune-device" in capsys.readouterr().err


DENSE = r"""
import sys, torch, sgl_shapeprof
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1])
w = torch.zeros(16, 8)
def forward(rows):
    torch.mm(torch.zeros(rows, 16), w)
assert not prof.pass_size(3)  # no pass open: nothing to size
for size in (3, 3, 5, 7):  # eager decode passes of a dense model: no fused-MoE call to read M from
    with prof.forward_pass("decode"):
        assert prof.pass_size(size)
        forward(size)
with prof.forward_pass("extend"):  # prefill: not a decode batch
    prof.pass_size(2)
    forward(40)
with prof.capture_graph(8):
    forward(8)
for real in (6, 8):  # replays: counted under their graph, not as eager passes
    with prof.forward_pass("decode"):
        prof.pass_size(real)
        prof.graph_replayed(8, real=real)
prof.close()
"""


def test_cuda_graph_bs_eager_decode_passes_of_a_dense_model(tmp_path, capsys):
    """A dense model's decode passes that ran eagerly, by the batch size the
    server gave each (the summary's eager_sizes), weighed one pass each
    beside the graphs' replays. The oracle is the sizes the script gave."""
    path = str(tmp_path / "dense.jsonl")
    r = run_python(DENSE, args=[path])
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.load(open(str(tmp_path / "dense_summary.json")))["eager_sizes"] == {
        "decode": {"3": 2, "5": 1, "7": 1}, "extend": {"2": 1}}
    _, d = run_json(capsys, path, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "100")
    g = d["cuda_graph_bs"]
    assert g["unit"] == "passes" and g["eager_decode"] == {"3": 2, "5": 1, "7": 1}
    assert g["batch_sizes"] == {"3": 2, "5": 1, "6": 1, "7": 1, "8": 1}
    assert g["suggested"] == [3, 5, 6, 7, 8]
    _, d = run_json(capsys, path, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "50")
    assert d["cuda_graph_bs"]["suggested"] == [3, 5]  # 2 + 1 of 6 passes: half
    assert main(["tune", path, "--device", "H200", "--configs", str(tmp_path), "--cuda-graph-bs", "100"]) == 0
    out = capsys.readouterr().out
    assert "real decode batch sizes, 6 decode passes (4 eager, 2 graph replays): 3:2, 5:1, 6:1, 7:1, 8:1" in out
    assert main(["tune", path, "--device", "H200", "--configs", str(tmp_path)]) == 0  # no MoE: says where to look
    assert capsys.readouterr().out.endswith("the decode batch sizes that ran, and the CUDA-graph sizes that cover "
                                            "them: --cuda-graph-bs\n")
