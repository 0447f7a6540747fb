"""Issue 53: DeepEP's dispatch and combine reach the records through its
door. The real sgl-deep-ep 0.1.2.post1 (SGLang 0.5.23's pin,
tests/sglang_env/setup.sh) refuses to import without a GPU (its
prerequisites check), so its real Buffer class (deep_ep/buffers/legacy.py,
with its real utils) is loaded in a package whose native module (_C) is
stood in, and a Buffer's native runtime returns tensors of the shapes its
docstring gives. The door is put on as a user has it (sgl_shapeprof
imported first). The oracle is the tensors the test passed and the stand-in
returned."""
import json
import os
import shutil
import subprocess
import sys

import pytest

DEEP_EP_DIR = os.path.join(sys.prefix, "deep-ep-0.1.2.post1", "deep_ep")  # setup.sh's

NATIVE = '''
class Config:
    pass
class EventHandle:
    pass
topk_idx_t = None
'''

CHILD = r'''
import json, sys, torch
import sgl_shapeprof  # its doors first, as users have it
from sgl_shapeprof import ShapeProfiler
from deep_ep.buffers.legacy import Buffer

tokens, hidden, top_k, experts, local, max_per_rank, ranks = 6, 128, 2, 16, 4, 8, 2
bf16 = torch.bfloat16


class Runtime:  # the native buffer: what it returns, by DeepEP's docstring
    def low_latency_dispatch(self, x, topk_idx, *rest):
        recv = torch.zeros(local, max_per_rank * ranks, hidden, dtype=bf16)
        return recv, None, torch.zeros(local, dtype=torch.int32), torch.zeros(local, 16, dtype=torch.int32), \
            torch.zeros(local, ranks, dtype=torch.int64), None, None

    def low_latency_combine(self, x, topk_idx, topk_weights, *rest):
        return torch.zeros(topk_idx.shape[0], x.shape[2], dtype=bf16), None, None


buf = object.__new__(Buffer)  # its __init__ sets up NVSHMEM: the runtime is stood in
buf.runtime, buf.nvshmem_qp_depth = Runtime(), 1 << 10
x, topk_idx = torch.zeros(tokens, hidden, dtype=bf16), torch.zeros(tokens, top_k, dtype=torch.int64)
topk_weights = torch.zeros(tokens, top_k, dtype=torch.float32)
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass("decode")
recv, count, handle, event, hook = buf.low_latency_dispatch(x, topk_idx, max_per_rank, experts, use_fp8=False)
combined, event, hook = buf.low_latency_combine(recv, topk_idx, topk_weights, handle)
prof.end_forward_pass()
prof.close()
print(json.dumps({"door": getattr(Buffer.low_latency_dispatch, "_shapeprof_operation", None)}))
'''


@pytest.fixture
def stand_in_package(tmp_path):
    if not os.path.isfile(os.path.join(DEEP_EP_DIR, "buffers", "legacy.py")):
        pytest.skip(f"sgl-deep-ep is not in {os.path.dirname(DEEP_EP_DIR)} (tests/sglang_env/setup.sh)")
    pkg = tmp_path / "pkg" / "deep_ep"
    for sub in ("buffers", "utils"):
        shutil.copytree(os.path.join(DEEP_EP_DIR, sub), pkg / sub)
    (pkg / "__init__.py").write_text("")              # the real one checks for a GPU first
    (pkg / "buffers" / "__init__.py").write_text("")  # ...and imports the elastic buffer too
    (pkg / "_C.py").write_text(NATIVE)
    return tmp_path / "pkg"


def test_deep_eps_dispatch_and_combine_are_recorded_by_their_parameters(stand_in_package, tmp_path):
    records = tmp_path / "shapes.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(stand_in_package),
                                                                    os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", CHILD, str(records)], capture_output=True, text=True, env=env,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1])["door"] == "deep_ep:buffers.legacy.Buffer.low_latency_dispatch"
    with open(records) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    recs = [x for x in recs if x["operation"].startswith("deep_ep:")]
    assert [x["operation"] for x in recs] == ["deep_ep:buffers.legacy.Buffer.low_latency_dispatch",
                                              "deep_ep:buffers.legacy.Buffer.low_latency_combine"]
    dispatch, combine = recs
    assert dispatch["inputs"]["x"] == {"shape": [6, 128], "dtype": "torch.bfloat16"}
    assert dispatch["inputs"]["topk_idx"] == {"shape": [6, 2], "dtype": "torch.int64"}
    assert (dispatch["args"]["num_max_dispatch_tokens_per_rank"], dispatch["args"]["num_experts"],
            dispatch["args"]["use_fp8"]) == (8, 16, False)
    assert "self" not in dispatch["inputs"] and "self" not in dispatch["args"]
    assert dispatch["outputs"][0] == {"shape": [4, 16, 128], "dtype": "torch.bfloat16"}  # per local expert
    assert combine["inputs"]["x"] == {"shape": [4, 16, 128], "dtype": "torch.bfloat16"}
    assert combine["outputs"][0] == {"shape": [6, 128], "dtype": "torch.bfloat16"}
