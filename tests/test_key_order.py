"""Where the fallback's key sits against the Python key, on every torch we
support. Torch 2.11 lists DispatchKey::Fake above Python; 2.13+ below it
(pytorch PR 178428). The two orders see tensor subclasses and Python modes
differently; what each records is stated here, against oracles that do not
share our code: torch's own DispatchKey.h for the order, and Python code
that logs the calls it makes itself.

Whatever the order: a FakeTensorMode's, a FakeTensor's or a tracer's calls
are never recorded (they are not running the model)."""
import os
import re

import pytest
import torch
from helpers import load, run_both
from torch.utils._python_dispatch import TorchDispatchMode

from sgl_shapeprof import ShapeProfiler


def fake_above_python() -> bool:
    """From the header the build compiled against: the later enumerator of
    DispatchKey has the higher priority."""
    header = os.path.join(os.path.dirname(torch.__file__), "include", "c10", "core", "DispatchKey.h")
    with open(header) as f:
        names = re.findall(r"^  (\w+),", f.read(), re.M)
    return names.index("Fake") > names.index("Python")


def calls(records):
    return [(r["operation"], [v["shape"] for v in r["inputs"].values() if isinstance(v, dict)])
            for r in records]


def record(tmp_path, work):
    prof = ShapeProfiler(tmp_path / "s.jsonl")
    prof.start_forward_pass()
    try:
        work()
    finally:
        prof.end_forward_pass()
        prof.close()
    return load(tmp_path / "s.jsonl")


def shapes(args):
    return [list(x.shape) for x in args if isinstance(x, torch.Tensor)]


class Pair(torch.Tensor):
    """A subclass holding two plain tensors; its __torch_dispatch__ runs
    each call on both and notes each call it makes."""
    made = []

    @staticmethod
    def __new__(cls, a, b):
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a, b):
        self.a, self.b = a, b

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        outs = []
        for side in ("a", "b"):
            inner = [getattr(x, side) if isinstance(x, Pair) else x for x in args]
            outs.append(func(*inner, **(kwargs or {})))
            cls.made.append((str(func), shapes(inner)))
        return Pair(*outs)


def test_key_order_is_known():
    """Our build says the same order as torch's header (the docs name each)."""
    assert fake_above_python() == (torch.__version__ < "2.13")


def test_tensor_subclass_calls(tmp_path):
    """2.11: the subclass's call, as a TorchDispatchMode records it; 2.13+:
    the calls its __torch_dispatch__ makes on the plain tensors inside it."""
    x = Pair(torch.randn(3, 4), torch.randn(3, 4))

    def work():
        (x * 2).sum(0)
    if fake_above_python():
        ref, ours, _ = run_both(tmp_path, lambda m: (m.start_forward_pass(), work(), m.end_forward_pass()))
        assert calls(ours) == calls(ref) == [("aten.mul.Tensor", [[3, 4]]), ("aten.sum.dim_IntList", [[3, 4]])]
    else:
        Pair.made = []
        ours = record(tmp_path, work)
        assert len(Pair.made) == 4 and calls(ours) == Pair.made


def test_python_mode_that_rewrites_calls(tmp_path):
    """A user's mode that runs other calls than it was given: 2.11 records
    the call the mode got; 2.13+ the calls it made."""
    made = []

    class MmAsTransposed(TorchDispatchMode):
        """x @ w run as (w.T @ x.T).T, each call it makes noted."""
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            def run(op, *a):
                made.append((str(op), shapes(a)))
                return op(*a)
            if func is torch.ops.aten.mm.default:
                x, w = args
                t = torch.ops.aten.t.default
                return run(t, run(torch.ops.aten.mm.default, run(t, w), run(t, x)))
            return func(*args, **(kwargs or {}))

    x, w = torch.randn(2, 3), torch.randn(3, 5)

    def work():
        with MmAsTransposed():
            torch.mm(x, w)
    ours = record(tmp_path, work)
    if fake_above_python():
        assert calls(ours) == [("aten.mm.default", [[2, 3], [3, 5]])]
    else:
        assert len(made) == 4 and calls(ours) == made


@pytest.mark.parametrize("how", ["mode", "fake tensors", "make_fx fake"])
def test_tracing_is_never_recorded(tmp_path, how):
    """FakeTensorMode inside a logged pass, FakeTensors used outside their
    mode, and make_fx's fake tracing: nothing is recorded on any torch
    (they compute no real shape), and the results are fake's own."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    mode = FakeTensorMode()
    with mode:
        fx = torch.randn(4, 5)
    real = torch.randn(4, 5)
    out = []

    def work():
        if how == "mode":
            with mode:
                out.append(torch.mm(fx, fx.t()).relu())
        elif how == "fake tensors":
            out.append(torch.mm(fx, fx.t()).relu())
        else:
            out.append(make_fx(lambda t: torch.mm(t, t.t()).relu(), tracing_mode="fake")(real))
    ours = record(tmp_path, work)
    assert ours == []
    if how == "make_fx fake":
        assert "mm" in str(out[0].graph)
    else:
        assert isinstance(out[0], FakeTensor) and out[0].shape == (4, 4)


def test_real_tracing_records_the_real_calls(tmp_path):
    """make_fx's real tracing runs the calls on real tensors: recorded, on
    every torch, as the same calls with the same shapes."""
    from torch.fx.experimental.proxy_tensor import make_fx
    real = torch.randn(4, 5)
    ours = record(tmp_path, lambda: make_fx(lambda t: torch.mm(t, t.t()).relu())(real))
    assert calls(ours) == [("aten.t.default", [[4, 5]]), ("aten.mm.default", [[4, 5], [5, 4]]),
                           ("aten.relu.default", [[4, 4]])]
