"""tvm-ffi's door (integrations/tvm_ffi/; docs/kernels.md) on the real
apache-tvm-ffi 0.1.11 that SGLang 0.5.23 pins, in SGLang's test
environment: a module compiled from C++ by tvm-ffi itself
(tvm_ffi.cpp.load_inline, on the CPU) and loaded through tvm_ffi.load_module,
as SGLang's JIT kernels are, in a process with the start-up hook on. Each
function call in a logged pass is one record, values by position; the one
that raises carries the exception as the caller got it. The oracle is what
the child passed in, got back and caught."""
import json
import os
import subprocess
import sys

import pytest

from helpers import load
from sglang_engine_helpers import zero_edit_hook_installed

pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is installed with SGLang's requirements")

CHILD = r'''
import json, sys, torch
import tvm_ffi, tvm_ffi.cpp
from sgl_shapeprof import ShapeProfiler

out, build = sys.argv[1], sys.argv[2]
src = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
void scale_into(tvm::ffi::TensorView x, tvm::ffi::TensorView y, double s) {
  if (x.size(0) != y.size(0)) TVM_FFI_THROW(ValueError) << "sizes differ: " << x.size(0) << " and " << y.size(0);
  const float* a = static_cast<const float*>(x.data_ptr());
  float* b = static_cast<float*>(y.data_ptr());
  for (int64_t i = 0; i < x.size(0); ++i) b[i] = a[i] * s;
}
"""
mod = tvm_ffi.cpp.load_inline("scale_mod", cpp_sources=src, functions=["scale_into"], build_directory=build)
x, y, z, short = torch.arange(6, dtype=torch.float32), torch.empty(6), torch.empty(6), torch.empty(4)
prof = ShapeProfiler(out)
mod.scale_into(x, y, 3.0)  # outside a pass: not recorded
prof.start_forward_pass("decode")
mod.scale_into(x, y, 2.0)
mod["scale_into"](x, z, 0.5)  # item access: the same function, the same door
try:
    mod.scale_into(x, short, 1.0)
    error = None
except Exception as e:
    error = {"error_type": type(e).__name__, "error_message": str(e)}
prof.end_forward_pass()
prof.close()
ok = torch.equal(y, x * 2.0) and torch.equal(z, x * 0.5)
same = mod["scale_into"] is mod["scale_into"]  # tvm-ffi makes a new Function each time
print(json.dumps({"ok": ok, "same": same, "error": error, "door": getattr(mod.scale_into, "_shapeprof_operation", None)}))
'''


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    tmp = tmp_path_factory.mktemp("tvm_ffi")
    out = tmp / "shapes.jsonl"
    env = dict(os.environ, SGLANG_PROFILE_SHAPES="1")  # the start-up hook on, as in a worker
    r = subprocess.run([sys.executable, "-c", CHILD, str(out), str(tmp / "build")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(out), json.loads(r.stdout.strip().splitlines()[-1])


def test_each_call_of_a_loaded_modules_function_is_one_record(child):
    path, seen = child
    assert seen["ok"], "the function's result changed under the profiler"
    op = "tvm_ffi:scale_mod.scale_into"
    assert seen["door"] == op
    assert seen["same"], "each item access made a door of its own"
    recs = load(path)
    assert [r["operation"] for r in recs] == [op] * 3
    f32 = "torch.float32"
    assert recs[0]["inputs"] == {"arg0": {"shape": [6], "dtype": f32}, "arg1": {"shape": [6], "dtype": f32}}
    assert recs[0]["args"] == {"arg2": 2.0} and recs[0]["outputs"] is None
    assert recs[1]["args"] == {"arg2": 0.5}


def test_a_call_that_raises_carries_the_exception_as_raised(child):
    path, seen = child
    assert seen["error"] is not None and seen["error"]["error_type"] == "ValueError"
    last = load(path)[-1]
    assert last["error"] == seen["error"]
    assert last["inputs"]["arg1"] == {"shape": [4], "dtype": "torch.float32"}
