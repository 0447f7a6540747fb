"""Issue 53: SGLang's PyNCCL communicator (NCCL through ctypes, never the
dispatcher) reaches the records through its door. SGLang 0.5.23's real
PyNcclCommunicator class runs each method's own code, with its native
library (the ctypes NCCLLibrary) stood in: the stand-in keeps what each
NCCL call was given. The hook puts the door on as a server has it
(SGLANG_PROFILE_SHAPES and the start-up hook). The oracle: the tensors the
test passed, and the NCCL calls the methods made."""
import json
import os

from helpers import PKG_ROOT, ROOT, needs_sglang, run_python

pytestmark = needs_sglang("0.5.23")

ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "SGLANG_NCCL_SO_PATH": "/nonexistent/libnccl.so.2", "SGLANG_PROFILE_SHAPES": "1",
       "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "tests", "sglang_env", "stubs"), PKG_ROOT])}

CHILD = r'''
import json, sys, types, torch
import sgl_shapeprof
from sgl_shapeprof import ShapeProfiler
from sglang.srt.distributed.device_communicators import pynccl

nccl_calls = []


class NcclStandIn:  # the ctypes NCCL library: which calls it was given
    def __getattr__(self, name):
        return lambda *args: nccl_calls.append(name)


def communicator(disabled=False):
    c = object.__new__(pynccl.PyNcclCommunicator)  # its __init__ makes an NCCL communicator
    c.disabled, c.device, c.comm, c.nccl = disabled, torch.device("cpu"), None, NcclStandIn()
    c.world_size, c.rank = 2, 0
    c._resolve_stream = lambda: types.SimpleNamespace(cuda_stream=0)
    return c


bf16 = torch.bfloat16
comm, off = communicator(), communicator(disabled=True)
prof = ShapeProfiler(sys.argv[1], args=True)
prof.start_forward_pass("decode")
comm.all_reduce(torch.zeros(6, 128, dtype=bf16))
comm.all_gather(torch.zeros(12, 128, dtype=bf16), torch.zeros(6, 128, dtype=bf16))
comm.reduce_scatter(torch.zeros(3, 128, dtype=bf16), torch.zeros(6, 128, dtype=bf16))
comm.send(torch.zeros(6, 128, dtype=bf16), 1)
comm.recv(torch.zeros(6, 128, dtype=bf16), 1)
off.all_reduce(torch.zeros(6, 128, dtype=bf16))  # disabled: runs nothing, so no record
prof.end_forward_pass()
comm.all_reduce(torch.zeros(5, 128, dtype=bf16))  # outside a logged pass: not recorded
prof.close()
print(json.dumps({"door": getattr(pynccl.PyNcclCommunicator.all_reduce, "_shapeprof_operation", None),
                  "nccl": nccl_calls}))
'''


def test_pynccls_collectives_are_recorded_by_their_parameters(tmp_path):
    records = tmp_path / "shapes.jsonl"
    r = run_python(CHILD, env_extra=ENV, timeout=300, cwd=str(tmp_path), args=[str(records)])
    assert r.returncode == 0, r.stderr[-3000:]
    said = json.loads(r.stdout.strip().splitlines()[-1])
    op = "pynccl:sglang.srt.distributed.device_communicators.pynccl.PyNcclCommunicator."
    assert said["door"] == op + "all_reduce"
    # the methods really ran, in order (the disabled one called nothing)
    assert said["nccl"] == ["ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend",
                                            "ncclRecv", "ncclAllReduce"]
    with open(records) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    recs = [x for x in recs if x["operation"].startswith("pynccl:")]
    for x in recs:  # arguments on: layouts too; the shapes are what is held here
        x["inputs"] = {k: {"shape": v["shape"], "dtype": v["dtype"]} for k, v in x["inputs"].items()}
    assert [x["operation"][len(op):] for x in recs] == ["all_reduce", "all_gather", "reduce_scatter", "send",
                                                        "recv"]
    t = {"shape": [6, 128], "dtype": "torch.bfloat16"}
    all_reduce, all_gather, reduce_scatter, send, recv = recs
    assert all_reduce["inputs"] == {"tensor": t}
    assert all_gather["inputs"] == {"output_tensor": {"shape": [12, 128], "dtype": "torch.bfloat16"},
                                    "input_tensor": t}
    assert reduce_scatter["inputs"] == {"output_tensor": {"shape": [3, 128], "dtype": "torch.bfloat16"},
                                        "input_tensor": t}
    assert send["inputs"] == {"tensor": t} and send["args"]["dst"] == 1
    assert recv["inputs"] == {"tensor": t} and recv["args"]["src"] == 1
    assert all("self" not in x["inputs"] and "self" not in x.get("args", {}) for x in recs)
