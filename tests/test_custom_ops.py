"""Custom operators (torch.library): recorded by their schema's argument
names, and a Python kernel's exception recorded exactly as the caller gets
it (type(e).__name__ and str(e), only valid Unicode written), the caller
unharmed. torch.library and how a Python kernel's exception crosses c10
change between torch releases: this module runs on every torch
(tests/placement.py)."""
import re

import pytest
import torch
from helpers import load

from sgl_shapeprof import ShapeProfiler


def profile(tmp_path, fn):
    path = tmp_path / "s.jsonl"
    prof = ShapeProfiler(path)
    with prof.forward_pass():
        fn()
    prof.close()
    return load(path)


@pytest.fixture(scope="module")
def custom_ops():
    lib = torch.library.Library("shapeprof_test", "DEF")
    lib.define("scale(Tensor x, float k) -> Tensor")
    lib.define("pair(Tensor x) -> (Tensor, Tensor)")
    lib.define("fail(Tensor x, str msg) -> Tensor")
    lib.impl("scale", lambda x, k: x * k, "CPU")
    lib.impl("pair", lambda x: (x + 1, x - 1), "CPU")

    def fail(x, msg):
        raise ValueError(msg)
    lib.impl("fail", fail, "CPU")
    yield torch.ops.shapeprof_test
    lib._destroy()


def test_custom_ops_and_escaping(tmp_path, custom_ops):
    x = torch.randn(3, 5)
    nasty = 'quote " backslash \\ newline \n tab \t bell \x07 é 漢字'

    def run():
        custom_ops.scale(x, 2.0)
        custom_ops.pair.default(x)
        with pytest.raises(ValueError) as info:
            custom_ops.fail(x, nasty)
        assert str(info.value) == nasty

    recs = profile(tmp_path, run)
    ops = [r["operation"] for r in recs if r["operation"].startswith("shapeprof_test")]
    assert ops == ["shapeprof_test.scale.default", "shapeprof_test.pair.default",
                   "shapeprof_test.fail.default"]
    err = recs[-1]
    assert err["outputs"] is None
    assert err["error"] == {"error_type": "ValueError", "error_message": nasty}
    assert err["inputs"] == {"x": {"shape": [3, 5], "dtype": "torch.float32"}}


class Élan_Error(Exception):
    """A class name that is not ASCII."""


def _punctuated():
    # a name no `class` statement can give, as some libraries make them
    return type("Odd-Name.With Spaces!", (RuntimeError,), {})


class BadStr(ValueError):
    def __str__(self):
        raise TypeError("no str for you")


@pytest.mark.parametrize("make", [
    lambda: ValueError("nul \0 inside"),
    lambda: AssertionError(),                          # a bare assert: str(e) == ""
    lambda: ValueError("lone \udc80 surrogate \ud800"),
    lambda: ValueError("before\n\nAt:\n  not a traceback"),
    lambda: Élan_Error("non-ASCII class"),
    lambda: _punctuated()("punctuated class"),
    lambda: KeyError("quoted by str()"),
], ids=["nul", "empty", "surrogates", "at-marker", "non-ascii-class", "punctuated-class", "keyerror"])
def test_python_kernel_errors_are_recorded_exactly(tmp_path, custom_ops, make):
    """type(e).__name__ and str(e) of the exception the caller receives,
    taken from the exception object, not rebuilt from pybind11's text."""
    exc = make()
    lib = torch.library.Library("shapeprof_exc", "FRAGMENT")
    name = f"raise_{abs(hash(repr(exc))) % 10**8}"
    lib.define(f"{name}(Tensor x) -> Tensor")

    def kernel(x):
        raise exc
    lib.impl(name, kernel, "CPU")
    got = []

    def run():
        with pytest.raises(type(exc)) as info:
            getattr(torch.ops.shapeprof_exc, name)(torch.ones(2))
        got.append(info.value)

    try:
        recs = profile(tmp_path, run)
    finally:
        lib._destroy()
    assert got[0] is exc                                 # the caller gets the very exception
    (err,) = [r for r in recs if r["operation"] == f"shapeprof_exc.{name}.default"]
    # only valid Unicode is written: a lone surrogate (not UTF-8) becomes
    # U+FFFD, as Python's own UTF-8 decoder replaces it
    said = str(exc).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    assert err["error"] == {"error_type": type(exc).__name__, "error_message": said}
    assert (said == str(exc)) == ("surrogate" not in str(exc))
    raw = (tmp_path / "s.jsonl").read_bytes()
    raw.decode("utf-8")                                  # strict: valid UTF-8 ...
    assert not re.search(rb"\\u[dD][89a-fA-F]", raw)   # ... and no surrogate escape
    assert err["outputs"] is None


def test_python_kernel_error_whose_str_raises(tmp_path):
    lib = torch.library.Library("shapeprof_exc2", "DEF")
    lib.define("f(Tensor x) -> Tensor")

    def kernel(x):
        raise BadStr("x")
    lib.impl("f", kernel, "CPU")

    def run():
        with pytest.raises(BadStr):
            torch.ops.shapeprof_exc2.f(torch.ones(2))
    try:
        recs = profile(tmp_path, run)
    finally:
        lib._destroy()
    (err,) = [r for r in recs if r["operation"] == "shapeprof_exc2.f.default"]
    assert err["outputs"] is None and err["error"]["error_type"]  # recorded, the host unharmed
