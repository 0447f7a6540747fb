"""FlashInfer's door (integrations/flashinfer/; docs/kernels.md) on the real
flashinfer-python 0.7.2, SGLang 0.5.23's pin, installed in SGLang's test
environment (tests/sglang_env/setup.sh, in a folder of its own that only
these tests put on their path). Its public API is called with CPU
tensors in a logged pass, in a process with the start-up hook on, as a
server's worker would have it: FlashInfer's kernels need a GPU, so each call
raises, and its record must carry the call, its tensors by parameter name
and the exception exactly as the caller got it. The oracle is what the
child passed in and caught, and FlashInfer's own functions' names."""
import json
import os
import subprocess
import sys

import pytest

from helpers import load
from sglang_engine_helpers import zero_edit_hook_installed

FLASHINFER_VERSION = "0.7.2"  # SGLang 0.5.23's pin
FLASHINFER_DIR = os.path.join(sys.prefix, f"flashinfer-{FLASHINFER_VERSION}")  # setup.sh's

CHILD = r'''
import inspect, json, sys, torch
import flashinfer.decode, flashinfer.fused_moe, flashinfer.gemm, flashinfer.norm
from sgl_shapeprof import ShapeProfiler

out = sys.argv[1]
bf16 = torch.bfloat16
x, w = torch.randn(4, 64, dtype=bf16), torch.randn(64, dtype=bf16)
q = torch.randn(2, 8, 128, dtype=bf16)
k_cache, v_cache = torch.randn(16, 2, 32, 128, dtype=bf16), torch.randn(16, 2, 32, 128, dtype=bf16)
workspace = torch.empty(1 << 16, dtype=torch.uint8)
tables, lens = torch.zeros(2, 4, dtype=torch.int32), torch.tensor([40, 70], dtype=torch.int32)
logits, hidden = torch.randn(5, 8, dtype=torch.float32), torch.randn(5, 64, dtype=bf16)
w13, w2 = torch.randn(8, 256, 64, dtype=bf16), torch.randn(8, 64, 128, dtype=bf16)
fp8 = torch.float8_e4m3fn
calls = [
    (flashinfer.norm.rmsnorm, (x, w), {"eps": 1e-5}),
    (flashinfer.decode.trtllm_batch_decode_with_kv_cache, (q, (k_cache, v_cache), workspace, tables, lens, 128),
     {"bmm1_scale": 0.088}),
    (flashinfer.fused_moe.trtllm_bf16_moe, (logits, None, hidden, w13, w2),
     dict(num_experts=8, top_k=2, n_group=None, topk_group=None, intermediate_size=128,
          local_expert_offset=0, local_num_experts=8)),
    # under FlashInfer's backend_requirement: its device and problem-size
    # checks raise before the function itself runs
    (flashinfer.gemm.bmm_fp8, (torch.zeros(2, 5, 32, dtype=fp8), torch.zeros(2, 32, 24, dtype=fp8), torch.ones(1),
                               torch.ones(1), bf16), {}),
]
prof = ShapeProfiler(out)
seen = []
prof.start_forward_pass("decode")
for fn, args, kwargs in calls:
    try:
        fn(*args, **kwargs)
        error = None
    except Exception as e:
        error = {"error_type": type(e).__name__, "error_message": str(e)}
    real = inspect.unwrap(fn)
    seen.append({"module": real.__module__, "qualname": real.__qualname__, "error": error,
                 "door": getattr(fn, "_shapeprof_operation", None)})
prof.end_forward_pass()
prof.close()
print(json.dumps(seen))
'''


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    if not os.path.isfile(os.path.join(FLASHINFER_DIR, "flashinfer", "__init__.py")):
        pytest.skip(f"flashinfer-python {FLASHINFER_VERSION} is not in {FLASHINFER_DIR} (tests/sglang_env/setup.sh)")
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    out = tmp_path_factory.mktemp("flashinfer") / "shapes.jsonl"
    env = dict(os.environ, SGLANG_PROFILE_SHAPES="1",  # the start-up hook on, as in a worker
               PYTHONPATH=os.pathsep.join(filter(None, [FLASHINFER_DIR, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", CHILD, str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(out), json.loads(r.stdout.strip().splitlines()[-1])


def test_each_public_call_is_one_record_named_by_flashinfers_module(child):
    path, seen = child
    recs = load(path)
    want = [f"flashinfer:{s['module'][len('flashinfer.'):]}.{s['qualname']}" for s in seen]
    assert [s["door"] for s in seen] == want  # the functions FlashInfer's modules hold are doors
    # one record per API call, none of the operators or inner API calls inside them
    assert [r["operation"] for r in recs] == want


def test_the_records_carry_the_tensors_by_parameter_name_and_the_exception_as_raised(child):
    path, seen = child
    norm, decode, moe, bmm = load(path)
    for rec, s in zip((norm, decode, moe, bmm), seen):
        assert s["error"] is not None, "FlashInfer ran a kernel on the CPU: the test needs a new oracle"
        assert rec["error"] == s["error"]
        assert rec["outputs"] is None
    bf16 = "torch.bfloat16"
    assert norm["inputs"] == {"input": {"shape": [4, 64], "dtype": bf16}, "weight": {"shape": [64], "dtype": bf16}}
    assert norm["args"]["eps"] == 1e-5
    assert decode["inputs"]["query"] == {"shape": [2, 8, 128], "dtype": bf16}
    assert decode["inputs"]["kv_cache"] == [{"shape": [16, 2, 32, 128], "dtype": bf16}] * 2  # the paged pair
    assert decode["inputs"]["block_tables"] == {"shape": [2, 4], "dtype": "torch.int32"}
    assert decode["inputs"]["seq_lens"] == {"shape": [2], "dtype": "torch.int32"}
    assert decode["args"]["max_seq_len"] == 128 and decode["args"]["kv_layout"] == "HND"
    assert moe["inputs"]["hidden_states"] == {"shape": [5, 64], "dtype": bf16}
    assert moe["inputs"]["gemm1_weights"] == {"shape": [8, 256, 64], "dtype": bf16}
    assert {k: moe["args"][k] for k in ("num_experts", "top_k", "intermediate_size", "routing_bias")} == {
        "num_experts": 8, "top_k": 2, "intermediate_size": 128, "routing_bias": None}
    assert bmm["inputs"]["A"] == {"shape": [2, 5, 32], "dtype": "torch.float8_e4m3fn"}
    assert bmm["inputs"]["B"] == {"shape": [2, 32, 24], "dtype": "torch.float8_e4m3fn"}
    assert bmm["args"]["dtype"] == "torch.bfloat16"


def test_analyze_counts_the_calls_by_door(child):
    path, seen = child
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", path, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["files"][0]["doors"] == {"flashinfer": len(seen)}


CHECKED = r'''
import json, sys, warnings
import flashinfer.gemm
from flashinfer.api_logging import flashinfer_api, flashinfer_experimental_api
from flashinfer.utils import backend_requirement
from sgl_shapeprof import ShapeProfiler


def fast(n, backend="auto"):
    return n < 10


def slow(n, backend="auto"):
    return True


for check in (fast, slow):
    check.is_compute_capability_supported = lambda cc: True


@backend_requirement({"fast": fast, "slow": slow}, heuristic_func=lambda backends, n, backend="auto": backends)
@flashinfer_api
def picks(n, backend="auto"):
    return list(picks.suitable_auto_backends)  # as bmm_fp8 reads its own: through its module's name


@backend_requirement({"fast": fast, "slow": slow}, heuristic_func=lambda backends, n, backend="auto": backends)
@flashinfer_experimental_api
def trial(n, backend="auto"):
    return n


said = {"small": picks(3), "large": picks(30), "door": getattr(picks, "_shapeprof_operation", None),
        "bmm_fp8": sorted(vars(flashinfer.gemm.bmm_fp8))}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    said["trial"] = [trial(3), getattr(trial, "is_experimental", False),
                     [type(w.message).__name__ for w in caught]]
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass("decode")
said["in_pass"] = picks(30)
try:
    picks(3, backend="none")
except Exception as e:
    said["refused"] = {"error_type": type(e).__name__, "error_message": str(e)}
prof.end_forward_pass()
prof.close()
print(json.dumps(said))
'''


def test_the_checked_functions_state_stays_flashinfers_own(tmp_path):
    """The door above backend_requirement's checks: FlashInfer keeps state on
    the checked function while it runs (`suitable_auto_backends`, which
    bmm_fp8 and others read through their module's name, now the door's);
    the door has it live, as the function had, and a refused call is a
    record with its exception. Only flashinfer_api's own doors are moved:
    an experimental API's wrapper between them stays, and warns."""
    if not os.path.isfile(os.path.join(FLASHINFER_DIR, "flashinfer", "__init__.py")):
        pytest.skip(f"flashinfer-python {FLASHINFER_VERSION} is not in {FLASHINFER_DIR} (tests/sglang_env/setup.sh)")
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    out = str(tmp_path / "shapes.jsonl")
    env = dict(os.environ, SGLANG_PROFILE_SHAPES="1",
               PYTHONPATH=os.pathsep.join(filter(None, [FLASHINFER_DIR, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", CHECKED, out], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    said = json.loads(r.stdout.strip().splitlines()[-1])
    assert said["door"] == "flashinfer:__main__.picks"
    # what the heuristic chose for this call, not a copy taken when the door was made
    assert (said["small"], said["large"], said["in_pass"]) == (["fast", "slow"], ["slow"], ["slow"])
    assert {"is_backend_supported", "has_backend", "dropped_experimental_backends"} <= set(said["bmm_fp8"])
    # a wrapper of FlashInfer's over a door (it copies the door's attributes) stays: its warning is given
    assert said["trial"] == [3, True, ["ExperimentalWarning"]]
    (refused,) = [x for x in load(out) if x["operation"] == said["door"]]
    assert refused["error"] == said["refused"] and refused["args"]["backend"] == "none"
