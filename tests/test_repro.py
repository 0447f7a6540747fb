"""repro: a standalone script per recorded call, run without sgl_shapeprof;
analyze --tail after a crash; sync mode.

The oracle for every error is what the recording program itself caught
(type name and str() of the exception, written to a side file), not what
the profiler recorded."""
import inspect
import json
import os
import subprocess
import sys
import tarfile

import pytest

from helpers import load, run_python
from sgl_shapeprof.cli import main as cli
from sgl_shapeprof.replay import tensors, verdict

OPS_MODULE = '''
import ctypes
import os

import torch

lib = torch.library.Library("reprotest", "DEF")
lib.define("even_rows(Tensor x) -> Tensor")
lib.define("odd_message(Tensor x) -> Tensor")
lib.define("die(Tensor x, str how) -> Tensor")


def _even_rows(x):
    if x.shape[0] % 2:
        raise ValueError(f"even_rows: x has {x.shape[0]} rows, an odd number")
    return x[: x.shape[0] // 2].clone()


class OddError(Exception):
    pass


def _odd_message(x):
    raise OddError("line one: 'quoted' \\"double\\" \\\\ back\\nline two: \\u00e9\\u4e2d \\x00 nul")


before_dying = None  # a test's hook: runs in the kernel, before it crashes


def _die(x, how):
    if before_dying is not None:
        before_dying()
    if how == "segv":
        ctypes.string_at(0)
    os.abort()


lib.impl("even_rows", _even_rows, "CPU")
lib.impl("odd_message", _odd_message, "CPU")
lib.impl("die", _die, "CPU")
'''

# each failing call: (name, code that raises); `x`, `w` are made before
FAILING = [
    ("mm", "torch.mm(torch.randn(3, 4), torch.randn(5, 6))"),
    ("linear", "torch.nn.functional.linear(torch.randn(2, 7), torch.randn(3, 5))"),
    ("cat", "torch.cat([torch.randn(2, 3), torch.randn(2, 4)])"),
    ("dtype", "torch.mm(torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2))"),
    ("index_select", "torch.randn(5, 3).index_select(0, torch.tensor([1, 9]))"),
    ("embedding", "torch.nn.functional.embedding(torch.tensor([[0, 12]]), torch.randn(6, 4))"),
    ("custom", "torch.ops.reprotest.even_rows(torch.randn(5, 2))"),
    ("python_kernel", "torch.ops.reprotest.odd_message(torch.randn(2, 2))"),
]
# calls that return: (name, code, the output shape torch gives)
RETURNING = [
    ("strided_sum", "torch.randn(4, 6).t()[1:].sum(1)"),
    ("even_rows", "torch.ops.reprotest.even_rows(torch.randn(4, 2))"),
]

RECORD = '''
import json, sys
import torch
import sgl_shapeprof as sp
import reprotest_ops
failing, returning, out, dedupe, args = json.loads(sys.argv[1])
seen = {"errors": [], "shapes": {}}
p = sp.ShapeProfiler(out, args=args, dedupe=dedupe)
with p.forward_pass():
    for name, code in failing:
        try:
            eval(code)
        except Exception as e:
            seen["errors"].append([name, type(e).__name__, str(e)])
    for name, code, in returning:
        seen["shapes"][name] = list(eval(code).shape)
p.close()
json.dump(seen, open(out + ".seen.json", "w"))
'''


@pytest.fixture(scope="module")
def ops_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    (d / "reprotest_ops.py").write_text(OPS_MODULE)
    return d


def _record(ops_dir, out, dedupe=False, args=True):
    # cwd: the ops module imports from there
    r = run_python(RECORD, args=[json.dumps([FAILING, RETURNING, str(out), dedupe, args])], cwd=str(ops_dir))
    assert r.returncode == 0, r.stderr
    return json.load(open(str(out) + ".seen.json"))


@pytest.fixture(scope="module")
def recorded(ops_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rec") / "shapes.jsonl"
    return out, _record(ops_dir, out)


def _repro(args, capsys):
    rc = cli(["repro", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


# A fresh interpreter in which sgl_shapeprof cannot be imported: the scripts need only torch.
BLOCKED = r'''
import runpy, sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "sgl_shapeprof":
            raise ImportError("sgl_shapeprof is not available here")
sys.meta_path.insert(0, Blocker())
assert "sgl_shapeprof" not in sys.modules
script = sys.argv[1]
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
'''


def _run_blocked(script, ops_dir):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ops_dir)
    return subprocess.run([sys.executable, "-c", BLOCKED, str(script)], capture_output=True, text=True,
                          env=env, cwd=str(script.parent), timeout=120)


def test_every_error_reproduces_without_sgl_shapeprof(recorded, ops_dir, tmp_path, capsys, monkeypatch):
    path, seen = recorded
    assert len(seen["errors"]) == len(FAILING)  # the oracle: each call raised in the program
    errors = [r for r in load(str(path)) if "error" in r]
    assert len(errors) == len(FAILING)
    monkeypatch.syspath_prepend(str(ops_dir))
    rc, out, err = _repro([path, "--import", "reprotest_ops", "-o", tmp_path / "r"], capsys)
    assert rc == 0, err
    scripts = sorted((tmp_path / "r").glob("*.py"))
    assert len(scripts) == len(FAILING)
    by_op = {}
    for s in scripts:
        text = s.read_text()
        assert "sgl_shapeprof" not in "".join(l for l in text.splitlines() if l.startswith(("import", "from")))
        by_op[s.name] = s
        r = _run_blocked(s, ops_dir)
        assert r.returncode == 0, (s.name, r.stdout, r.stderr)
        assert r.stdout.startswith("reproduced: "), (s.name, r.stdout)
    # the reproduced exceptions are the ones the program saw, in the order it saw them
    lines = []
    for rec in errors:
        s = next(p for n, p in by_op.items() if n.startswith(f"call{rec['call_id']}_"))
        lines.append(_run_blocked(s, ops_dir).stdout.strip())
    for (name, typ, msg), line in zip(seen["errors"], lines):
        assert line.startswith(f"reproduced: {typ}: {msg.splitlines()[0]}"), (name, line)


def test_run_reports_per_call_and_exit_status(recorded, ops_dir, tmp_path, capsys, monkeypatch):
    path, _ = recorded
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ops_dir), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(ops_dir))
    rc, out, err = _repro([path, "--import", "reprotest_ops", "-o", tmp_path / "r", "--run"], capsys)
    assert rc == 0, out + err
    assert out.count("    reproduced: ") == len(FAILING), out
    assert f"{len(FAILING)} of {len(FAILING)} calls as recorded" in out
    # an edited script no longer fails: --run's exit status says so
    s = next((tmp_path / "r").glob("*_aten_mm_default.py"))
    text = s.read_text()
    s.write_text(text.replace("tensor([5, 6]", "tensor([4, 6]", 1))
    r = subprocess.run([sys.executable, s.name], cwd=str(s.parent), capture_output=True, text=True)
    assert r.returncode == verdict.DID_NOT_RAISE and r.stdout.startswith("did not raise"), r.stdout


def test_returning_calls_run_clean_with_the_recorded_shapes(recorded, ops_dir, tmp_path, capsys, monkeypatch):
    path, seen = recorded
    monkeypatch.syspath_prepend(str(ops_dir))
    rc, out, err = _repro([path, "--import", "reprotest_ops", "--filter-op", r"sum\.dim|even_rows",
                           "-o", tmp_path / "r"], capsys)
    assert rc == 0, err
    scripts = {s.name: s for s in (tmp_path / "r").glob("*.py")}
    ran = {}
    for name, s in scripts.items():
        r = _run_blocked(s, ops_dir)
        ran[name] = (r.returncode, r.stdout.strip())
    sums = [v for k, v in ran.items() if "sum_dim" in k]
    assert len(sums) == 1 and sums[0][0] == 0, ran
    assert sums[0][1] == f"ran as recorded: outputs {{'shape': {seen['shapes']['strided_sum']}, 'dtype': 'torch.float32'}}"
    evens = [v for k, v in ran.items() if "even_rows" in k]
    # the custom op: once raising (odd rows), once returning (even rows)
    assert sorted(v[1].split(":")[0] for v in evens) == ["ran as recorded", "reproduced"], evens
    assert any(str(seen["shapes"]["even_rows"]) in v[1] for v in evens)
    # the strided input is laid out as recorded
    text = next(s for k, s in scripts.items() if "sum_dim" in k).read_text()
    assert "stride=[1, 6]" in text and "offset=1" in text


def test_scripts_carry_the_one_tensor_maker(recorded, ops_dir, tmp_path, capsys, monkeypatch):
    path, _ = recorded
    monkeypatch.syspath_prepend(str(ops_dir))
    _repro([path, "--import", "reprotest_ops", "-o", tmp_path / "r"], capsys)
    from sgl_shapeprof.replay import inputs
    for s in (tmp_path / "r").glob("*.py"):
        text = s.read_text()
        assert inspect.getsource(tensors) in text and inspect.getsource(verdict) in text
    # and replay makes its tensors with that same function
    assert "from .tensors import tensor" in inspect.getsource(inputs.make)


def test_index_errors_keep_their_indices_out_of_range(recorded, ops_dir, tmp_path, capsys, monkeypatch):
    path, _ = recorded
    monkeypatch.syspath_prepend(str(ops_dir))
    rc, out, _ = _repro([path, "--import", "reprotest_ops", "-o", tmp_path / "r"], capsys)
    assert "out of range, as the recorded error needs" in out
    text = next((tmp_path / "r").glob("*_aten_index_select_default.py")).read_text()
    assert "fill='outside', high=5" in text  # self has 5 rows: every index is >= 5


def test_what_cannot_be_reproduced_is_said(ops_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ops_dir))
    # without arguments: no script, and why
    plain = tmp_path / "plain.jsonl"
    _record(ops_dir, plain, args=False)
    rc, out, _ = _repro([plain, "-o", tmp_path / "a"], capsys)
    assert out.count("no script: the file was recorded without arguments") == len(FAILING)
    assert not list((tmp_path / "a").glob("*.py"))
    rc, out, _ = _repro([plain, "-o", tmp_path / "a2", "--run"], capsys)
    assert rc == 1 and f"0 of {len(FAILING)} calls as recorded" in out
    # deduplicated: said, and its errors still reproduce
    dd = tmp_path / "dd.jsonl"
    _record(ops_dir, dd, dedupe=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ops_dir), os.environ.get("PYTHONPATH", "")]))
    rc, out, _ = _repro([dd, "--import", "reprotest_ops", "-o", tmp_path / "b", "--run"], capsys)
    assert "is deduplicated" in out and rc == 0, out


CRASH = '''
import sys, threading
import torch
import sgl_shapeprof as sp
import reprotest_ops
how, nthreads, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
p = sp.ShapeProfiler(out, args=True)
ready = threading.Barrier(nthreads)
busy, entered, overwritten = threading.Event(), threading.Event(), threading.Event()
def in_the_kernel():  # the crasher's inputs are on disk: let the other thread write over them
    entered.set()
    overwritten.wait()
if nthreads > 1:
    reprotest_ops.before_dying = in_the_kernel
def other():
    with p.forward_pass(phase="other"):
        x = torch.randn(3, 3)
        ready.wait()
        after = 0
        for i in range(10**9):  # writing all along: its records take the place of the
            x = torch.mul(x, 1)  # crasher's inputs on disk, which the signal handler puts back
            if i == 20:
                busy.set()
            if entered.is_set():
                after += 1
                if after == 5:
                    overwritten.set()
def crasher():
    with p.forward_pass(phase="crasher"):
        x = torch.randn(4, 4)
        for _ in range(25):
            x = torch.add(x, 1)
        if nthreads > 1:
            ready.wait()
            busy.wait()        # the other thread is writing
            for _ in range(200):
                x = torch.sub(x, 1)
        torch.ops.reprotest.die(x[:2], how)
for _ in range(nthreads - 1):
    threading.Thread(target=other, daemon=True).start()
crasher()
'''


@pytest.mark.parametrize("how,nthreads", [("segv", 1), ("abort", 1), ("segv", 2), ("abort", 2)])
def test_analyze_tail_after_a_crash(ops_dir, tmp_path, capsys, monkeypatch, how, nthreads):
    out = tmp_path / "crash.jsonl"
    r = run_python(CRASH, args=[how, nthreads, out], cwd=str(ops_dir))
    assert r.returncode in (-11, -6), r.stderr  # it really died of the signal
    rc = cli(["analyze", str(out), "--tail", "5", "--json"])
    doc = json.loads(capsys.readouterr().out)
    tails = doc["crash_tails"][0]
    first = tails["passes"][0]
    assert first["in_flight"] and first["phase"] == "crasher"
    ops = [rec["operation"] for rec in first["records"]]
    assert ops[0] == "reprotest.die.default" and len(ops) == 5
    assert ops[1] == "aten.slice.Tensor"
    assert set(ops[2:]) == {"aten.sub.Tensor" if nthreads > 1 else "aten.add.Tensor"}
    phases = [p["phase"] for p in tails["passes"]]
    assert phases == (["crasher", "other"] if nthreads > 1 else ["crasher"]), phases
    if nthreads > 1:
        assert {rec["operation"] for rec in tails["passes"][1]["records"]} == {"aten.mul.Tensor"}
    cli(["analyze", str(out), "--tail", "3"])
    text = capsys.readouterr().out
    assert "Last calls before the end" in text and "<- in flight: the process died in this call" in text
    # the crash's call, as a script: it kills its interpreter too
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ops_dir), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(ops_dir))
    rc, text, _ = _repro([out, "--import", "reprotest_ops", "-o", tmp_path / "r", "--run"], capsys)
    assert "cut by a crash" in text and "    reproduced: the process died of SIG" in text and rc == 0, text


KILLED_BETWEEN_PASSES = r"""
import json, os, signal, sys, time, torch, sgl_shapeprof
p = sgl_shapeprof.ShapeProfiler(sys.argv[1])
with p.forward_pass("decode"):
    torch.ones(2).add(1)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # the flusher's snapshot after the pass's end (as a server's idle worker)
    try:
        s = json.load(open(p.summary_path))
        if s.get("open_passes") == [] and s.get("logged_forward_passes") == 1:
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)  # as SGLang ends its workers
"""


def test_killed_between_passes(tmp_path, capsys):
    """SIGKILLed while no pass was open: the file says it did not close, and
    that no call was cut short (no empty list of calls)."""
    out = tmp_path / "k.jsonl"
    r = run_python(KILLED_BETWEEN_PASSES, args=[out], cwd=str(tmp_path))
    assert r.returncode == -9, r.stderr
    cli(["analyze", str(out)])
    text = capsys.readouterr().out
    assert "did not close (ended_by: running)" in text
    assert "no pass was open at its last snapshot, so no call was cut short" in text
    assert "Last calls before the end" not in text


def test_no_tail_for_a_file_that_closed(recorded, capsys):
    path, _ = recorded
    cli(["analyze", str(path)])
    assert "Last calls before the end" not in capsys.readouterr().out


def test_bundle_archive(recorded, ops_dir, tmp_path, capsys, monkeypatch):
    path, _ = recorded
    monkeypatch.syspath_prepend(str(ops_dir))
    target = tmp_path / "bug.tar.gz"
    rc, out, err = _repro([path, "--import", "reprotest_ops", "--bundle", target], capsys)
    assert rc == 0, err
    with tarfile.open(target) as tar:
        names = set(tar.getnames())
        index = json.load(tar.extractfile("bug/index.json"))
        records = tar.extractfile("bug/records.jsonl").read().decode().splitlines()
    assert {"bug/index.json", "bug/records.jsonl", "bug/summary.json"} <= names
    assert len([n for n in names if n.endswith(".py")]) == len(FAILING) == len(records) == len(index["calls"])
    assert {json.loads(l)["call_id"] for l in records} == {c["call_id"] for c in index["calls"]}
    # each script is named as the archive's member it is, never as a path on disk
    said = [line.split(" -> ", 1)[1] for line in out.splitlines() if " -> " in line]
    assert said and all(p.endswith(f" in {target}") and p.split(" in ")[0] in names for p in said), out
    assert not any(str(target) + "/" in line for line in out.splitlines()), out
    rc, out, err = _repro([path, "--import", "reprotest_ops", "--bundle", target], capsys)
    assert rc == 2 and "exists; not overwritten" in err


def test_bad_input(recorded, tmp_path, capsys):
    path, _ = recorded
    rc, _, err = _repro([tmp_path / "missing.jsonl"], capsys)
    assert rc == 2 and "missing.jsonl" in err
    rc, out, err = _repro([path, "--call", "99999", "-o", tmp_path / "r"], capsys)
    assert rc == 1 and "call 99999: no record with this call_id" in err
    rc, _, err = _repro([path, "--timeout", "0"], capsys)
    assert rc == 2 and "--timeout" in err


def test_sync_mode_records_the_same_on_cpu(tmp_path):
    """On the CPU sync mode waits for nothing: the same records, the same results."""
    import torch
    import sgl_shapeprof as sp
    outs = []
    for sync in (False, True):
        p = sp.ShapeProfiler(tmp_path / f"s{sync}.jsonl", sync=sync)
        torch.manual_seed(0)
        with p.forward_pass():
            y = torch.randn(4, 4).mm(torch.randn(4, 4)).relu().sum()
            try:
                torch.randn(3).index_select(0, torch.tensor([7]))
            except IndexError:
                pass
        p.close()
        outs.append((float(y), [{k: v for k, v in r.items()} for r in load(str(tmp_path / f"s{sync}.jsonl"))]))
    assert outs[0] == outs[1]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_sync_mode_blames_the_launching_call_on_cuda(tmp_path):
    """An out-of-range index_select on CUDA fails asynchronously: without
    sync the error surfaces at a later synchronising call; with it, at the
    index_select itself."""
    code = '''
import sys, torch, sgl_shapeprof as sp
p = sp.ShapeProfiler(sys.argv[1], sync=sys.argv[2] == "1")
with p.forward_pass():
    try:
        x = torch.randn(8, 4, device="cuda").index_select(0, torch.tensor([1, 10**6], device="cuda"))
        y = (x * 2).sum().item()
    except Exception as e:
        print(type(e).__name__)
p.close()
'''
    failing = {}
    for sync in ("0", "1"):
        out = tmp_path / f"c{sync}.jsonl"
        run_python(code, args=[out, sync])
        failing[sync] = [r["operation"] for r in load(str(out)) if "error" in r]
    assert failing["1"] == ["aten.index_select.default"], failing
    assert failing["0"] and failing["0"][0] != "aten.index_select.default", failing


@pytest.mark.parametrize("inside", [False, True])
def test_sync_is_refused_for_a_graph_capture(tmp_path, inside):
    """A capture (its own, or inside an open pass) never syncs: said once."""
    code = '''
import sys, torch, sgl_shapeprof as sp
p = sp.ShapeProfiler(sys.argv[1], sync=True)
if sys.argv[2] == "1":
    with p.forward_pass():
        with p.capture_graph(8):
            torch.ones(2) + 1
else:
    with p.capture_graph(8):
        torch.ones(2) + 1
    with p.forward_pass():
        torch.ones(2) + 1
p.close()
'''
    r = run_python(code, args=[tmp_path / "g.jsonl", int(inside)])
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("sync: not while a CUDA graph is captured") == 1, r.stderr
    assert any(rec["operation"] == "aten.add.Tensor" for rec in load(str(tmp_path / "g.jsonl")))
