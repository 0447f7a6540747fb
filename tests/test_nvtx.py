"""NVTX ranges (ShapeProfiler(nvtx=True), SHAPEPROF_NVTX=1): one range per
recorded call, named by its operation and input shapes, reach an NVTX tool.
The tool is a stand-in built here (tests/nvtx_injection.c), loaded by NVTX
v3 from NVTX_INJECTION64_PATH as nsys is; the oracle is the records: every
record's call is one push and one pop, named from the record's own inputs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from helpers import load, run_python

HERE = os.path.dirname(os.path.abspath(__file__))


def _nvtx_include():
    """The NVTX headers this machine has (the build's own search, setup.py)."""
    for site in sys.path:
        for sub in ("nvtx", "cu13", "cu12"):
            d = os.path.join(site, "nvidia", sub, "include")
            if os.path.isfile(os.path.join(d, "nvtx3", "nvToolsExt.h")):
                return d
    return None


def _built() -> bool:
    from sgl_shapeprof import _C
    return _C.nvtx_built()


needs_nvtx = pytest.mark.skipif(not _built(), reason="this build has no NVTX (its headers were not found)")


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    inc = _nvtx_include()
    cc = shutil.which("cc") or shutil.which("gcc")
    if inc is None or cc is None:
        pytest.skip("no NVTX headers or C compiler to build the stand-in tool")
    out = tmp_path_factory.mktemp("nvtx") / "libnvtx_standin.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-isystem", inc, "-o", str(out),
                    os.path.join(HERE, "nvtx_injection.c"), "-ldl"], check=True)
    return str(out)


def _name(rec: dict) -> str:
    """A record's range name, from its inputs (FORMAT.md's tensors)."""
    def tensor(t):
        return "None" if t is None else f"[{', '.join(map(str, t['shape']))}] {t['dtype']}"
    parts = []
    for name, v in rec["inputs"].items():
        parts.append(f"{name}=" + (f"[{', '.join(tensor(x) for x in v)}]" if isinstance(v, list) else tensor(v)))
    return f"{rec['operation']}({', '.join(parts)})"


WORKLOAD = """
import sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1], nvtx=True)
a, b = torch.randn(8, 4), torch.randn(4, 3)
torch.mm(a, b)  # outside a pass: no range
prof.start_forward_pass()
c = torch.mm(a, b)
torch.cat([c, c], dim=0)
torch.relu(c.to(torch.float16))
try:
    torch.mm(a, a)  # raises: its range ends too
except RuntimeError:
    pass
prof.end_forward_pass()
prof.close()
"""


@needs_nvtx
def test_each_recorded_call_is_one_range_named_by_its_shapes(tool, tmp_path):
    log, rec_path = tmp_path / "nvtx.log", tmp_path / "n.jsonl"
    r = run_python(WORKLOAD, env_extra={"NVTX_INJECTION64_PATH": tool, "NVTX_TEST_LOG": str(log)},
                   args=(str(rec_path),))
    assert r.returncode == 0, r.stderr[-2000:]
    recs = load(str(rec_path))
    assert any("error" in x for x in recs)
    lines = log.read_text().splitlines()
    assert lines[0] == "domain sgl_shapeprof"
    pushes = [ln[len("push sgl_shapeprof "):] for ln in lines if ln.startswith("push ")]
    assert pushes == [_name(x) for x in recs]
    assert all(ln.startswith(("push sgl_shapeprof ", "pop sgl_shapeprof")) for ln in lines[1:])
    # each range ends before the next begins: the calls are not nested
    assert lines[1:] == [x for p in pushes for x in (f"push sgl_shapeprof {p}", "pop sgl_shapeprof")]


@needs_nvtx
def test_without_a_tool_nothing_changes(tmp_path):
    rec_path = tmp_path / "q.jsonl"
    r = run_python(WORKLOAD, args=(str(rec_path),))
    assert r.returncode == 0, r.stderr[-2000:]
    assert [x["operation"] for x in load(str(rec_path))] == [
        "aten.mm.default", "aten.cat.default", "aten._to_copy.default", "aten.relu.default", "aten.mm.default"]


def test_a_build_without_nvtx_refuses_it_in_one_line(tmp_path, monkeypatch, capsys):
    """Asked of a build whose NVTX headers were missing: ShapeProfiler says
    so (ValueError, one line); from the environment, profiling stays off and
    the line says why."""
    from sgl_shapeprof import _C, ShapeProfiler
    from sgl_shapeprof.recording import env
    monkeypatch.setattr(_C, "nvtx_built", lambda: False)
    with pytest.raises(ValueError) as e:
        ShapeProfiler(str(tmp_path / "x.jsonl"), nvtx=True)
    assert "\n" not in str(e.value) and "has no NVTX ranges" in str(e.value)
    monkeypatch.setenv("SHAPEPROF", "1")
    monkeypatch.setenv("SHAPEPROF_NVTX", "1")
    monkeypatch.setenv("SHAPEPROF_FILE", str(tmp_path / "e.jsonl"))
    assert env.from_env(rank=0) is None
    err = capsys.readouterr().err
    assert "has no NVTX ranges" in err and "profiling is off" in err


ON_REQUEST = """
import sys, torch
from sgl_shapeprof.recording.on_request import OnRequestProfiler
armed = OnRequestProfiler(rank=0, output_dir=sys.argv[1], control=False)  # armed without NVTX
a, b = torch.randn(8, 4), torch.randn(4, 3)
for nvtx, name in ((True, "ranged.jsonl"), (None, "plain.jsonl")):
    armed.request(passes=1, output=f"{sys.argv[1]}/{name}", nvtx=nvtx)
    armed.start_forward_pass()
    torch.cat([torch.mm(a, b)] * 2)
    armed.end_forward_pass()
armed.close()
"""


@needs_nvtx
def test_a_request_asks_for_ranges_of_its_own(tool, tmp_path):
    """A request's own nvtx (what SGLang's SHAPES_NVTX and vLLM's
    shapes_nvtx hand over) gives that request's calls ranges, and only its
    calls: the armed profiler's setting is the next request's again."""
    log = tmp_path / "nvtx.log"
    r = run_python(ON_REQUEST, env_extra={"NVTX_INJECTION64_PATH": tool, "NVTX_TEST_LOG": str(log)},
                   args=(str(tmp_path),))
    assert r.returncode == 0, r.stderr[-2000:]
    ranged, plain = load(str(tmp_path / "ranged.jsonl")), load(str(tmp_path / "plain.jsonl"))
    assert ranged and len(plain) == len(ranged)
    pushes = [ln[len("push sgl_shapeprof "):] for ln in log.read_text().splitlines() if ln.startswith("push ")]
    assert pushes == [_name(x) for x in ranged]


@pytest.fixture(scope="module")
def roctx(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in rocTX library")
    out = tmp_path_factory.mktemp("roctx") / "libroctx64.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out),
                    os.path.join(HERE, "roctx_standin.c")], check=True)
    return str(out)


def test_rocTX_ranges_reach_its_library(roctx, tmp_path):
    """Where rocTX's library is named (as on a ROCm build of torch, which
    finds ROCm's own), each recorded call is one rocTX range, named as its
    NVTX range would be; the oracle is the records. No NVTX headers needed."""
    log, rec_path = tmp_path / "roctx.log", tmp_path / "r.jsonl"
    r = run_python(WORKLOAD, env_extra={"SHAPEPROF_ROCTX_LIBRARY": roctx, "ROCTX_TEST_LOG": str(log)},
                   args=(str(rec_path),))
    assert r.returncode == 0, r.stderr[-2000:]
    recs = load(str(rec_path))
    assert any("error" in x for x in recs)
    lines = log.read_text().splitlines()
    pushes = [ln[len("push "):] for ln in lines if ln.startswith("push ")]
    assert pushes == [_name(x) for x in recs]
    assert lines == [x for p in pushes for x in (f"push {p}", "pop")]


def test_a_rocTX_library_that_cannot_load_is_refused_in_one_line(tmp_path, monkeypatch):
    from sgl_shapeprof import ShapeProfiler
    monkeypatch.setenv("SHAPEPROF_ROCTX_LIBRARY", str(tmp_path / "missing" / "libroctx64.so"))
    with pytest.raises(ValueError) as e:
        ShapeProfiler(str(tmp_path / "x.jsonl"), nvtx=True)
    assert "\n" not in str(e.value) and str(e.value).startswith("nvtx: cannot load rocTX's ranges (") and \
        "SHAPEPROF_ROCTX_LIBRARY names its library" in str(e.value)
    assert not (tmp_path / "x.jsonl").exists()
