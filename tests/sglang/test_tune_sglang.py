"""`sgl-shapeprof tune` against SGLang 0.5.23 itself (make test-sglang):
records of SGLang's real fused-MoE custom ops (its own register_custom_op
schemas, called through the dispatcher on CPU inside logged passes: they
record, then raise NotImplementedError), with bf16, fp8 (per-tensor and
block-wise), int8 (w8a16 and per-channel w8a8) weights, several M in
prefill and decode (eager, and CUDA-graph captures with replays); then
the command's file names must be SGLang's own get_config_file_name for the
same keys with the device name set, its dtype strings SGLang's
get_config_dtype_str, its covered / not covered SGLang's get_moe_configs,
and the config each call runs SGLang's try_get_optimal_moe_config, over
SGLang's real shipped config files."""
import json
import os
import subprocess
import sys

import pytest
from helpers import PKG_ROOT, ROOT, needs_sglang, run_python

needs_sglang = needs_sglang("0.5.23")
pytestmark = needs_sglang

ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
       "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "tests", "sglang_env", "stubs"), PKG_ROOT])}

# (what, op, E, N, K, weight dtype, flags, block shape, w1_scale shape(E, N, K))
# keys chosen so that SGLang 0.5.23 ships files for some of them on the
# devices below (in the running Triton's folder and in older ones) and not others
CASES = [
    ("bf16", "inplace", 8, 7168, 4096, "bfloat16", {}, None, None),
    ("bf16 with a down file", "inplace", 16, 4096, 1024, "bfloat16", {}, None, None),
    ("fp8", "outplace", 8, 7168, 4096, "float8_e4m3fn", {"use_fp8_w8a8": True}, None, "tensor"),
    ("fp8 block", "inplace", 72, 2048, 4096, "float8_e4m3fn", {"use_fp8_w8a8": True}, [128, 128], "block"),
    ("int8 w8a16", "inplace", 16, 3072, 4096, "int8", {"use_int8_w8a16": True}, None, "channel"),
    ("int8 w8a8 per-channel", "inplace", 8, 96, 256, "int8", {"use_int8_w8a8": True, "per_channel_quant": True},
     None, "channel"),
]
PREFILL = [37, 512, 1000, 37]
DECODE = [1, 3, 3]
GRAPHS = {8: 6, 16: 2}   # batch size -> replays
DEVICES = ["H200", "NVIDIA H100 80GB HBM3"]   # a unique end of a shipped name; SGLang's own spelling

RECORD = r"""
import sys, json, torch, sgl_shapeprof
import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe  # registers sglang::*_fused_experts
cases, prefill, decode, graphs = json.loads(sys.argv[2])
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1], dedupe=True, args=sys.argv[3] == "args")
raised = set()
def big(*shape, dtype):   # the shape without the memory: records hold shapes
    return torch.zeros([1] * len(shape), dtype=dtype).expand(*shape)
def call(case, m):
    what, op, E, N, K, wd, flags, block, scale = case
    wd = getattr(torch, wd)
    w1, w2 = big(E, 2 * N, K, dtype=wd), big(E, K, N, dtype=wd)
    kw = dict(flags)
    if scale == "tensor":
        kw.update(w1_scale=torch.ones(E), w2_scale=torch.ones(E))
    elif scale == "channel":
        kw.update(w1_scale=torch.ones(E, 2 * N), w2_scale=torch.ones(E, K))
    elif scale == "block":
        kw.update(w1_scale=torch.ones(E, -(-2 * N // block[0]), -(-K // block[1])),
                  w2_scale=torch.ones(E, -(-K // block[0]), -(-N // block[1])), block_shape=block)
    x = torch.zeros(m, K, dtype=torch.bfloat16)
    f = getattr(torch.ops.sglang, op + "_fused_experts")
    try:
        f(x, w1, w2, torch.zeros(m, 8), torch.zeros(m, 8, dtype=torch.int32), **kw)
    except Exception as e:
        raised.add(type(e).__name__)
for m in prefill:
    with prof.forward_pass("extend"):
        for c in cases: call(c, m)
for m in decode:
    with prof.forward_pass("decode"):
        for c in cases: call(c, m)
for bs, n in graphs.items():
    with prof.capture_graph(int(bs)):
        for c in cases: call(c, int(bs))
    for _ in range(n):
        with prof.forward_pass("decode"):
            prof.graph_replayed(int(bs))
prof.close()
print(json.dumps(sorted(raised)))
"""

# SGLang's own answers for the keys the command reported
SGLANG = r"""
import sys, json, types, torch
from unittest import mock
from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as c
report, cases = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
out = []
exec_ctx = types.SimpleNamespace(deterministic=types.SimpleNamespace(enable_deterministic_inference=False))
with mock.patch.object(c, "get_device_name", lambda *a, **k: report["device"]), \
     mock.patch.object(c, "get_exec", lambda: exec_ctx):
    c.get_moe_configs.cache_clear()
    for case in cases:
        what, op, E, N, K, wd, flags, block, scale = case
        dflags = {f: v for f, v in flags.items() if f != "per_channel_quant"}
        dtype = c.get_config_dtype_str(torch.bfloat16, **dflags)
        per_channel = bool(flags.get("per_channel_quant"))
        name = c.get_config_file_name(E, N, dtype, block, per_channel)
        configs = c.get_moe_configs(E, N, dtype, block[0] if block else 0, block[1] if block else 0,
                                    per_channel_quant=per_channel)
        down_name = c.get_config_file_name(E, N, dtype, block, per_channel, down_moe=True)
        down = c.get_moe_configs(E, N, dtype, block[0] if block else 0, block[1] if block else 0,
                                 per_channel_quant=per_channel, down_moe=True)
        ms = sorted({r["m"] for k in report["keys"] for r in k["m"]})
        run = {str(m): c.try_get_optimal_moe_config((E, 2 * N, K), (E, K, N), 8, dtype, m,
                                                    block_shape=block, per_channel_quant=per_channel)
               for m in ms}
        default = {str(m): c.get_default_config(m, E, N, K, 8, dtype, False, block) for m in ms}
        out.append({"what": what, "key": [E, N, K, dtype, block, per_channel], "name": name,
                    "configs": None if configs is None else {str(m): v for m, v in configs.items()},
                    "down_name": down_name, "down": None if down is None else {str(m): v for m, v in down.items()},
                    "run": run, "default": default})
print(json.dumps(out))
"""


def tune_json(*argv):
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "tune", *argv, "--json"], capture_output=True,
                       text=True, env=dict(os.environ, **ENV), timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe")
    paths = []
    for rank, mode in ((0, "args"), (1, "shapes")):
        path = str(d / f"shapes.rank{rank}.jsonl")
        r = run_python(RECORD, env_extra=ENV, timeout=300, cwd=str(d),
                       args=[path, json.dumps([CASES, PREFILL, DECODE, GRAPHS]), mode])
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout.strip().splitlines()[-1]) == ["NotImplementedError"], r.stdout
        paths.append(path)
    return paths


def expected_calls(ranks):
    """phase -> M -> calls of one key, from what the recording did."""
    exp = {"prefill": {}, "decode": {}}
    for m in PREFILL:
        exp["prefill"][m] = exp["prefill"].get(m, 0) + ranks
    for m in DECODE:
        exp["decode"][m] = exp["decode"].get(m, 0) + ranks
    for bs, n in GRAPHS.items():
        exp["decode"][bs] = exp["decode"].get(bs, 0) + n * ranks
    return exp


@pytest.mark.parametrize("device", DEVICES)
def test_names_and_lookup_are_sglangs(records, tmp_path, device):
    # rank 0 was recorded with arguments: its keys are read, not inferred
    report = tune_json(records[0], "--device", device)
    assert report["sglang"] is True
    assert report["device"] == {"H200": "NVIDIA_H200", "NVIDIA H100 80GB HBM3": "NVIDIA_H100_80GB_HBM3"}[device]
    assert len(report["keys"]) == len(CASES)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    r = run_python(SGLANG, env_extra=ENV, timeout=300, cwd=str(tmp_path), args=[str(path), json.dumps(CASES)])
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    covered = downs = 0
    keys = {json.dumps([k["E"], k["N"], k["hidden_size"], k["dtype"], k["block_shape"], k["per_channel_quant"]]): k
            for k in report["keys"]}
    for s in theirs:
        # the key as SGLang's own functions make it (its dtype string) is one the command reported
        k = keys.get(json.dumps(s["key"]))
        assert k is not None, (s, sorted(keys))
        assert k["file_name"] == s["name"], s["what"]
        assert (k["file"] is None) == (s["configs"] is None), s["what"]
        # the second GEMM's `_down` file: SGLang's name; what SGLang's lookup
        # gives for it is that file's table, else (none) the up file's
        assert k["down_file_name"] == s["down_name"], s["what"]
        if k["down_file"]:
            downs += 1
            assert os.path.basename(k["down_file"]) == s["down_name"]
            with open(k["down_file"]) as f:
                assert json.load(f) == s["down"], s["what"]
        else:
            assert s["down"] == s["configs"], s["what"]
        assert {(p, m): c for p, ms in expected_calls(1).items() for m, c in ms.items()} == \
            {(r["phase"], r["m"]): r["calls"] for r in k["m"]}, s["what"]
        if k["file"] is None:
            assert all(r["tuned_m"] is None for r in k["m"])
            assert s["run"] == s["default"]
            continue
        covered += 1
        assert os.path.basename(k["file"]) == s["name"]
        with open(k["file"]) as f:
            table = json.load(f)
        assert table == s["configs"]   # the very file SGLang reads
        for row in k["m"]:
            # the config SGLang runs for this M is the one tuned for the M the command names
            assert s["run"][str(row["m"])] == table[str(row["tuned_m"])], (s["what"], row)
    # the cases are meant to hit shipped files and to miss them
    assert 0 < covered < len(CASES)
    assert downs or device != "H200"   # SGLang 0.5.23 ships E=16,N=4096's _down file for the H200


def test_two_ranks_without_arguments(records):
    """Rank 1 has shapes only: the keys it infers are the same as rank 0's
    read ones but for int8 w8a16, said to be assumed; counts add up."""
    report = tune_json(*records, "--device", "H200", "--triton", "3.8.0")
    by = {(k["E"], k["N"], k["dtype"]): k for k in report["keys"]}
    fp8 = by[(8, 7168, "fp8_w8a8")]
    assert {(r["phase"], r["m"]): r["calls"] for r in fp8["m"]} == \
        {(p, m): c for p, ms in expected_calls(2).items() for m, c in ms.items()}
    assert by[(72, 2048, "fp8_w8a8")]["block_shape"] == [128, 128]
    assert by[(72, 2048, "fp8_w8a8")]["calls"] == sum(sum(ms.values()) for ms in expected_calls(2).values())
    # w8a16 read from rank 0's arguments; rank 1's int8 guessed as w8a8, and said so
    assert (16, 3072, "int8_w8a16") in by and not by[(16, 3072, "int8_w8a16")]["assumed"]
    guessed = by[(16, 3072, "int8_w8a8")]
    assert any("int8_w8a16" in a for a in guessed["assumed"])
    assert by[(8, 96, "int8_w8a8")]["per_channel_quant"] is True
    # the block key's file is in the running Triton's (3.8.0) folder; the bf16 one only in older ones
    assert by[(72, 2048, "fp8_w8a8")]["file_triton"] == "3.8.0"
    assert not by[(72, 2048, "fp8_w8a8")]["other_triton_version"]
    assert by[(8, 7168, None)]["other_triton_version"] is True


def test_configs_dir_raises_coverage(records, tmp_path):
    """The workflow's last step: a file the tuner wrote, in --configs DIR,
    covers the key that was not; its name is SGLang's."""
    before = tune_json(records[0], "--device", "H200")
    miss = next(k for k in before["keys"] if k["file"] is None)
    os.makedirs(tmp_path / "mine")
    with open(tmp_path / "mine" / miss["file_name"], "w") as f:
        json.dump({str(r["m"]): {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
                   for r in miss["m"]}, f)
    after = tune_json(records[0], "--device", "H200", "--configs", str(tmp_path / "mine"))
    assert after["coverage"]["all"]["tuned"] > before["coverage"]["all"]["tuned"]
    k = next(k for k in after["keys"] if (k["E"], k["N"], k["dtype"]) == (miss["E"], miss["N"], miss["dtype"]))
    assert k["file"] == str(tmp_path / "mine" / miss["file_name"])
    assert all(r["distance"] == 0 for r in k["m"])


# SGLang's real block-FP8 GEMM under the start-up hook: the hook must wrap it
# where fp8_utils imports it, and a logged pass must record its shapes
# (the Triton kernel then fails on this CPU machine, after the record)
BLOCK_GEMM = r"""
import sys, json, torch, sgl_shapeprof
import sglang.srt.layers.quantization.fp8_utils as fp8_utils
f = fp8_utils.w8a8_block_fp8_matmul_triton
assert getattr(f, "_sgl_shapeprof_marker", None) == "sglang_w8a8_block_fp8_matmul", f
shapes = json.loads(sys.argv[2])
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1], dedupe=True, args=True)
raised = set()
for phase, m, n, k in shapes:
    B = torch.zeros(1, 1, dtype=torch.float8_e4m3fn).expand(n, k)
    with prof.forward_pass(phase):
        try:
            f(torch.zeros(m, k, dtype=torch.float8_e4m3fn), B, torch.ones(m, -(-k // 128)),
              torch.ones(-(-n // 128), -(-k // 128)), [128, 128], output_dtype=torch.bfloat16)
        except Exception as e:
            raised.add(type(e).__name__)
prof.close()
print(json.dumps(sorted(raised)))
"""

BLOCK_SGLANG = r"""
import sys, json
from unittest import mock
from sglang.kernels.ops.gemm import fp8_kernel
report = json.load(open(sys.argv[1]))
out = {}
with mock.patch.object(fp8_kernel, "get_device_name", lambda *a, **k: report["device"]):
    for k in report["block_gemm"]["keys"]:
        fp8_kernel.get_w8a8_block_fp8_configs.cache_clear()
        c = fp8_kernel.get_w8a8_block_fp8_configs(k["N"], k["K"], *k["block_shape"])
        out[f'{k["N"]},{k["K"]}'] = None if c is None else list(c)
print(json.dumps(out))
"""


def test_block_gemm_recorded_through_the_hook(tmp_path):
    # N=1536,K=7168 and N=24576,K=7168 (DeepSeek-V3's) are shipped for the H200 with block 128x128; 1000,7168 not
    shapes = [["extend", 700, 1536, 7168], ["decode", 8, 1536, 7168], ["decode", 8, 1536, 7168],
              ["decode", 3, 24576, 7168], ["decode", 5, 1000, 7168]]
    path = str(tmp_path / "b.jsonl")
    r = run_python(BLOCK_GEMM, env_extra=dict(ENV, SGLANG_PROFILE_SHAPES="1"), timeout=300, cwd=str(tmp_path),
                   args=[path, json.dumps(shapes)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]), "the Triton kernel ran on CPU?"
    report = tune_json(path, "--device", "H200")
    keys = {(k["N"], k["K"]): k for k in report["block_gemm"]["keys"]}
    assert set(keys) == {(1536, 7168), (24576, 7168), (1000, 7168)}
    assert {(x["phase"], x["m"]): x["calls"] for x in keys[(1536, 7168)]["m"]} == {("prefill", 700): 1,
                                                                                     ("decode", 8): 2}
    assert all(k["block_shape"] == [128, 128] and not k["assumed"] for k in keys.values())  # read from --args
    rep = tmp_path / "report.json"
    rep.write_text(json.dumps(report))
    r = run_python(BLOCK_SGLANG, env_extra=ENV, timeout=300, cwd=str(tmp_path), args=[str(rep)])
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    for (n, k), mine in keys.items():
        # covered as SGLang's own lookup says, with the M keys it loads
        assert (mine["file"] is None) == (theirs[f"{n},{k}"] is None), (n, k)
        if mine["file"]:
            assert sorted(mine["tuned_m"]) == sorted(theirs[f"{n},{k}"])
    assert keys[(1536, 7168)]["file"] and keys[(1000, 7168)]["file"] is None


DEEPGEMM = r"""
import sys, json, torch, sgl_shapeprof
from sglang.kernels.ops.gemm import fp8_kernel  # registers sglang::deep_gemm_fp8_fp8_bf16_nt
shapes = json.loads(sys.argv[2])
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1], dedupe=True, args=sys.argv[3] == "args")
raised = set()
for phase, m, n, k in shapes:
    B = torch.zeros(1, 1, dtype=torch.float8_e4m3fn).expand(n, k)
    with prof.forward_pass(phase):
        try:   # SGLang's own call, as w8a8_block_fp8_matmul_deepgemm makes it
            fp8_kernel.deep_gemm_fp8_fp8_bf16_nt(torch.zeros(m, k, dtype=torch.float8_e4m3fn),
                torch.ones(m, -(-k // 128)), B, torch.ones(-(-n // 128), -(-k // 128)),
                torch.empty(m, n, dtype=torch.bfloat16), 128, 128)
        except Exception as e:   # no DeepGEMM here: recorded, then raised
            raised.add(type(e).__name__)
prof.close()
print(json.dumps(sorted(raised)))
"""


@pytest.mark.parametrize("mode", ["args", "shapes"])
def test_deepgemm_pairs(tmp_path, mode):
    """SGLang's DeepGEMM custom op, recorded in logged passes: its (N, K)
    pairs (what DeepGEMM compiles) with their M, and no config lookup."""
    shapes = [["extend", 700, 1536, 7168], ["decode", 8, 1536, 7168], ["decode", 8, 1536, 7168],
              ["decode", 3, 24576, 7168]]
    path = str(tmp_path / "d.jsonl")
    r = run_python(DEEPGEMM, env_extra=ENV, timeout=300, cwd=str(tmp_path), args=[path, json.dumps(shapes), mode])
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]), "DeepGEMM ran on a CPU?"
    report = tune_json(path, "--device", "H200")
    got = {(d["N"], d["K"]): d for d in report["deepgemm"]}
    want = {}
    for phase, m, n, k in shapes:
        calls = want.setdefault((n, k), {})
        key = ("prefill" if phase == "extend" else phase, m)
        calls[key] = calls.get(key, 0) + 1
    assert {nk: {(x["phase"], x["m"]): x["calls"] for x in d["m"]} for nk, d in got.items()} == want
    assert all(d["block_shape"] == [128, 128] for d in got.values())
    assert all(bool(d["assumed"]) == (mode == "shapes") for d in got.values())  # block read only with --args
    assert report["block_gemm"]["keys"] == [] and report["keys"] == []   # not a Triton config's call
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "tune", path, "--device", "H200"],
                       capture_output=True, text=True, env=dict(os.environ, **ENV), timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "N=1536 K=7168 block=128x128 fp8_w8a8: 8 700  (3 calls)" in r.stdout


# A tiny Mixtral (2 layers, 4 experts, top-2) through SGLang's real CPU engine
# under the start-up hook. On a CPU without AMX SGLang runs its MoE layers
# with moe_forward_native (plain torch: router topk, then per-expert GEMMs),
# not the Triton fused_experts ops whose configs `tune` checks; so `tune`
# finds no fused-MoE key there, and the experts' GEMMs are `gemm`'s.
MIXTRAL = r"""
import os, sys
sys.path.insert(0, sys.argv[2])
import make_models as mm
import torch
from transformers import MixtralConfig, MixtralForCausalLM
out = sys.argv[1]
mm.make_llama(out)
for f in os.listdir(out):
    if f.endswith(".safetensors") or f == "config.json":
        os.unlink(os.path.join(out, f))
cfg = MixtralConfig(vocab_size=mm.VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                    max_position_embeddings=512, tie_word_embeddings=False, torch_dtype="bfloat16")
torch.manual_seed(0)
MixtralForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
"""


def test_tiny_moe_model_on_the_cpu_engine(tmp_path):
    env_dir = os.path.join(ROOT, "tests", "sglang_env")
    model = str(tmp_path / "tiny-mixtral")
    r = run_python(MIXTRAL, env_extra=ENV, timeout=300, cwd=str(tmp_path), args=[model, env_dir])
    assert r.returncode == 0, r.stderr[-3000:]
    shapes = str(tmp_path / "shapes.jsonl")
    env = dict(os.environ, **ENV, SGLANG_PROFILE_SHAPES="1", SGLANG_PROFILE_SHAPES_FILE=shapes,
               SGLANG_PROFILE_SHAPES_DEDUPE="1")
    r = subprocess.run([sys.executable, os.path.join(env_dir, "run_llm.py"), model], capture_output=True,
                       text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    report = tune_json(shapes, "--device", "H200")
    assert report["keys"] == [] and report["coverage"] == {}
    g = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", shapes, "--json"], capture_output=True,
                       text=True, env=dict(os.environ, **ENV), timeout=300, cwd="/")
    rows = json.loads(g.stdout)
    # the experts' GEMMs: gate_up (K=64 -> 2*96) and down (K=96 -> 64), per expert a token batch
    assert {(x["n"], x["k"]) for x in rows} >= {(2 * 96, 64), (64, 96)}, sorted({(x["n"], x["k"]) for x in rows})
    ops = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", shapes, "--quick"],
                         capture_output=True, text=True, env=dict(os.environ, **ENV), timeout=300, cwd="/")
    assert "aten.topk.default" in ops.stdout and "fused_experts" not in ops.stdout
