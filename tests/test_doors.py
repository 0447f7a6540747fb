"""A kernel library's API calls through a door (recording/doors.py;
docs/FORMAT.md, "Kernel library calls"), with a stand-in library of our own
here: its functions run torch operators and call each other, as FlashInfer's
do. The real FlashInfer's door is tested in tests/sglang/test_flashinfer.py.
The oracle is what each test passed in and got back, never our records.

Below, the doors that `import sgl_shapeprof` puts on (integrations/
door_finder.py), in fresh processes without the variable: a stand-in
FlashInfer under FlashInfer's module names goes through the real registry,
finder and FlashInfer door."""
import contextlib
import enum
import io
import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import PKG_ROOT, ROOT, copy_hook, load

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.analysis.analyze import analyze_file
from sgl_shapeprof.analysis.cost import GPUS, WITHIN, costs
from sgl_shapeprof.cli.main import main
from sgl_shapeprof.recording.doors import api_door, operation_name


class Layout(enum.Enum):
    HND = 1
    NHD = 2


def _norm(input, weight, eps=1e-6, out=None):
    y = input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps) * weight
    return y if out is None else out.copy_(y)


def _decode(query, kv_cache, block_tables, scale=1.0, layout=Layout.HND, backend="auto"):
    k, v = kv_cache
    if backend == "boom":
        raise ValueError(f"unsupported backend {backend!r} for {tuple(query.shape)}")
    return (query * scale) @ k[0].t() @ v[0], block_tables.sum()


def _fused(x, w):
    return norm(x, w)  # an API call inside another: the outer one is the record


_norm.__module__ = _decode.__module__ = _fused.__module__ = "stand_in.ops"
norm = api_door(_norm, operation_name("stand_in", _norm))
decode = api_door(_decode, operation_name("stand_in", _decode))
fused = api_door(_fused, operation_name("stand_in", _fused))


def record(tmp_path, work, **opts):
    path = str(tmp_path / "doors.jsonl")
    prof = ShapeProfiler(path, **opts)
    with torch.inference_mode():
        work()  # outside a pass: not recorded
        prof.start_forward_pass("decode")
        try:
            out = work()
        finally:
            prof.end_forward_pass()
            prof.close()
    with open(str(tmp_path / "doors_summary.json")) as f:
        return load(path), json.load(f), out


def test_a_call_is_one_record_with_its_tensors_by_name_values_and_outputs(tmp_path):
    q, k, v = torch.randn(2, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8)
    tables = torch.zeros(2, 5, dtype=torch.int32)

    def work():
        return decode(q, (k, v), tables, scale=0.5, layout=Layout.NHD)
    recs, summary, (out, total) = record(tmp_path, work)
    assert [r["operation"] for r in recs] == ["stand_in:ops._decode"]  # none of its operators
    r = recs[0]
    assert r["inputs"] == {
        "query": {"shape": list(q.shape), "dtype": "torch.float32"},
        "kv_cache": [{"shape": list(k.shape), "dtype": "torch.float32"},
                     {"shape": list(v.shape), "dtype": "torch.float32"}],
        "block_tables": {"shape": list(tables.shape), "dtype": "torch.int32"}}
    assert r["args"] == {"scale": 0.5, "layout": "Layout.NHD", "backend": "auto"}
    assert r["outputs"] == [{"shape": list(out.shape), "dtype": str(out.dtype)},
                            {"shape": list(total.shape), "dtype": str(total.dtype)}]
    assert summary["operation_counts"] == {"stand_in:ops._decode": 1}


def test_a_call_that_raises_is_recorded_with_its_exception_and_raises_as_it_was(tmp_path):
    q, kv = torch.randn(2, 8), (torch.randn(3, 4, 8), torch.randn(3, 4, 8))
    tables = torch.zeros(2, 5, dtype=torch.int32)
    caught = []

    def work():
        try:
            decode(q, kv, tables, backend="boom")
        except ValueError as e:
            caught.append(e)
    recs, _, _ = record(tmp_path, work)
    assert len(caught) == 2  # outside the pass and inside: the same exception
    assert [r["operation"] for r in recs] == ["stand_in:ops._decode"]
    assert recs[0]["error"] == {"error_type": "ValueError", "error_message": str(caught[1])}
    assert recs[0]["args"]["backend"] == "boom"


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def _raising(x, error):
    raise error


raising = api_door(_raising, operation_name("stand_in", _raising))


def test_an_exception_is_the_callers_own_and_its_text_is_what_str_gives(tmp_path):
    """The door's native path hands the caller the very exception raised,
    its traceback with it; the record carries type(e).__name__ and str(e):
    a NUL byte kept, a lone surrogate as valid Unicode, a __str__ that
    raises said so."""
    x = torch.randn(2)
    odd, unprintable = ValueError("a\x00b \udcff c"), _Unprintable()
    caught = []

    def work():
        for error in (odd, unprintable):
            try:
                raising(x, error)
            except Exception as e:
                caught.append((e, e.__traceback__.tb_next is not None))
    recs, _, _ = record(tmp_path, work)
    assert [e for e, _ in caught] == [odd, unprintable] * 2  # outside the pass, then inside: the same objects
    assert all(deep for _, deep in caught)  # raised where it was: the frames below the door are there
    assert [r["error"] for r in recs] == [
        # only valid Unicode is written: Python's own UTF-8 decoder says what a lone surrogate becomes
        {"error_type": "ValueError", "error_message": str(odd).encode("utf-8", "surrogatepass").decode(
            "utf-8", "replace")},
        {"error_type": "_Unprintable", "error_message": "<str() of _Unprintable raised>"}]


def test_the_outer_door_is_the_record_and_counts_are_true(tmp_path):
    x, w = torch.randn(4, 16), torch.randn(16)

    def work():
        return [fused(x, w) for _ in range(3)] + [norm(x, w, out=torch.empty(4, 16))]
    recs, summary, outs = record(tmp_path, work, dedupe=True)
    assert all(torch.allclose(o, _norm(x, w)) for o in outs)  # same results with the door
    ops = [r["operation"] for r in recs]
    # torch.empty is the caller's, outside any door: it is recorded
    assert ops == ["stand_in:ops._fused", "aten.empty.memory_format", "stand_in:ops._norm"]
    assert summary["operation_counts"] == {"stand_in:ops._fused": 3, "aten.empty.memory_format": 1,
                                          "stand_in:ops._norm": 1}
    assert recs[2]["inputs"]["out"] == {"shape": [4, 16], "dtype": "torch.float32"}
    assert recs[2]["outputs"] == {"shape": [4, 16], "dtype": "torch.float32"}


def test_with_arguments_on_tensors_carry_their_layout(tmp_path):
    x = torch.randn(16, 4).t()  # not contiguous
    w = torch.randn(16)

    def work():
        return norm(x, w)
    recs, _, _ = record(tmp_path, work, args=True)
    assert recs[0]["inputs"]["input"] == {"shape": [4, 16], "dtype": "torch.float32",
                                          "stride": [1, 4], "offset": 0, "device": "cpu"}


def test_outside_logged_passes_the_library_runs_as_it_is(tmp_path):
    x, w = torch.randn(4, 16), torch.randn(16)
    assert torch.equal(norm(x, w), _norm(x, w))
    assert norm.__name__ == "_norm" and norm.__wrapped__ is _norm
    with pytest.raises(ValueError):
        decode(x, (x, x), x, backend="boom")


def _opts(x, *rest, scale=1.0, **opts):
    return x * scale


_opts.__module__ = "stand_in.ops"
opts = api_door(_opts, operation_name("stand_in", _opts))


def test_values_it_does_not_name_are_kept_as_text(tmp_path):
    x = torch.randn(2, 3)

    def work():
        return opts(x, 7, scale=2.0, fancy="yes")
    recs, _, out = record(tmp_path, work)
    assert torch.equal(out, x * 2.0)
    assert recs[0]["inputs"] == {"x": {"shape": [2, 3], "dtype": "torch.float32"}}
    assert recs[0]["args"] == {"scale": 2.0, "other_args": "fancy='yes', 7"}


def test_a_call_inside_a_custom_ops_kernel_is_marked_within_it(tmp_path):
    # A custom op (a dispatcher record) whose kernel calls a library's API, as
    # an SGLang op calling FlashInfer: both are recorded, the inner one marked
    # with the op it ran in, so that no reader counts the work twice. The same
    # call made outside the op is another signature, unmarked.
    lib = torch.library.Library("shapeprof_within", "DEF")
    lib.define("outer(Tensor x, Tensor w) -> Tensor")
    lib.impl("outer", lambda x, w: norm(x, w), "CompositeExplicitAutograd")
    x, w = torch.randn(3, 16), torch.randn(16)

    def work():
        a = torch.ops.shapeprof_within.outer(x, w)
        b = torch.ops.shapeprof_within.outer(x, w)  # a repeat: counted, not written again
        return a, b, norm(x, w)
    recs, summary, (a, b, c) = record(tmp_path, work, dedupe=True)
    torch.testing.assert_close(a, c)
    by_op = [(r["operation"], r.get("within")) for r in recs]
    assert by_op == [("stand_in:ops._norm", "shapeprof_within.outer.default"),
                     ("shapeprof_within.outer.default", None),
                     ("stand_in:ops._norm", None)]
    assert summary["operation_counts"] == {"shapeprof_within.outer.default": 2, "stand_in:ops._norm": 3}
    inner = recs[0]
    assert inner["inputs"] == {"input": {"shape": [3, 16], "dtype": "torch.float32"},
                               "weight": {"shape": [16], "dtype": "torch.float32"}}
    # readers: the ledger says which calls ran within others; cost counts
    # the op's work once, as the op (what its kernel ran through the
    # dispatcher is not recorded apart: only the op's own estimate holds it)
    path = str(tmp_path / "doors.jsonl")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", path, "--json"]) == 0
    f = json.loads(buf.getvalue())["files"][0]
    assert f["doors"] == {"custom_ops": 2, "stand_in": 3}
    assert f["doors_within"] == {"stand_in": 2}
    cs = {(c.sig.operation, c.sig.within): c for c in costs(analyze_file(path).signatures, GPUS["h100"])}
    io_bytes = (3 * 16 + 16 + 3 * 16) * 4  # x, w in; y out: float32
    outer = cs[("shapeprof_within.outer.default", None)]
    assert outer.bytes == io_bytes and outer.bound == "memory" and outer.total_seconds == 2 * outer.seconds > 0
    inner = cs[("stand_in:ops._norm", "shapeprof_within.outer.default")]
    assert inner.bytes == io_bytes and inner.sig.count == 2 and inner.seconds > 0
    assert inner.bound == WITHIN and inner.total_seconds == 0.0  # shown, not added to totals


def test_under_torch_profiler_a_recorded_call_is_a_range_named_as_its_record(tmp_path):
    # what lets the GPU check's coverage tell a library call's kernels
    # explained: they launch inside this range
    x, w = torch.randn(3, 16), torch.randn(16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        recs, _, _ = record(tmp_path, lambda: norm(x, w))
    names = [e.name for e in trace.events()]
    assert [r["operation"] for r in recs] == ["stand_in:ops._norm"]
    assert names.count("stand_in:ops._norm") == 1  # the call in the pass, not the one outside
    ranged = next(e for e in trace.events() if e.name == "stand_in:ops._norm")
    inside = {e.name for e in trace.events() if e.cpu_parent is ranged}
    assert "aten::mul" in inside or "aten::rsqrt" in inside  # its own work, under it


# -- the doors put on by `import sgl_shapeprof` (integrations/door_finder.py) --
# A stand-in FlashInfer, under FlashInfer's own module names, so that the real
# registry, finder and FlashInfer door take it: its public API marked by
# flashinfer_api from flashinfer.api_logging, which hands back the function
# itself, as FlashInfer's does at FLASHINFER_LOGLEVEL=0.
STAND_IN_FLASHINFER = {
    "__init__.py": "from . import api_logging, norm\nfrom .norm import rmsnorm\n",
    "api_logging.py": (
        "def flashinfer_api(func=None, *, trace=None):\n"
        "    if func is None:\n"
        "        return lambda f: flashinfer_api(f, trace=trace)\n"
        "    return func\n"),
    "norm.py": (
        "import torch\n"
        "from .api_logging import flashinfer_api\n\n\n"
        "@flashinfer_api\n"
        "def rmsnorm(input, weight, eps=1e-6, out=None):\n"
        "    \"Root mean square normalization.\"\n"
        "    if weight.shape[-1] != input.shape[-1]:\n"
        "        raise ValueError(f'weight has {weight.shape[-1]} elements, input rows {input.shape[-1]}')\n"
        "    y = input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps) * weight\n"
        "    return y if out is None else out.copy_(y)\n"),
}

# the line a profiler says of a FlashInfer imported before sgl_shapeprof
IMPORTED_FIRST = ("sgl_shapeprof: flashinfer was imported before sgl_shapeprof, so the API functions it had "
                  "defined by then are not wrapped: their calls are not recorded; import sgl_shapeprof before "
                  "flashinfer, or start the process with SHAPEPROF=1 (the start-up hook, `sgl-shapeprof hook "
                  "install`, then wraps flashinfer as it is imported)")

# a logged pass of the stand-in's rmsnorm: once as it returns, once as it raises
PASS = r'''
from flashinfer import rmsnorm  # a caller's own reference, as SGLang takes them
x, w = torch.randn(4, 64), torch.randn(64)
prof = sgl_shapeprof.ShapeProfiler(sys.argv[1])
sys.stderr.write("-- profiler made\n")
prof2 = sgl_shapeprof.ShapeProfiler(sys.argv[1] + ".2.jsonl")  # a second one says nothing more
with prof.forward_pass("decode"):
    y = rmsnorm(x, w, eps=1e-5)
    try:
        rmsnorm(x, torch.randn(8))
    except ValueError as e:
        error = [type(e).__name__, str(e)]
prof.close()
prof2.close()
print(json.dumps({"shape": list(y.shape), "error": error, "door": getattr(rmsnorm, "_shapeprof_operation", None)}))
'''


@pytest.fixture
def stand_in(tmp_path):
    """A folder holding the stand-in FlashInfer: the child's working
    directory, so first on its path."""
    pkg = tmp_path / "flashinfer"
    pkg.mkdir()
    for name, text in STAND_IN_FLASHINFER.items():
        (pkg / name).write_text(text)
    return tmp_path


def run_child(code: str, cwd, *args, **env_extra) -> subprocess.CompletedProcess:
    """A fresh Python with neither SHAPEPROF nor SGLANG_PROFILE_SHAPES set
    (unless given), importing the package under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHAPEPROF", "SGLANG_PROFILE_SHAPES"))}
    env["PYTHONPATH"] = os.pathsep.join([PKG_ROOT, env.get("PYTHONPATH", "")])
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=180, env=env, cwd=str(cwd))


def _ran(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def test_importing_the_package_first_is_enough_for_a_librarys_door(stand_in):
    """The issue's script: sgl_shapeprof, then the library, then a profiler,
    no variable set. Its calls in a logged pass are records, as the
    start-up hook's are (tests/sglang/test_flashinfer.py)."""
    path = stand_in / "shapes.jsonl"
    r = run_child("import json, sys\nimport sgl_shapeprof\nimport torch\nimport flashinfer\n" + PASS,
                  stand_in, path)
    out = _ran(r)
    assert out["door"] == "flashinfer:norm.rmsnorm"
    assert "imported before" not in r.stderr, r.stderr
    recs = [rec for rec in load(str(path)) if rec["operation"].startswith("flashinfer:")]
    assert [rec["operation"] for rec in recs] == ["flashinfer:norm.rmsnorm"] * 2
    assert recs[0]["inputs"] == {"input": {"shape": [4, 64], "dtype": "torch.float32"},
                                 "weight": {"shape": [64], "dtype": "torch.float32"}}
    assert recs[0]["args"]["eps"] == 1e-5
    assert recs[0]["outputs"] == {"shape": out["shape"], "dtype": "torch.float32"}
    assert recs[1]["error"] == {"error_type": out["error"][0], "error_message": out["error"][1]}


def test_a_library_imported_first_is_named_once_when_a_profiler_is_made(stand_in):
    """Imported before sgl_shapeprof, FlashInfer's decorator is replaced
    after its functions were decorated: their calls are not records, and
    the first profiler made says so, once, naming the library. Inductor
    imported first is patched whole (a class's method): nothing to say."""
    path = stand_in / "shapes.jsonl"
    first = ("import json, sys\nimport torch, flashinfer\n"
             "try:\n    import torch._inductor.runtime.triton_heuristics as heuristics\n"
             "except ImportError:\n    heuristics = None\n"
             "import sgl_shapeprof\nsys.stderr.write('-- imported\\n')\n")
    r = run_child(first + PASS + "print(json.dumps(heuristics is None or "
                  "hasattr(heuristics.CachingAutotuner.run, '__sgl_shapeprof_wrapped__')))\n", stand_in, path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) is True  # Inductor's door, put on in place
    out = json.loads(r.stdout.splitlines()[-2])
    assert out["door"] is None and out["error"][0] == "ValueError"  # FlashInfer's own function, as it was
    lines = r.stderr.splitlines()
    assert lines[lines.index("-- imported") + 1:] == [IMPORTED_FIRST, "-- profiler made"]
    assert not [rec for rec in load(str(path)) if rec["operation"].startswith("flashinfer:")]


def test_with_the_start_up_hook_a_library_imported_first_is_wrapped_and_nothing_said(stand_in):
    """SHAPEPROF=1 and the start-up hook's line (what its .pth runs at
    start-up): the package, so the door, is there before the script
    imports FlashInfer."""
    site_dir = stand_in / "site"
    site_dir.mkdir()
    copy_hook(site_dir)
    path = stand_in / "shapes.jsonl"
    code = (site_dir / "sgl_shapeprof_autohook.pth").read_text() + \
        "import json, sys\nimport torch, flashinfer\nimport sgl_shapeprof\n"
    r = run_child(code + PASS, stand_in, path, SHAPEPROF="1",
                  PYTHONPATH=os.pathsep.join([str(site_dir), PKG_ROOT]))
    assert _ran(r)["door"] == "flashinfer:norm.rmsnorm"
    assert "imported before" not in r.stderr, r.stderr
    ops = [rec["operation"] for rec in load(str(path))]
    assert ops.count("flashinfer:norm.rmsnorm") == 2


def test_a_module_patched_as_it_was_imported_is_not_said_late(tmp_path):
    """on_import's rule: a module that a finder of ours patched at its
    import, found imported by another finder later, was not imported
    before the doors (the start-up hook's finder and the package's)."""
    (tmp_path / "lib_early.py").write_text("patched = False\n")
    (tmp_path / "lib_late.py").write_text("patched = False\n")
    code = r'''
import json, sys
from sgl_shapeprof import on_import

def patch(module):
    module.patched = True

class First(on_import.PatchingFinder):
    pass

class Second(on_import.PatchingFinder):
    def imported_before(self, name):
        return "late: " + name

patches = {n: ("__main__", "patch") for n in ("lib_early", "lib_late")}
import lib_late  # before any finder
on_import.install_finder(First({"lib_early": patches["lib_early"]}))
import lib_early  # patched as it is imported
on_import.install_finder(Second(patches))
print(json.dumps([lib_early.patched, lib_late.patched, on_import.imported_before()]))
'''
    assert _ran(run_child(code, tmp_path)) == [True, True, ["late: lib_late"]]


NEVER_PROFILES = r'''
import json, sys
if sys.argv[1] == "1":
    import sgl_shapeprof
light = sorted(m for m in ("torch", "flashinfer") if m in sys.modules)
import torch, flashinfer
from flashinfer import rmsnorm
torch.manual_seed(0)
x, w = torch.randn(4, 64), torch.randn(64)
results = [rmsnorm(x, w).tolist(), rmsnorm(x, w, 1e-3).tolist()]
for bad in (lambda: rmsnorm(x, torch.randn(8)), lambda: rmsnorm(x), lambda: rmsnorm(x, w, nope=1)):
    try:
        bad()
    except Exception as e:
        results.append([type(e).__name__, str(e)])
import inspect
print(json.dumps({"results": results, "light": light, "native": "sgl_shapeprof._C" in sys.modules,
                  "signature": str(inspect.signature(rmsnorm)), "name": rmsnorm.__name__, "doc": rmsnorm.__doc__,
                  "door": getattr(rmsnorm, "_shapeprof_operation", None),
                  "finders": [type(f).__name__ for f in sys.meta_path if type(f).__module__.startswith("sgl_")]}))
'''


def test_a_program_that_never_profiles_runs_as_it_did(stand_in):
    """sgl_shapeprof imported first and no profiler made: the library's
    function is in its door, which hands back the same results and raises
    the same exceptions; nothing heavy was imported, the native module
    never loaded, and the one finder installed is the doors'."""
    plain = _ran(run_child(NEVER_PROFILES, stand_in, 0))
    ours = _ran(run_child(NEVER_PROFILES, stand_in, 1))
    assert ours["door"] == "flashinfer:norm.rmsnorm" and plain["door"] is None
    assert ours["results"] == plain["results"]
    assert [r[0] for r in ours["results"][2:]] == ["ValueError", "TypeError", "TypeError"]
    for key in ("signature", "name", "doc"):
        assert ours[key] == plain[key]
    assert ours["light"] == [] and not ours["native"]
    assert ours["finders"] == ["DoorFinder"] and plain["finders"] == []


def test_a_plain_import_puts_on_the_kernel_libraries_doors_only():
    """The servers' hooks wait for the variable: the package's finder
    patches the registry's DOORS, none of a server's modules."""
    code = ("import json, sys\nimport sgl_shapeprof\nfrom sgl_shapeprof.integrations import registry\n"
            "[f] = [f for f in sys.meta_path if type(f).__name__ == 'DoorFinder']\n"
            "servers = {}\n"
            "for n in registry.servers():\n"
            "    s = registry.seam(n)\n"
            "    for table in ('hooks', 'unarmed_hooks', 'plugin_hooks', 'plugin_unarmed_hooks'):\n"
            "        servers.update(getattr(s, table))\n"
            "print(json.dumps([sorted(f.patches), sorted(registry.doors()), sorted(set(f.patches) & set(servers)),"
            " 'torch' in sys.modules]))\n")
    patches, doors, shared, torch_loaded = _ran(run_child(code, ROOT))
    assert patches == doors and doors and shared == [] and not torch_loaded


OFF_HOOK = r'''
import json, sys
import sgl_shapeprof
{hook}
import flashinfer
print(json.dumps([type(f).__name__ for f in sys.meta_path if type(f).__name__ == "DoorFinder"]
                 + [getattr(flashinfer.rmsnorm, "_shapeprof_operation", None)]))
'''


@pytest.mark.parametrize("hook", [
    # vLLM's plugin entry point, in each vLLM process, profiling off
    "from sgl_shapeprof.integrations.vllm import plugin\nplugin.register()",
    # SGLang's tokenizer control module found by the .pth's unarmed finder, profiling off
    "from sgl_shapeprof.integrations import startup_hook\n"
    "startup_hook.unarmed_spec('sglang.srt.managers.tokenizer_control_mixin', None)",
], ids=["vllm-plugin-off", "sglang-unarmed"])
def test_a_servers_hook_with_profiling_off_takes_the_doors_off(stand_in, hook):
    """Off means off: a server that does not profile loads the package
    through its own hook, and then no kernel library is wrapped."""
    assert _ran(run_child(OFF_HOOK.format(hook=hook), stand_in)) == [None]
    # the same program without the hook: the door is on
    assert _ran(run_child(OFF_HOOK.format(hook=""), stand_in)) == ["DoorFinder", "flashinfer:norm.rmsnorm"]
