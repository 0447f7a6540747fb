"""Inductor's door (integrations/inductor/; docs/kernels.md): the Triton
kernels torch.compile generates launch through their CachingAutotuner's
run(), which the door wraps. Inductor's Triton path needs a GPU, so the
launcher is stood in: the autotuner is torch's own (its real run(), its
autotuning, its grid expression), only the function it finally calls to
launch is ours, and records what it was given. The oracle is what the test
passed in, the config it made the autotuner pick, and the grid worked out
here from the numel and the block size."""
import json
import math

import pytest
import torch
from helpers import load

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.integrations import registry

heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
from inductor_stand_in import autotuner, config  # noqa: E402

from sgl_shapeprof.integrations.inductor import door, seam  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def door_on():
    assert registry.hooks()[seam.HEURISTICS] == (door.__name__, "patch_triton_heuristics")
    door.patch_triton_heuristics(heuristics)  # what the start-up hook does when Inductor is imported
    yield


def run_pass(tmp_path, work, outside=None):
    path = str(tmp_path / "shapes.jsonl")
    prof = ShapeProfiler(path)
    (outside or work)()  # outside a pass: not recorded
    prof.start_forward_pass("decode")
    try:
        work()
    finally:
        prof.end_forward_pass()
        prof.close()
    return load(path), json.load(open(str(tmp_path / "shapes_summary.json")))


def test_each_launch_is_a_record_with_the_config_that_ran_and_its_grid(tmp_path):
    chosen = config(128, 4)
    at, launched = autotuner([config(64, 2), chosen])
    x, y = torch.arange(1000, dtype=torch.float32), torch.empty(1000)
    calls = []

    def work():  # the first launch autotunes, inside the pass
        for n in (1000, 300):
            at.run(x, y, n, stream=7)
            calls.append(n)
    other, _ = autotuner([config(64, 2)])
    recs, summary = run_pass(tmp_path, work, outside=lambda: other.run(x, y, 5, stream=7))
    # the real run() launched the config its autotuning chose, with what it was given
    assert [(b, a[2], s) for b, a, s in launched] == [(128, n, 7) for n in calls]
    assert all(a[0] is x and a[1] is y for _, a, _ in launched)
    op = "inductor:triton_poi_fused_add_0"
    assert [r["operation"] for r in recs] == [op, op]  # not the autotuner's torch.ones(4).sum()
    f32 = {"shape": [1000], "dtype": "torch.float32"}
    for r, n in zip(recs, calls):
        assert r["inputs"] == {"in_ptr0": f32, "out_ptr0": f32}
        more = {k: getattr(chosen, k) for k in ("num_ctas", "maxnreg") if getattr(chosen, k, None) is not None}
        assert r["args"] == {"xnumel": n, "XBLOCK": 128, "grid": [math.ceil(n / 128), 1, 1],
                             "num_warps": 4, "num_stages": 1, **more}
        assert r["outputs"] is None and "error" not in r
    assert summary["operation_counts"] == {op: 2}


def test_a_launch_that_raises_is_recorded_with_its_exception(tmp_path):
    at, launched = autotuner([config(32, 1)])
    x, y = torch.zeros(8), torch.zeros(8)
    caught = []

    def work():
        try:
            at.run(x, y, -1, stream=0)
        except ValueError as e:
            caught.append(str(e))
    recs, _ = run_pass(tmp_path, work)
    assert caught == ["xnumel -1 < 0"] * 2 and launched == []
    assert len(recs) == 1
    assert recs[0]["error"] == {"error_type": "ValueError", "error_message": "xnumel -1 < 0"}
    assert recs[0]["args"]["xnumel"] == -1 and recs[0]["args"]["XBLOCK"] == 32
