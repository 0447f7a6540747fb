"""A broad parity sweep over operator calls nobody here wrote: PyTorch's own
OpInfo database (every operator's sample inputs, float32 on CPU), under
inference_mode() and no_grad(), each call's stream compared with the
TorchDispatchMode reference record by record.

A difference is the mode's own doing when it disappears once a do-nothing
dispatch mode is pushed around our run: some composite kernels check whether
any dispatch mode is active and then take another path (README: differences).
Any other difference fails the test."""
import json
import warnings

import pytest
import torch
from reference_logger import ReferenceLogger
from torch.utils._python_dispatch import TorchDispatchMode

from sgl_shapeprof import ShapeProfiler, _C

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
except Exception as e:  # pragma: no cover - a torch without its test helpers
    op_db = None
    why = f"torch's OpInfo database does not import here: {e}"

KEYS = ("operation", "inputs", "outputs", "error")
SAMPLES_PER_OP = 2


class DoNothing(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def stream(path):
    with open(path) as f:
        return [tuple(json.dumps(r.get(k), sort_keys=True) for k in KEYS) for r in map(json.loads, f)]


def logged(marker_cls, path, call, mode=None):
    marker = marker_cls(path)
    try:
        if mode is not None:
            with mode:
                marker.start_forward_pass()
                call()
                marker.end_forward_pass()
        else:
            marker.start_forward_pass()
            call()
            marker.end_forward_pass()
    finally:
        marker.close()
    return stream(getattr(marker, "path", path))


@pytest.mark.skipif(op_db is None, reason="torch.testing._internal is not importable")
@pytest.mark.parametrize("grad_mode", ["inference_mode", "no_grad"])
def test_opinfo_sweep_matches_the_reference(tmp_path, grad_mode):
    ctx = getattr(torch, grad_mode)
    same, by_mode, unexplained = 0, [], []
    for info in op_db:
        try:
            samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=False))[:SAMPLES_PER_OP]
        except Exception:
            continue
        for n, sample in enumerate(samples):
            def call():
                try:
                    info.op(sample.input, *sample.args, **sample.kwargs)
                except Exception:
                    pass  # a raising call is part of the stream too
            with ctx(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = logged(ReferenceLogger, str(tmp_path / "ref.jsonl"), call)
                ours = logged(ShapeProfiler, str(tmp_path / "ours.jsonl"), call)
                if ours == ref:
                    same += 1
                    continue
                with_mode = logged(ShapeProfiler, str(tmp_path / "mode.jsonl"), call, DoNothing())
            (by_mode if with_mode == ref else unexplained).append(f"{info.name}[{n}]")
    print(f"{grad_mode}: {same} identical, {len(by_mode)} differ only by the mode's doing: "
          f"{', '.join(by_mode) or '-'}")
    assert same > 1000, "the sweep ran too few samples to mean anything"
    assert not unexplained, f"streams differ from the reference: {unexplained}"


def test_sparse_masked_reduction_detaches_are_the_modes_own(tmp_path):
    """The README's one inference_mode() difference: sparse masked.* reductions
    call aten.detach only while a dispatch mode is active. The first route
    then records them too; the second never does."""
    torch.manual_seed(0)
    x = torch.randn(4, 5).to_sparse()
    mask = (torch.rand(4, 5) > 0.3).to_sparse()

    def run(logger, mode=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.inference_mode():
                logger.start_forward_pass()
                if mode is None:
                    torch.masked.sum(x, 1, mask=mask)
                else:
                    with mode:
                        torch.masked.sum(x, 1, mask=mask)
                logger.end_forward_pass()
        logger.close()

    def ops(path):
        return [json.loads(line)["operation"] for line in open(path)]
    run(ReferenceLogger(str(tmp_path / "ref.jsonl")))
    run(ShapeProfiler(str(tmp_path / "ours.jsonl")))
    run(ShapeProfiler(str(tmp_path / "ours_mode.jsonl")), DoNothing())
    ref, ours, ours_mode = (ops(tmp_path / f"{n}.jsonl") for n in ("ref", "ours", "ours_mode"))
    assert "aten.detach.default" in ref and "aten.detach.default" not in ours
    assert [o for o in ref if o != "aten.detach.default"] == ours
    if _C.dispatch_key() == "Fake":
        assert ours_mode == ref      # with a mode active we see the same detaches
    else:
        # the second route, above autograd: they are made inside the call,
        # under its key, where it does not look (docs/how-it-works.md)
        assert ours_mode == ours
