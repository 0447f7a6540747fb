"""CuTe DSL's door (integrations/cute_dsl/; docs/kernels.md) on the real
nvidia-cutlass-dsl 4.8.0 that SGLang 0.5.23 pins, installed by SGLang's
test environment: `cute.compile` compiles host functions (no GPU kernel in
them) on the CPU and their calls really run, as a kernel's would, through
each kind of compiled function: the native one, one bound to a device
(.to()), one compiled with tvm-ffi (FlashInfer's norms, SGLang's FA4), a
kernel object's (FlashInfer's RMSNormKernel), and a plain tvm-ffi function
from a module exported and loaded ahead of time (SGLang's on-disk cache).
In a process with the start-up hook on, each call in a logged pass is one
record. The oracle is what the child passed in, and that each call ran
(the value it wrote)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import load
from sglang_engine_helpers import zero_edit_hook_installed

CUTE_DSL_DIR = os.path.join(sys.prefix, "cutlass-dsl-4.8.0")  # tests/sglang_env/setup.sh's
PATHS = [os.path.join(CUTE_DSL_DIR, "nvidia_cutlass_dsl", "dsl_packages"), CUTE_DSL_DIR]

KERNELS = '''
import cutlass
import cutlass.cute as cute


@cute.jit
def fill(mX: cute.Tensor, n: cutlass.Int32, flag: cutlass.Constexpr[bool]):
    mX[0] = 42.0


class Mark:
    """A kernel object, compiled as FlashInfer compiles its norms."""
    @cute.jit
    def __call__(self, mX: cute.Tensor, n: cutlass.Int32):
        mX[1] = 7.0
'''

CHILD = r'''
import json, os, sys, torch
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack
from sgl_shapeprof import ShapeProfiler
from cute_kernels import Mark, fill

out, build = sys.argv[1], sys.argv[2]
x = torch.zeros(2, 4)
native = cute.compile(fill, from_dlpack(x), 3, True)
ffi = cute.compile(fill, from_dlpack(x, enable_tvm_ffi=True), 3, True, options="--enable-tvm-ffi")
mark = cute.compile(Mark(), from_dlpack(x), 3)
ffi.export_to_c(object_file_path=os.path.join(build, "fill_aot.o"), function_name="fill_fn")
aot = cute.runtime.load_module(os.path.join(build, "fill_aot.o"), enable_tvm_ffi=True)
prof = ShapeProfiler(out)
native(x, 1)  # outside a pass: not recorded
ran = []
prof.start_forward_pass("decode")
for name, call in [("native", lambda: native(x, 5)), ("device", lambda: native.to(None)(x, 6)),
                   ("ffi", lambda: ffi(x, 7)), ("ffi_kw", lambda: ffi(mX=x, n=8)),
                   ("object", lambda: mark(x, 4)), ("aot", lambda: aot["fill_fn"](x, 9)),
                   ("dlpack", lambda: native(from_dlpack(x), 3))]:  # a CuTe tensor: written as x
    x.zero_()
    call()
    ran.append([name, x[0, 0].item(), x[1, 0].item()])  # mX[1]: CuTe counts down columns first
try:
    ffi(torch.zeros(3, 4), 2)  # compiled for [2, 4]: tvm-ffi refuses it
    error = None
except Exception as e:
    error = {"error_type": type(e).__name__, "error_message": str(e)}
prof.end_forward_pass()
prof.close()
print(json.dumps({"ran": ran, "error": error}))
'''


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    if not os.path.isdir(os.path.join(PATHS[0], "cutlass")):
        pytest.skip(f"nvidia-cutlass-dsl 4.8.0 is not in {CUTE_DSL_DIR} (tests/sglang_env/setup.sh)")
    if not zero_edit_hook_installed():
        pytest.skip("the zero-edit start-up hook is not in site-packages (sgl-shapeprof hook install)")
    tmp = tmp_path_factory.mktemp("cute")
    (tmp / "cute_kernels.py").write_text(KERNELS)  # CuTe compiles from the source file
    (tmp / "child.py").write_text(CHILD)
    out = tmp / "shapes.jsonl"
    env = dict(os.environ, SGLANG_PROFILE_SHAPES="1",  # the start-up hook on, as in a worker
               PYTHONPATH=os.pathsep.join(PATHS + [str(tmp)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, str(tmp / "child.py"), str(out), str(tmp)], capture_output=True,
                       text=True, env=env, timeout=600, cwd=str(tmp))
    assert r.returncode == 0, r.stderr[-3000:]
    return str(out), json.loads(r.stdout.strip().splitlines()[-1])


def test_each_call_of_a_compiled_kernel_is_one_record_by_its_parameter_names(child):
    path, seen = child
    # every call ran: each wrote its mark
    assert [r[1:] for r in seen["ran"]] == [[42.0, 0.0]] * 4 + [[0.0, 7.0], [42.0, 0.0], [42.0, 0.0]]
    recs = [r for r in load(path) if r["operation"].startswith("cute:")]  # not the child's own operators
    fill, mark = "cute:cute_kernels.fill", "cute:cute_kernels.Mark"
    x = {"mX": {"shape": [2, 4], "dtype": "torch.float32"}}
    got = [(r["operation"], r["inputs"], r["args"]) for r in recs[:7]]
    assert got == [(fill, x, {"n": 5}), (fill, x, {"n": 6}), (fill, x, {"n": 7}), (fill, x, {"n": 8}),
                   (mark, x, {"n": 4}),
                   ("cute:fill_aot.fill_fn", {"arg0": x["mX"]}, {"arg1": 9}),
                   (fill, x, {"n": 3})]   # from_dlpack(x): the torch tensor it was made from
    assert all(r["outputs"] is None for r in recs)


def test_a_call_that_raises_carries_the_exception_as_raised(child):
    path, seen = child
    assert seen["error"] is not None
    recs = [r for r in load(path) if r["operation"].startswith("cute:")]
    assert len(recs) == 8
    assert recs[-1]["error"] == seen["error"]
    assert recs[-1]["inputs"] == {"mX": {"shape": [3, 4], "dtype": "torch.float32"}}
