"""Issue 53: `tune --flashinfer-bench DIR` writes the run's FlashInfer calls
as a flashinfer-bench dataset. On records of FlashInfer 0.7.2's real
functions (each through a door that names its values by the function's own
parameters, as FlashInfer's door does, around a body that returns an output
of the right shape: the real kernels need a GPU), the oracles are
FlashInfer's own fi_trace on real tensors of the same shapes (each
definition file) and flashinfer-bench 0.1.2's own parser (each workload
line), with the axes the test built the tensors from."""
import json
import os
import subprocess
import sys

import pytest

FLASHINFER_DIR = os.path.join(sys.prefix, "flashinfer-0.7.2")  # tests/sglang_env/setup.sh's

CHILD = r'''
import inspect, json, sys, torch
import flashinfer.gemm, flashinfer.norm
from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.recording.doors import api_door, operation_name

bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
Z = torch.zeros
calls = [
    # bmm_fp8 twice with N=24, K=32 (one definition), M 5 and 9 (two workloads), batch 2
    (flashinfer.gemm.bmm_fp8, dict(A=Z(2, 5, 32, dtype=fp8), B=Z(2, 32, 24, dtype=fp8), A_scale=Z(1), B_scale=Z(1),
                                   dtype=bf16), Z(2, 5, 24, dtype=bf16)),
    (flashinfer.gemm.bmm_fp8, dict(A=Z(2, 9, 32, dtype=fp8), B=Z(2, 32, 24, dtype=fp8), A_scale=Z(1), B_scale=Z(1),
                                   dtype=bf16), Z(2, 9, 24, dtype=bf16)),
    (flashinfer.gemm.mm_bf16, dict(a=Z(11, 96, dtype=bf16), b=Z(96, 40, dtype=bf16)), Z(11, 40, dtype=bf16)),
    (flashinfer.norm.rmsnorm, dict(input=Z(7, 64, dtype=bf16), weight=Z(64, dtype=bf16), eps=1e-6),
     Z(7, 64, dtype=bf16)),
    # DeepGEMM's masked layout: 4 groups of at most 16 rows, N=128, K=256; a scalar input, expected_m
    (flashinfer.gemm.batch_deepgemm_fp8_nt_groupwise,
     dict(a=Z(4, 16, 256, dtype=fp8), b=Z(4, 128, 256, dtype=fp8), a_scale=Z(4, 16, 2), b_scale=Z(4, 1, 2),
          masked_m=Z(4, dtype=torch.int32), expected_m=5), Z(4, 16, 128, dtype=bf16)),
]
prof = ShapeProfiler(sys.argv[1])
oracle = {}
prof.start_forward_pass("decode")
for fn, kwargs, out in calls:
    real = inspect.unwrap(fn)
    api_door(lambda *a, **k: out, operation_name("flashinfer", real), real)(**kwargs)
    d = fn.fi_trace(**kwargs)  # FlashInfer's own definition of the same call
    oracle[d["name"]] = d
prof.end_forward_pass()
prof.close()
json.dump(oracle, open(sys.argv[2], "w"))
'''


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not os.path.isfile(os.path.join(FLASHINFER_DIR, "flashinfer_bench", "__init__.py")):
        pytest.skip(f"flashinfer-python 0.7.2 and flashinfer-bench are not in {FLASHINFER_DIR} "
                    "(tests/sglang_env/setup.sh)")
    tmp = tmp_path_factory.mktemp("fi_bench")
    records, oracle, out = str(tmp / "shapes.jsonl"), str(tmp / "oracle.json"), tmp / "dataset"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [FLASHINFER_DIR, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", CHILD, records, oracle], capture_output=True, text=True, env=env,
                       timeout=600, cwd=tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "tune", records, "--flashinfer-bench", str(out)],
                       capture_output=True, text=True, env=env, timeout=600, cwd=tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(oracle) as f:
        return out, json.load(f), r.stderr, env


def test_each_definition_is_flashinfers_own_fi_trace_of_the_call(run):
    out, oracle, stderr, _ = run
    written = {}
    for d, _, names in os.walk(out / "definitions"):
        for n in names:
            with open(os.path.join(d, n)) as f:
                defn = json.load(f)
            assert os.path.basename(d) == defn["op_type"] and n == defn["name"] + ".json"
            written[defn["name"]] = defn
    assert written == oracle
    assert len(written) == 4  # bmm_fp8's two calls share one
    assert f"wrote 4 flashinfer-bench definitions (by FlashInfer's fi_trace) and 5 workloads to {out}" in stderr


def test_each_shape_that_ran_is_a_workload_flashinfer_bench_reads(run):
    out, oracle, _, env = run
    reader = r'''
import json, sys
from flashinfer_bench.data import Trace
from flashinfer_bench.data.json_utils import load_jsonl_file
got = []
for p in sys.argv[1:]:
    for t in load_jsonl_file(Trace, p):
        assert t.is_workload_trace()
        got.append([t.definition, t.workload.axes, {k: v.model_dump() for k, v in t.workload.inputs.items()}])
print(json.dumps(got))
'''
    paths = sorted(os.path.join(d, n) for d, _, ns in os.walk(out / "workloads") for n in ns)
    r = subprocess.run([sys.executable, "-c", reader, *paths], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {(d, json.dumps(axes, sort_keys=True)): inputs for d, axes, inputs in json.loads(r.stdout)}
    by_prefix = {p: next(n for n in oracle if n.startswith(p)) for p in
                 ("bmm_fp8", "gemm_bf16", "rmsnorm", "batch_deepgemm_fp8_nt_groupwise")}
    # every axis the test's shapes give, by definition; a workload holds the variable ones
    sizes = {"bmm_fp8": [{"batch_size": 2, "M": 5, "K": 32, "N": 24, "scalar": 1},
                         {"batch_size": 2, "M": 9, "K": 32, "N": 24, "scalar": 1}],
             "gemm_bf16": [{"M": 11, "K": 96, "N": 40}],
             "rmsnorm": [{"batch_size": 7, "hidden_size": 64}],
             "batch_deepgemm_fp8_nt_groupwise": [{"batch_size": 4, "M_max": 16, "N": 128, "K": 256, "K_div_128": 2,
                                                  "N_div_128": 1}]}
    want = set()
    for prefix, each in sizes.items():
        name = by_prefix[prefix]
        var = [a for a, spec in oracle[name]["axes"].items() if spec["type"] == "var"]
        want |= {(name, json.dumps({a: axes[a] for a in var}, sort_keys=True)) for axes in each}
    assert set(got) == want
    # each of the definition's tensor inputs random, its scalars the values passed
    masked = by_prefix["batch_deepgemm_fp8_nt_groupwise"]
    [inputs] = [v for (d, _), v in got.items() if d == masked]
    assert inputs["expected_m"] == {"type": "scalar", "value": 5}
    assert {k for k, v in inputs.items() if v == {"type": "random"}} == {
        k for k, spec in oracle[masked]["inputs"].items() if spec["shape"] is not None}


def test_a_folder_that_is_not_empty_is_refused(run, tmp_path):
    out, _, _, env = run
    records = str(out.parent / "shapes.jsonl")
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "tune", records, "--device", "H200",
                        "--flashinfer-bench", str(out)], capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == f"sgl-shapeprof tune: --flashinfer-bench {out}: not empty (give a new or empty folder)"
