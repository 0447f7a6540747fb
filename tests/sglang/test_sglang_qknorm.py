"""SGLang's own fused_inplace_qknorm (sglang.srt.models.utils: SGLang's
custom op around sglang.kernels.ops.layernorm.norm's, which calls its JIT
kernel, a tvm-ffi module) on its real code, in a process with the start-up
hook on. Its JIT module needs CUDA to build: it is stood in by a CPU
implementation that tvm-ffi compiles (load_inline), and the op's kernel,
registered by SGLang for CUDA, is registered for the CPU too. In a logged pass the custom op is one record and the tvm-ffi
call inside it another, marked as running within it (FORMAT.md, "within").
The oracle: the values the kernel wrote (an RMSNorm per head, computed here
in torch) and the tensors the test passed."""
import json
import os
import subprocess
import sys

import pytest

from helpers import load
from sglang_engine_helpers import STUBS, zero_edit_hook_installed

pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is installed with SGLang's requirements")

CHILD = r'''
import json, sys, torch
import tvm_ffi, tvm_ffi.cpp
from sgl_shapeprof import ShapeProfiler
import sglang.kernels.ops.layernorm.norm as norm
from sglang.srt.models import utils as model_utils

out, build = sys.argv[1], sys.argv[2]
src = r"""
#include <cmath>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
static void norm_rows(tvm::ffi::TensorView x, tvm::ffi::TensorView w, double eps) {
  int64_t d = x.size(x.ndim() - 1), rows = 1;
  for (int i = 0; i + 1 < x.ndim(); ++i) rows *= x.size(i);
  float* p = static_cast<float*>(x.data_ptr());
  const float* g = static_cast<const float*>(w.data_ptr());
  for (int64_t r = 0; r < rows; ++r, p += d) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(p[j]) * p[j];
    float inv = float(1.0 / std::sqrt(ss / d + eps));
    for (int64_t j = 0; j < d; ++j) p[j] = p[j] * inv * g[j];
  }
}
void qknorm(tvm::ffi::TensorView q, tvm::ffi::TensorView k, tvm::ffi::TensorView qw, tvm::ffi::TensorView kw,
            double eps) {
  norm_rows(q, qw, eps);
  norm_rows(k, kw, eps);
}
"""
module = tvm_ffi.cpp.load_inline("qknorm_cpu", cpp_sources=src, functions=["qknorm"], build_directory=build)
norm._jit_qknorm_module = lambda head_dim, dtype, half_warp=True: module  # its JIT build needs CUDA
# SGLang registers its custom op's kernel for the accelerator's key (CUDA in
# this CUDA build of torch): the same function, for the CPU this runs on
cpu = torch.library.Library("sglang", "IMPL")
cpu.impl("fused_inplace_qknorm", norm.fused_inplace_qknorm, "CPU")

torch.manual_seed(0)
q, k = torch.randn(3, 4, 64), torch.randn(3, 2, 64)
qw, kw = torch.rand(64) + 0.5, torch.rand(64) + 0.5
want_q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * qw
want_k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6) * kw
prof = ShapeProfiler(out)
prof.start_forward_pass("decode")
model_utils.fused_inplace_qknorm(q=q, k=k, q_weight=qw, k_weight=kw, head_dim=64, eps=1e-6)
prof.end_forward_pass()
prof.close()
print(json.dumps({"ok": bool(torch.allclose(q, want_q, atol=1e-5) and torch.allclose(k, want_k, atol=1e-5))}))
'''


def test_sglangs_fused_inplace_qknorm_is_recorded_with_its_jit_kernels_call_within_it(tmp_path):
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    pytest.importorskip("sglang.srt.models.utils")
    out = tmp_path / "shapes.jsonl"
    env = dict(os.environ, SGLANG_PROFILE_SHAPES="1",
               PYTHONPATH=os.pathsep.join([STUBS] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-c", CHILD, str(out), str(tmp_path / "build")], capture_output=True,
                       text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["ok"], "the kernel's values changed under the profiler"
    recs = load(str(out))
    op = "sglang.fused_inplace_qknorm.default"
    inner = [x for x in recs if x["operation"] == "tvm_ffi:qknorm_cpu.qknorm"]
    outer = [x for x in recs if x["operation"] == op]
    assert len(inner) == 1 and len(outer) == 1, [x["operation"] for x in recs]
    f32 = "torch.float32"
    assert inner[0]["inputs"] == {"arg0": {"shape": [3, 4, 64], "dtype": f32}, "arg1": {"shape": [3, 2, 64], "dtype": f32},
                                  "arg2": {"shape": [64], "dtype": f32}, "arg3": {"shape": [64], "dtype": f32}}
    assert inner[0]["args"] == {"arg4": 1e-6} and inner[0]["within"] == op
    assert outer[0]["inputs"]["q"] == {"shape": [3, 4, 64], "dtype": f32} and "within" not in outer[0]
