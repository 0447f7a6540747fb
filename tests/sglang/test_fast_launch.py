"""Issue 53: SGLang diffusion's replay_launches relaunches a Triton
wrapper's compiled kernels past Triton's run, where Triton's door records
launches. In a logged pass the wrapper runs (SGLang's own switch held off),
so its launches reach that door; outside, SGLang replays as before. SGLang
0.5.23's real decorator, put on by the start-up hook as a server has it;
the oracle is whether the decorated function itself ran."""
import json
import os

from helpers import PKG_ROOT, ROOT, needs_sglang, run_python

pytestmark = needs_sglang("0.5.23")

ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_PROFILE_SHAPES": "1",
       "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "tests", "sglang_env", "stubs"), PKG_ROOT])}

CHILD = r'''
import json, sys, torch
from sgl_shapeprof import ShapeProfiler
from sglang.kernels.ops.diffusion.common import fast_launch

ran = []


@fast_launch.replay_launches
def wrapper(x: torch.Tensor, n: int):
    ran.append(n)  # launches nothing and returns None: SGLang's plan for it is to return None, unrun


x = torch.zeros(4, 8)
wrapper(x, 1)  # SGLang records its plan
wrapper(x, 1)  # replayed: the wrapper does not run
prof = ShapeProfiler(sys.argv[1])
prof.start_forward_pass("denoise")
wrapper(x, 2)  # in a logged pass: the wrapper runs, as its launches would
wrapper(x, 2)
during = fast_launch._ENABLED
prof.end_forward_pass()
wrapper(x, 3)  # a new signature: planned
wrapper(x, 3)  # and replayed again
print(json.dumps({"ran": ran, "during": during, "after": fast_launch._ENABLED}))
prof.close()
'''


def test_a_logged_pass_runs_the_wrapper_that_replay_launches_would_skip(tmp_path):
    r = run_python(CHILD, env_extra=ENV, timeout=300, cwd=str(tmp_path), args=[str(tmp_path / "shapes.jsonl")])
    assert r.returncode == 0, r.stderr[-3000:]
    said = json.loads(r.stdout.strip().splitlines()[-1])
    assert said == {"ran": [1, 2, 2, 3], "during": False, "after": True}, said
