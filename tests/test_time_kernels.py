"""GPU kernel times (ShapeProfiler(time="kernels"), SHAPEPROF_TIME=kernels),
on the CPU: the real collector (csrc/core/sp_cupti.c) and the real join
(records/kernels.py) run against a stand-in libcupti built here from
tests/cupti_standin.c with the same CUPTI headers as the build. The test
launches each "kernel" itself, with a duration it chooses, from inside an
operator it records or from nowhere; the oracle is what it launched where:
each record's kernels and their time, the repeats of a deduplicated
signature, a graph replay's kernels under the captured call (through a
clone, as instantiation makes), and the ledger's unexplained and outside
kernels. Each scenario runs in a process of its own: CUPTI is one per
process, and the library loaded stays.

Refusals, each in one line with the CPU times kept: no CUDA device, the
real libcupti named on this GPU-less machine (never touched), CUPTI held by another tool, a
build without CUPTI's headers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import load, run_python

HERE = os.path.dirname(os.path.abspath(__file__))


def _headers():
    try:
        from sgl_shapeprof._build import CUPTI_CRT, CUPTI_INCLUDE
    except ImportError:
        return None, None
    return CUPTI_INCLUDE, CUPTI_CRT


def _built() -> int:
    from sgl_shapeprof import _C
    return _C.cupti_built()


needs_cupti = pytest.mark.skipif(not _built(), reason="this build has no CUPTI (its headers were not found)")


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    inc, crt = _headers()
    cc = shutil.which("cc") or shutil.which("gcc")
    if inc is None or cc is None:
        pytest.skip("no CUPTI headers or C compiler to build the stand-in")
    out = tmp_path_factory.mktemp("cupti") / "libcupti_standin.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-isystem", inc]
                   + (["-idirafter", crt] if crt and crt != inc else [])
                   + ["-o", str(out), os.path.join(HERE, "cupti_standin.c")], check=True)
    return str(out)


PRELUDE = """
import ctypes, json, sys, torch
from sgl_shapeprof import ShapeProfiler
lib = ctypes.CDLL(sys.argv[1])
lib.standin_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32]
lib.standin_graph_node.argtypes = [ctypes.c_uint64]
lib.standin_graph_clone.argtypes = [ctypes.c_uint64, ctypes.c_uint64]

@torch.library.custom_op("standin::work", mutates_args=())
def work(x: torch.Tensor, ns: int) -> torch.Tensor:
    lib.standin_launch(b"work_kernel_%d" % x.shape[0], ns, 0, 0)
    return x + 1

@torch.library.custom_op("standin::capture", mutates_args=())
def capture(x: torch.Tensor, node: int) -> torch.Tensor:
    lib.standin_graph_node(node)  # as a stream capture makes a node of its launch
    return x * 2
"""


def _run(standin, tmp_path, body: str, **env):
    r = run_python(PRELUDE + body, args=[standin], cwd=tmp_path, env_extra={
        "SHAPEPROF_CUPTI_LIBRARY": standin, "SHAPEPROF_TEST_CUPTI_STANDIN": "1", **env})
    assert r.returncode == 0, r.stderr
    return r


def _cli(tmp_path, *args) -> dict:
    """A command's --json output, run in tmp_path."""
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", *args, "--json"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _analyze(tmp_path) -> dict:
    return _cli(tmp_path, "analyze", "shapes.jsonl")


@needs_cupti
def test_each_record_has_the_kernels_its_call_launched(standin, tmp_path):
    _run(standin, tmp_path, """
p = ShapeProfiler("shapes.jsonl", time="kernels")
assert p.kernels_path == "shapes_kernels.jsonl", p.kernels_path
with p.forward_pass("decode"):
    work(torch.ones(2), 1000)
    work(torch.ones(3), 2500)
    lib.standin_launch(b"stray", 500, 0, 0)   # in the pass, under no record
lib.standin_launch(b"outside", 700, 0, 0)     # after it: not the recording's
p.close()
""")
    recs = {r["operation"]: r for r in load(str(tmp_path / "shapes.jsonl")) if r["operation"].startswith("standin")}
    assert len(load(str(tmp_path / "shapes.jsonl"))) == 4  # two aten.ones, two work calls
    led = _analyze(tmp_path)["kernels"]
    assert len(led) == 1
    led = led[0]
    times = {int(k): v for k, v in led["signature_kernel_times"].items()}
    by_shape = {tuple(r["inputs"]["x"]["shape"]): r["call_id"] for r in load(str(tmp_path / "shapes.jsonl"))
                if r["operation"] == "standin.work.default"}
    assert times[by_shape[(2,)]] == {"count": 1, "total_us": 1.0, "min_us": 1.0, "median_us": 1.0, "max_us": 1.0}
    assert times[by_shape[(3,)]]["total_us"] == 2.5
    assert set(times) == set(by_shape.values())  # no kernel under aten.ones: it launched none
    assert led["operations"] == [{"operation": "standin.work.default", "calls": 2, "kernels": 2, "us": 3.5}]
    assert led["by_door_us"] == {"custom_ops": 3.5}
    assert led["unexplained"] == [{"kernel": "stray", "launches": 1, "us": 0.5}]
    assert led["outside_passes"] == 1
    assert led["total_us"] == 4.0 and led["explained_share"] == 3.5 / 4.0
    assert led["collector_stopped"] and not led["dropped"] and not led["unreadable_lines"]
    assert recs  # the records keep their CPU times
    assert all("time_us" in r for r in load(str(tmp_path / "shapes.jsonl")))
    # the kernel lines say what CUPTI said of each kernel
    lines = [json.loads(x) for x in open(tmp_path / "shapes_kernels.jsonl")]
    k = next(x for x in lines if x.get("kernel") == "work_kernel_3")
    assert (k["end_ns"] - k["start_ns"], k["grid"], k["block"], k["stream"]) == (2500, [4, 2, 1], [128, 1, 1], 7)


@needs_cupti
def test_a_deduplicated_signature_keeps_every_calls_kernel_time(standin, tmp_path):
    _run(standin, tmp_path, """
p = ShapeProfiler("shapes.jsonl", time="kernels", dedupe=True)
x = torch.ones(4)
with p.forward_pass("decode"):
    for ns in (1000, 3000, 2000, 6000):
        work(x, ns)
p.close()
""")
    work = [r for r in load(str(tmp_path / "shapes.jsonl")) if r.get("operation") == "standin.work.default"]
    assert len(work) == 1  # one record for the four calls
    led = _analyze(tmp_path)["kernels"][0]
    assert led["signature_kernel_times"][str(work[0]["call_id"])] == {
        "count": 4, "total_us": 12.0, "min_us": 1.0, "median_us": 2.5, "max_us": 6.0}
    assert led["operations"][0]["calls"] == 4


@needs_cupti
def test_a_graph_replays_kernels_are_the_captured_calls(standin, tmp_path):
    _run(standin, tmp_path, """
p = ShapeProfiler("shapes.jsonl", time="kernels")
with p.forward_pass("decode"):
    capture(torch.ones(5), 77)         # its launch captured: graph node 77
lib.standin_graph_clone(99, 77)       # instantiated: node 99 is 77's clone
with p.forward_pass("decode"):
    for _ in range(3):                # three replays, launched under no call
        lib.standin_launch(b"replayed_kernel", 400, 99, 5)
    lib.standin_launch(b"unknown_node", 300, 1234, 5)
p.close()
""")
    cap = next(r for r in load(str(tmp_path / "shapes.jsonl")) if r["operation"] == "standin.capture.default")
    led = _analyze(tmp_path)["kernels"][0]
    assert led["signature_kernel_times"][str(cap["call_id"])] == {
        "count": 3, "total_us": 1.2, "min_us": 0.4, "median_us": 0.4, "max_us": 0.4}
    assert led["unexplained"] == [{"kernel": "unknown_node", "launches": 1, "us": 0.3}]


@needs_cupti
def test_cupti_held_by_another_tool_is_refused_in_one_line(standin, tmp_path):
    r = _run(standin, tmp_path, """
p = ShapeProfiler("shapes.jsonl", time="kernels")
assert p.kernels_path is None
with p.forward_pass("decode"):
    work(torch.ones(2), 1000)
p.close()
""", STANDIN_CUPTI_BUSY="1")
    said = [x for x in r.stderr.splitlines() if "sgl_shapeprof" in x]
    assert len(said) == 1 and "one CUPTI client per process" in said[0] and "CPU time" in said[0], r.stderr
    assert not (tmp_path / "shapes_kernels.jsonl").exists()
    assert all("time_us" in x for x in load(str(tmp_path / "shapes.jsonl")))


@needs_cupti
def test_a_library_that_cannot_be_used_gives_way_to_the_next(standin, tmp_path):
    """Unnamed, the libraries are tried in order: one that does not load,
    or that is not CUPTI (libc), gives way to the next (the stand-in), which
    collects; a CUPTI that refuses (held by another tool) ends the search
    with its own reason, the ones before it said too."""
    body = """
import sgl_shapeprof.recording.kernels as k
k.libraries = lambda built: ["/nonexistent/libcupti.so.13", "libc.so.6", sys.argv[1], sys.argv[1]]
p = ShapeProfiler("shapes.jsonl", time="kernels")
with p.forward_pass("decode"):
    work(torch.ones(2), 1000)
p.close()
print(p.kernels_path)
"""
    r = _run(standin, tmp_path, body, SHAPEPROF_CUPTI_LIBRARY="")
    assert r.stdout.strip().endswith("shapes_kernels.jsonl"), r.stderr
    assert not [x for x in r.stderr.splitlines() if "sgl_shapeprof" in x], r.stderr
    r = _run(standin, tmp_path, body.replace("shapes.jsonl", "busy.jsonl"), SHAPEPROF_CUPTI_LIBRARY="",
             STANDIN_CUPTI_BUSY="1")
    said = [x for x in r.stderr.splitlines() if "sgl_shapeprof" in x]
    assert len(said) == 1 and "libc.so.6 has no cupti" in said[0] and "one CUPTI client per process" in said[0], said
    assert r.stdout.strip() == "None"
    from sgl_shapeprof import ShapeProfiler, _C
    p = ShapeProfiler(str(tmp_path / "s.jsonl"))
    try:
        with pytest.raises(ImportError, match="cannot load /nonexistent/x.so"):
            _C.cupti_start("/nonexistent/x.so", str(tmp_path / "k.jsonl"), p._native)
    finally:
        p.close()


@needs_cupti
def test_without_a_gpu_the_real_cupti_is_refused_in_one_line(tmp_path):
    from sgl_shapeprof.recording.kernels import libraries
    real = [p for p in libraries(_built()) if os.path.isabs(p) and os.path.exists(p)]
    env = {"SHAPEPROF_CUPTI_LIBRARY": real[0]} if real else {}
    r = run_python("""
import torch
from sgl_shapeprof import ShapeProfiler
assert not torch.cuda.is_available()
p = ShapeProfiler("shapes.jsonl", time="kernels")
with p.forward_pass("decode"):
    torch.ones(2) + 1
p.close()
print(p.kernels_path)
""", cwd=tmp_path, env_extra=env)
    assert r.returncode == 0, r.stderr
    said = [x for x in r.stderr.splitlines() if "sgl_shapeprof" in x]
    assert len(said) == 1 and "time=kernels:" in said[0], r.stderr
    # named or not, CUPTI is never touched without a device (a real libcupti
    # with no driver crashed the process under torch 2.15)
    assert "no CUDA device" in said[0], said
    assert r.stdout.strip() == "None"
    assert all("time_us" in x for x in load(str(tmp_path / "shapes.jsonl")))


def test_a_build_without_cupti_is_refused_in_one_line():
    from sgl_shapeprof.recording.kernels import refusal

    class NoCupti:
        @staticmethod
        def cupti_built():
            return 0
    why = refusal(NoCupti)
    assert "no CUPTI" in why and "\n" not in why


def test_time_takes_kernels_and_nothing_else(tmp_path):
    from sgl_shapeprof import ShapeProfiler
    from sgl_shapeprof.recording.config import ConfigError, parse_time
    with pytest.raises(ValueError, match="time must be"):
        ShapeProfiler(str(tmp_path / "s.jsonl"), time="gpu")
    assert parse_time("SHAPEPROF_TIME", "kernels") == "kernels"
    assert parse_time("SHAPEPROF_TIME", "1") is True
    with pytest.raises(ConfigError, match="must be 0, 1 or kernels"):
        parse_time("SHAPEPROF_TIME", "yes")


MM = """
@torch.library.custom_op("standin::mm", mutates_args=())
def mm(a: torch.Tensor, b: torch.Tensor, ns: int) -> torch.Tensor:
    lib.standin_launch(b"gemm_kernel", ns, 0, 0)
    return a @ b
p = ShapeProfiler(sys.argv[2], time="kernels", dedupe=True)
a, b = torch.ones(64, 32), torch.ones(32, 16)
with p.forward_pass("decode"):
    for ns in map(int, sys.argv[3].split(",")):
        mm(a, b, ns)
p.close()
"""


@needs_cupti
def test_the_analyses_read_kernel_time_where_it_was_recorded(standin, tmp_path):
    for name, times in (("a.jsonl", "2000,4000"), ("b.jsonl", "1000,1000")):
        r = run_python(PRELUDE + MM, args=[standin, name, times], cwd=tmp_path,
                       env_extra={"SHAPEPROF_CUPTI_LIBRARY": standin, "SHAPEPROF_TEST_CUPTI_STANDIN": "1"})
        assert r.returncode == 0, r.stderr
    flops = 2 * 64 * 32 * 16
    g = _cli(tmp_path, "gemm", "a.jsonl", "--op", "standin.mm:a,b")
    row = next(x for x in g if x["operation"] == "standin.mm.default")
    assert (row["kernel_calls"], row["kernel_ns"]) == (2, 6000)
    assert row["us_per_call"] == 3.0  # the kernels' time, not the calls' wall time
    assert abs(row["tflops"] - flops / 3000 / 1000) < 1e-12
    sig = next(s for o in _cli(tmp_path, "analyze", "a.jsonl")["operations"]
               if o["operation"] == "standin.mm.default" for s in o["signatures"])
    assert (sig["kernel_us"], sig["kernel_calls"], sig["kernel_min_us"], sig["kernel_max_us"]) == (6.0, 2, 2.0, 4.0)
    d = _cli(tmp_path, "diff", "a.jsonl", "b.jsonl")
    change = next(c for c in d["kernel_time_changes"] if c["operation"] == "standin.mm.default")
    assert (change["kernel_us_per_call_a"], change["kernel_us_per_call_b"]) == (3.0, 1.0)


@needs_cupti
def test_the_trace_has_each_kernel_on_its_gpu_track_inside_its_call(standin, tmp_path):
    _run(standin, tmp_path, """
p = ShapeProfiler("shapes.jsonl", time="kernels")
with p.forward_pass("decode"):
    work(torch.ones(2), 1500)
    lib.standin_launch(b"stray", 500, 0, 0)
p.close()
""")
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "trace", "shapes.jsonl", "-o", "t.json"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    ev = json.load(open(tmp_path / "t.json"))["traceEvents"]
    work_call = next(e for e in ev if e.get("cat") == "call" and e["name"] == "standin.work.default")
    kernel = next(e for e in ev if e.get("cat") == "kernel")
    stray = next(e for e in ev if e.get("cat") == "kernel, unexplained")
    assert (kernel["name"], kernel["dur"], kernel["args"]["call_id"]) == ("work_kernel_2", 1.5,
                                                                         work_call["args"]["call_id"])
    assert work_call["ts"] <= kernel["ts"] <= work_call["ts"] + work_call["dur"]
    assert (stray["name"], stray["dur"]) == ("stray", 0.5) and "call_id" not in stray["args"]
    tracks = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert tracks[kernel["tid"]] == "GPU 0, stream 7 (kernels)" and kernel["tid"] == stray["tid"]


def test_a_hostile_kernels_file_is_read_past_or_refused_in_one_line(tmp_path):
    """A kernels file is untrusted data: lines that are not what FORMAT.md
    says are counted and left out; a file that is not one is refused."""
    r = run_python("""
import torch
from sgl_shapeprof import ShapeProfiler
p = ShapeProfiler("shapes.jsonl", time=True)
with p.forward_pass("decode"):
    torch.ones(2) + 1
p.close()
""", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cid = load(str(tmp_path / "shapes.jsonl"))[-1]["call_id"]
    lines = ['{"kernels_file": 1, "clock": "monotonic"}', '{"pass_begin_ns": 10}',
             '{"ext": 1, "call_id": %d}' % cid, '{"correlation": 5, "ext": 1}',
             '{"kernel": "k", "correlation": 5, "start_ns": 100, "end_ns": 400, "grid": [1, "x", 1]}',
             '{"kernel": ["not", "a", "name"], "correlation": 6, "start_ns": 1, "end_ns": 2}',
             '{"kernel": "neg", "correlation": -1, "start_ns": 1, "end_ns": 2}',
             '{"ext": "1", "call_id": null}', '{"graph_node": 3, "cloned_from": 3}',
             '{"kernel": "loop", "correlation": 9, "start_ns": 20, "end_ns": 30, "graph": 1, "graph_node": 3}',
             '[' * 100 + ']' * 100, 'not json', '{"pass_end_ns": 1000}']
    (tmp_path / "shapes_kernels.jsonl").write_text("\n".join(lines) + "\n")
    led = _analyze(tmp_path)["kernels"][0]
    assert led["unreadable_lines"] == 5 and not led["collector_stopped"]  # a bad grid: the kernel kept, no grid
    assert led["signature_kernel_times"] == {str(cid): {"count": 1, "total_us": 0.3, "min_us": 0.3,
                                                        "median_us": 0.3, "max_us": 0.3}}
    assert led["unexplained"] == [{"kernel": "loop", "launches": 1, "us": 0.01}]  # a clone of itself: no id
    for cmd in (["trace", "shapes.jsonl", "-o", "t.json"], ["gemm", "shapes.jsonl"], ["diff", "shapes.jsonl",
                                                                                      "shapes.jsonl"]):
        r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", *cmd], capture_output=True, text=True,
                           cwd=tmp_path, timeout=120)
        assert r.returncode == 0, (cmd, r.stderr)
    (tmp_path / "shapes_kernels.jsonl").write_text('{"call_id": 1}\n')
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", "shapes.jsonl"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert r.returncode != 0 and "is not a kernels file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@needs_cupti
def test_a_second_kernels_profiler_is_refused_and_never_joins_the_first_ones_file(standin, tmp_path):
    r = _run(standin, tmp_path, """
a = ShapeProfiler("shapes.jsonl", time="kernels")
b = ShapeProfiler("other.jsonl", time="kernels")
assert a.kernels_path and b.kernels_path is None
with a.forward_pass("decode"):
    work(torch.ones(2), 1000)
with b.forward_pass("decode"):       # b's call_ids are a's too: 1 and 2
    work(torch.ones(3), 2000)
b.close()
a.close()
""")
    said = [x for x in r.stderr.splitlines() if "sgl_shapeprof" in x]
    assert len(said) == 1 and "another profiler of this process collects" in said[0], r.stderr
    led = _analyze(tmp_path)["kernels"][0]
    assert [(o["operation"], o["us"]) for o in led["operations"]] == [("standin.work.default", 1.0)]
    assert led["outside_passes"] == 1 and led["unexplained"] == []  # b's kernel: not a's


@needs_cupti
def test_a_forked_child_never_writes_to_the_parents_kernels_file(standin, tmp_path):
    _run(standin, tmp_path, """
import os
p = ShapeProfiler("shapes.jsonl", time="kernels")
with p.forward_pass("decode"):
    work(torch.ones(2), 1000)
pid = os.fork()
if pid == 0:
    p.close()                         # the parent's profiler, closed in the child
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
with p.forward_pass("decode"):
    work(torch.ones(3), 2000)
p.close()
""")
    lines = [json.loads(x) for x in open(tmp_path / "shapes_kernels.jsonl")]
    assert [x for x in lines if x.get("end")] == [lines[-1]]  # one end, the parent's, last
    led = _analyze(tmp_path)["kernels"][0]
    assert sorted(v["total_us"] for v in led["signature_kernel_times"].values()) == [1.0, 2.0]


def _file(**kw):
    from sgl_shapeprof.records.kernels import Kernel, KernelsFile
    kf = KernelsFile("k.jsonl")
    for k, v in kw.items():
        setattr(kf, k, v)
    return kf, Kernel


def test_the_window_is_the_union_of_every_threads_passes():
    from sgl_shapeprof.records.kernels import join, windows
    # thread A's pass 0..100, thread B's 10..20 inside it, then a pass 200.. still open at a kill
    kf, K = _file(pass_begins=[0, 10, 200], pass_ends=[20, 100])
    kf.kernels = [K("in_a_after_b", 1, 50, 60, launch_ns=50), K("between", 2, 150, 160, launch_ns=150),
                  K("open", 3, 300, 310, launch_ns=300)]
    assert windows(kf) == [(0, 100), (200, 310)]
    j = join(kf)
    assert [k.name for k in j.unexplained] == ["in_a_after_b", "open"] and j.outside == 1


def test_a_replay_is_a_call_and_a_graph_launched_by_a_call_is_one():
    from sgl_shapeprof.records.kernels import join
    kf, K = _file(call_of_ext={1: (5, False), 2: (6, False)}, ext_of_node={10: 1, 11: 2},
                  cloned_from={11: 10}, ext_of_correlation={40: 2})
    kf.kernels = [K("replay", 30, 0, 100, graph=1, graph_node=11), K("replay", 31, 0, 100, graph=1, graph_node=11),
                  # a call (ext 2) that itself launched a graph: its kernels are one call's
                  K("in_call", 40, 0, 10, graph=2, graph_node=99), K("in_call", 40, 20, 30, graph=2, graph_node=98)]
    j = join(kf)
    # node 11 is a clone of 10 (made under id 1), though noted under id 2 as it was cloned: the original's
    assert sorted(j.by_call[5].per_call_ns) == [100, 100]
    assert j.by_call[6].per_call_ns == [20]
