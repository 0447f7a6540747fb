"""Issue 53: DeepGEMM's ops reach the dispatcher, and gemm and cost read
them with no --op flag. The real sgl-deep-gemm 0.2.3.post2 (SGLang 0.5.23's
pin, tests/sglang_env/setup.sh): its TORCH_LIBRARY module is loaded (its
ops, with their own schemas, as SGLang's deep_gemm_wrapper reaches them),
CPU kernels stand in for its CUDA ones, and the ops are called in a logged
pass. The oracle is the shapes the test passed."""
import json
import os
import subprocess
import sys

import pytest

DEEP_GEMM_SO = os.path.join(sys.prefix, "deep-gemm-0.2.3.post2", "deep_gemm", "_C.so")  # setup.sh's

CHILD = r'''
import json, sys, torch
from sgl_shapeprof import ShapeProfiler

torch.ops.load_library(sys.argv[2])
ops = torch.ops.deep_gemm
lib = torch.library.Library("deep_gemm", "IMPL")


def stand_in(*args, **kwargs):
    args[4].zero_()  # d, written into


for name in ("fp8_fp4_gemm_nt", "fp8_fp4_gemm_tn", "m_grouped_fp8_fp4_gemm_nt_contiguous",
             "m_grouped_fp8_fp4_gemm_nt_masked"):
    lib.impl(name, stand_in, "CPU")
fp8, bf16, f32, i32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32, torch.int32
E = torch.empty
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass("decode")
# dense: M=6, N=256, K=512 (b is [N, K])
ops.fp8_fp4_gemm_nt(E(6, 512, dtype=fp8), E(6, 4, dtype=f32), E(256, 512, dtype=fp8), E(2, 4, dtype=f32),
                    E(6, 256, dtype=bf16), None, None, None, None, "", False, None)
# a transposed ("tn"): a is [K=512, M=6], b [N=256, K]
ops.fp8_fp4_gemm_tn(E(512, 6, dtype=fp8), E(4, 6, dtype=f32), E(256, 512, dtype=fp8), E(2, 4, dtype=f32),
                    E(6, 256, dtype=bf16), None, None, None, None, "", False, None)
# grouped, contiguous: 10 rows over 8 groups' [N=512, K=256] weights
ops.m_grouped_fp8_fp4_gemm_nt_contiguous(E(10, 256, dtype=fp8), E(10, 2, dtype=f32), E(8, 512, 256, dtype=fp8),
                                         E(8, 4, 2, dtype=f32), E(10, 512, dtype=bf16), E(10, dtype=i32),
                                         None, None, None, "", False, False, False, None)
# masked: 4 groups of at most 16 rows, N=256, K=384
ops.m_grouped_fp8_fp4_gemm_nt_masked(E(4, 16, 384, dtype=fp8), E(4, 16, 3, dtype=f32), E(4, 256, 384, dtype=fp8),
                                     E(4, 2, 3, dtype=f32), E(4, 16, 256, dtype=bf16), E(4, dtype=i32), 3,
                                     None, None, None, "", False)
prof.end_forward_pass()
prof.close()
'''


def test_deep_gemms_own_ops_are_recorded_and_read_as_gemms(tmp_path):
    if not os.path.isfile(DEEP_GEMM_SO):
        pytest.skip(f"sgl-deep-gemm is not in {os.path.dirname(os.path.dirname(DEEP_GEMM_SO))} "
                    "(tests/sglang_env/setup.sh)")
    records = str(tmp_path / "shapes.jsonl")
    r = subprocess.run([sys.executable, "-c", CHILD, records, DEEP_GEMM_SO], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(records) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    recs = [x for x in recs if x["operation"].startswith("deep_gemm.")]  # (aten.empty: the test's own)
    assert [x["operation"] for x in recs] == ["deep_gemm.fp8_fp4_gemm_nt.default", "deep_gemm.fp8_fp4_gemm_tn.default",
                                              "deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous.default",
                                              "deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked.default"]
    assert all({"a", "b", "d"} <= set(x["inputs"]) for x in recs)  # by DeepGEMM's own schema names
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", records, "--json"], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    got = {g["operation"].split(".")[1]: (g["m"], g["n"], g["k"], g["batch"], g["groups"])
           for g in json.loads(r.stdout)}
    assert got == {"fp8_fp4_gemm_nt": (6, 256, 512, 1, None), "fp8_fp4_gemm_tn": (6, 256, 512, 1, None),
                   "m_grouped_fp8_fp4_gemm_nt_contiguous": (10, 512, 256, 1, 8),
                   "m_grouped_fp8_fp4_gemm_nt_masked": (16, 256, 384, 4, None)}
