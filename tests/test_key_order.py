"""Where the fallback's key sits against the Python key, on every torch we
support and on both routes. Torch 2.11 lists DispatchKey::Fake above Python;
2.13+ below it (pytorch PR 178428); the second route's key (a torch whose
FakeTensor owns Fake: TESTING_ONLY_GenericMode) is above it everywhere. The
two orders see tensor subclasses and Python modes differently; what each
records is stated here, against oracles that do not share our code: torch's
own DispatchKey.h for the order, and Python code that logs the calls it
makes itself.

Whatever the order: a FakeTensorMode's, a FakeTensor's or a tracer's calls
are never recorded (they are not running the model)."""
import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from helpers import assert_same_stream, load, run_both
from torch.utils._python_dispatch import TorchDispatchMode

from sgl_shapeprof import ShapeProfiler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def header_keys():
    """DispatchKey's enumerators, from the header the build compiled
    against: the later one has the higher priority."""
    header = os.path.join(os.path.dirname(torch.__file__), "include", "c10", "core", "DispatchKey.h")
    with open(header) as f:
        return re.findall(r"^  (\w+),", f.read(), re.M)


def route_key() -> str:
    """The key this process's fallback sits on (installed by the first profiler)."""
    from sgl_shapeprof import _C
    ShapeProfiler("probe.jsonl").close()  # the cwd is the test's scratch folder (conftest)
    return _C.dispatch_key()


def key_above_python() -> bool:
    names = header_keys()
    return names.index(route_key()) > names.index("Python")


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
    """The route is the one docs/how-it-works.md names for this torch, and
    its key sits where that says against torch's header: Fake while no
    fallback holds it (above Python on 2.11, below on 2.13+), else
    TESTING_ONLY_GenericMode, above Python and autograd. The watch on
    upstream: the first torch in CI whose own fallback holds Fake fails
    here, and docs/how-it-works.md names it."""
    names = header_keys()
    fake_taken = os.environ.get("SHAPEPROF_TEST_FAKE_OWNER") == "1"
    assert route_key() == ("TESTING_ONLY_GenericMode" if fake_taken else "Fake")
    if fake_taken:
        assert names.index(route_key()) > names.index("AutogradFunctionality") > names.index("Python")
    assert key_above_python() == (fake_taken or torch.__version__ < "2.13")


def test_tensor_subclass_calls(tmp_path):
    """2.11: the subclass's call, as a TorchDispatchMode records it; 2.13+:
    the calls its __torch_dispatch__ makes on the plain tensors inside it."""
    x = Pair(torch.randn(3, 4), torch.randn(3, 4))

    def work():
        (x * 2).sum(0)
    if key_above_python():
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
    if key_above_python():
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


def math_bit_calls():
    """Out-of-place calls on inputs whose conjugate or negative bit is set
    (ATen's MathOpFallback materializes them with aten.clone before the
    call), one through a tensor list; each one's result kept."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.cfloat)
    return {"conj": lambda: torch.mul(x.conj(), x), "both": lambda: torch.mul(x.conj(), x.conj().imag),
            "neg": lambda: torch.mul(x.conj().imag, 2),
            "list": lambda: torch.cat([x.conj(), x]), "view": lambda: x.conj().t()}


@pytest.mark.parametrize("grad_mode", ["no_grad", "inference_mode"])
def test_a_math_bit_input_is_materialized_before_the_call_as_the_python_key_sees_it(tmp_path, grad_mode):
    """Outside grad mode, on both routes: the fallback's clones first, then
    the call on them, as the reference TorchDispatchMode records them (the
    second route, above autograd, makes those clones itself, docs/how-it-works.md);
    a view is not materialized; and every result is the one made without us
    (ours: the reference's hfft of a conjugate under inference_mode() is not,
    torch's own doing)."""
    for name, call in math_bit_calls().items():
        with getattr(torch, grad_mode)():
            alone = call()
            results = []
            ref, ours, _ = run_both(tmp_path, lambda m: (m.start_forward_pass(), results.append(call()),
                                                         m.end_forward_pass()))
        assert_same_stream(ref, ours)
        ops = [r["operation"] for r in ours]
        assert ("aten.clone.default" in ops) == (name != "view"), (name, ops)
        assert torch.equal(results[1].resolve_conj().resolve_neg(), alone.resolve_conj().resolve_neg()), name


def test_a_traced_graph_is_the_one_traced_without_us(tmp_path):
    """torch.jit.trace inside a logged pass, of a call on a conjugate input,
    outside grad mode: the graph is the one traced without the profiler
    (torch's clones of math-bit inputs are made below the tracer, untraced)."""
    x = torch.randn(3, 4, dtype=torch.cfloat)

    def f(a):
        return torch.mul(a.conj(), a.conj().imag)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace's own
        alone = str(torch.jit.trace(f, x).graph)
        prof = ShapeProfiler(tmp_path / "s.jsonl")
        prof.start_forward_pass()
        try:
            ours = str(torch.jit.trace(f, x).graph)
        finally:
            prof.end_forward_pass()
            prof.close()
    assert "aten::mul" in ours and ours == alone


def test_math_bits_in_grad_mode_and_in_place(tmp_path):
    """Where the second route records the call as the caller made it: in
    grad mode (a clone above autograd would join its graph) and in place (the
    fallback's clone and copy_ back are left to it). The first route records
    them as the reference does; the second, the reference's stream less
    those calls. The gradient is the one made without us."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.cfloat, requires_grad=True)
    ys = []

    def grad():
        ys.append(torch.mul(x.conj(), x.detach()))

    def in_place():
        with torch.no_grad():
            torch.randn(3, 4, dtype=torch.cfloat).conj().add_(1)
    grad()
    ys.pop().abs().sum().backward()
    alone, x.grad = x.grad.clone(), None
    for work in (grad, in_place):
        ref, ours, _ = run_both(tmp_path, lambda m: (m.start_forward_pass(), work(), m.end_forward_pass()))
        fallbacks = ("aten.clone.default", "aten.copy_.default")
        if route_key() != "Fake":
            ref = [r for r in ref if r["operation"] not in fallbacks]
        assert [(r["operation"], r["inputs"], r["outputs"]) for r in ours] == \
            [(r["operation"], r["inputs"], r["outputs"]) for r in ref], work.__name__
        assert any(r["operation"] in fallbacks for r in ours) == (route_key() == "Fake"), work.__name__
    ys.pop().abs().sum().backward()   # the graph recorded under us
    assert torch.equal(x.grad, alone)


ROUTE_CHILD = r'''
import json, os, sys, torch
sys.path.insert(0, os.path.join(sys.argv[2], "tests"))
if sys.argv[3] == "taken":
    from fake_owner.sitecustomize import take_fake
    take_fake()
from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.demo.models import make_llama, run_llama
model = make_llama(torch.float32)
prof = ShapeProfiler(sys.argv[1])
for ctx in (torch.enable_grad, torch.no_grad, torch.inference_mode,
            lambda: torch.autocast("cpu", dtype=torch.bfloat16)):
    with ctx():
        run_llama(model, prof, decode_steps=1)
prof.close()
'''


def test_the_second_route_writes_the_first_routes_stream(tmp_path):
    """A torch whose FakeTensor holds DispatchKey::Fake (stood in for by a
    fallback registered on it first): the profiler takes its second route by
    itself, says so in the summary and in analyze, and a Llama's passes in
    grad, no-grad, inference and autocast mode are recorded call for call as
    on the first route."""
    from helpers import run_python
    streams, keys = {}, {}
    for fake in ("free", "taken"):
        path = tmp_path / f"{fake}.jsonl"
        # (the child chooses: not the stand-in that `make test-second-route` puts in every child)
        r = run_python(ROUTE_CHILD, args=(path, ROOT, fake), timeout=300, env_extra={"SHAPEPROF_TEST_FAKE_OWNER": "0"})
        assert r.returncode == 0, r.stderr[-3000:]
        streams[fake] = [(x["forward_pass"], x["operation"], x["inputs"], x["outputs"]) for x in load(path)]
        keys[fake] = json.loads((tmp_path / f"{fake}_summary.json").read_text())["dispatch_key"]
    assert keys == {"free": "Fake", "taken": "TESTING_ONLY_GenericMode"}
    assert len(streams["free"]) > 100 and streams["taken"] == streams["free"]
    said = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(tmp_path / "taken.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert "recorded through DispatchKey::TESTING_ONLY_GenericMode, the second route" in said.stdout, said.stdout
    said = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(tmp_path / "taken.jsonl"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(said.stdout)["files"][0]["dispatch_key"] == "TESTING_ONLY_GenericMode"
    said = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(tmp_path / "free.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert "recorded through" not in said.stdout
