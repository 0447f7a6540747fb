"""What a record says must be true, in every mode users run: deduplication
keeps every distinct (operation, inputs, outputs) with its true count,
several threads lose no call, a start without an end does not swallow the
passes after it, a forked child is told the truth. The oracle is the Python
TorchDispatchMode logger of tests/reference_logger.py, which writes every
call and shares none of the native code's assumptions."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from helpers import PKG_ROOT, ROOT, load, run_python
from reference_logger import ReferenceLogger
from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.records.reader import read_summary


def key(r: dict) -> str:
    """What makes a call distinct to a reader: operation, inputs, outputs, phase."""
    return json.dumps([r["operation"], r["inputs"], r["outputs"], r.get("phase"), r.get("graph")],
                      sort_keys=True)


def true_counts(path) -> Counter:
    """Each record's signature, weighted by the calls it stands for."""
    summary = read_summary(str(path)[:-len(".jsonl")] + "_summary.json")
    counts = summary.get("signature_counts", {})
    c: Counter = Counter()
    for r in load(path):
        c[key(r)] += counts.get(str(r["call_id"]), 1)
    return c


def issue_example(marker):
    x = torch.randn(4, 6)
    with torch.inference_mode():
        for _ in range(3):
            marker.start_forward_pass("generate")
            torch.zeros(2, 3)
            torch.zeros(5, 7)
            x.view(24)
            x.view(3, 8)
            x.reshape(2, 12)
            x.sum(0)
            x.sum(1)
            marker.end_forward_pass()


def shape_deciding_arguments(marker):
    """Operators whose outputs the non-tensor arguments decide."""
    x = torch.randn(2, 3, 8, 8)
    y = torch.randn(6, 10)
    with torch.inference_mode():
        for step in range(3):
            marker.start_forward_pass("prefill" if step == 0 else "decode")
            for n in (3, 4):
                torch.empty(n, 2)
                torch.full((n,), 1.5)
                torch.arange(n)
                torch.arange(0, n, 1, dtype=torch.float64)
            y.view(60)
            y.view(10, 6)
            y.reshape(3, 20)
            y.sum(0)
            y.sum(1)
            y.mean(-1, keepdim=True)
            y.narrow(1, 0, 4)
            y.narrow(1, 2, 8)
            y[:, 1:5]
            y[2:4]
            y.permute(1, 0)
            y.transpose(0, 1)
            y.repeat(2, 1)
            y.repeat(1, 3)
            y[:, :1].expand(6, 4)
            y[:, :1].expand(6, 7)
            F.interpolate(x, scale_factor=2.0)
            F.interpolate(x, size=(5, 5))
            y.split(5, dim=1)
            y.split(3, dim=1)
            marker.end_forward_pass()


WORKLOADS = {"issue_example": issue_example, "shape_deciding_arguments": shape_deciding_arguments}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_dedupe_keeps_every_distinct_call_with_its_true_count(tmp_path, name):
    work = WORKLOADS[name]
    ref = ReferenceLogger(str(tmp_path / "ref.jsonl"))
    try:
        work(ref)
    finally:
        ref.close()
    expected = Counter(key(r) for r in load(tmp_path / "ref.jsonl"))
    assert len(expected) > 5
    for dedupe in (True, False):
        path = tmp_path / f"ours-{dedupe}.jsonl"
        prof = ShapeProfiler(path, dedupe=dedupe)
        work(prof)
        prof.close()
        got = true_counts(path)
        missing = {k: v for k, v in expected.items() if got.get(k) != v}
        extra = {k: v for k, v in got.items() if k not in expected}
        assert not missing and not extra, (dedupe, missing, extra)
        s = read_summary(str(path)[:-6] + "_summary.json")
        assert s["unique_op_signatures"] == len(expected)
        if dedupe:  # written once each
            assert len(load(path)) == len(expected)


def test_dedupe_with_an_error_first_does_not_hide_the_calls_that_returned(tmp_path):
    """The first call of a signature raised: the later calls that returned are
    still written, and the error record stands for itself only."""
    path = tmp_path / "e.jsonl"
    prof = ShapeProfiler(path, dedupe=True)
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    for i in range(3):
        with prof.forward_pass():
            if i == 0:
                with pytest.raises(RuntimeError):
                    torch.mm(b, a)
            torch.mm(a, b)
            with pytest.raises(RuntimeError):
                torch.mm(b, a)
    prof.close()
    got = true_counts(path)
    mm_ok = [k for k in got if json.loads(k)[0] == "aten.mm.default" and json.loads(k)[2]]
    assert len(mm_ok) == 1 and got[mm_ok[0]] == 3
    recs = load(path)
    assert sum(1 for r in recs if r.get("error")) == 4
    assert sum(1 for r in recs if r["operation"] == "aten.mm.default" and r["outputs"]) == 1


def test_args_dedupe_ignores_float_values_but_keeps_shape_deciding_ones(tmp_path):
    """With arguments on, a float that changes every step (a diffusion
    schedule's scale) does not make a new signature; an int that decides the
    output does."""
    path = tmp_path / "a.jsonl"
    prof = ShapeProfiler(path, dedupe=True, args=True)
    x = torch.randn(4, 6)
    with torch.inference_mode():
        for step in range(20):
            with prof.forward_pass("denoise"):
                x.mul(0.5 + step / 100)          # a float that changes per step
                torch.add(x, x, alpha=1.0 + step)
                x.sum(step % 2)                  # an int that decides the output
    prof.close()
    recs = load(path)
    ops = Counter(r["operation"] for r in recs)
    assert ops["aten.mul.Tensor"] == 1 and ops["aten.add.Tensor"] == 1
    assert ops["aten.sum.dim_IntList"] == 2
    got = true_counts(path)
    assert sorted(got.values()) == [10, 10, 20, 20]
    mul = next(r for r in recs if r["operation"] == "aten.mul.Tensor")
    assert mul["args"] == {} or "other" in mul["inputs"] or "other" in mul["args"]
    # without dedupe every call is written with its own values
    path2 = tmp_path / "b.jsonl"
    prof = ShapeProfiler(path2, args=True)
    with torch.inference_mode():
        for step in range(3):
            with prof.forward_pass("denoise"):
                torch.add(x, x, alpha=1.0 + step)
    prof.close()
    assert [r["args"]["alpha"] for r in load(path2)] == [1.0, 2.0, 3.0]
    assert read_summary(str(path2)[:-6] + "_summary.json")["unique_op_signatures"] == 1


def test_analyze_json_agrees_signature_by_signature(tmp_path):
    from sgl_shapeprof.cli import main as cli
    out = {}
    for dedupe in (True, False):
        path = tmp_path / f"w{int(dedupe)}.jsonl"
        prof = ShapeProfiler(path, dedupe=dedupe)
        shape_deciding_arguments(prof)
        prof.close()
        js = tmp_path / f"w{int(dedupe)}.json"
        rc = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(path), "--json",
                             "--show-shapes", "--max-shapes", "1000"],
                            capture_output=True, text=True, env=_env())
        assert rc.returncode == 0, rc.stderr
        out[dedupe] = json.loads(rc.stdout)
    assert cli  # imported: the CLI module loads

    def signatures(o):
        return sorted((op["operation"], json.dumps([s["inputs"], s["outputs"], s.get("phase")], sort_keys=True),
                       s["count"]) for op in o["operations"] for s in op["signatures"])
    a, b = signatures(out[True]), signatures(out[False])
    assert len(a) > 20
    assert a == b
    assert [(op["operation"], op["calls"]) for op in out[True]["operations"]] == \
           [(op["operation"], op["calls"]) for op in out[False]["operations"]]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PKG_ROOT, os.path.join(ROOT, "tests"), env.get("PYTHONPATH", "")])
    return env


# ---- several threads ---------------------------------------------------------

def one_pass_body(x):
    y = torch.ones(3, 5)
    z = torch.mm(x, y)
    z = torch.tanh(z)
    z = torch.add(z, 1)
    a, b = torch.split(z, [2, 3], dim=1)
    c = torch.cat([b, a], dim=1)
    return c.sum()


def calls_per_pass(tmp_path) -> int:
    ref = ReferenceLogger(str(tmp_path / "one.jsonl"))
    x = torch.randn(4, 3)
    ref.start_forward_pass()
    one_pass_body(x)
    ref.end_forward_pass()
    ref.close()
    return len(load(tmp_path / "one.jsonl"))


@pytest.mark.parametrize("n_threads", [2, 4])
def test_threads_with_overlapping_passes_lose_no_call(tmp_path, n_threads):
    k = calls_per_pass(tmp_path)
    path = tmp_path / "mt.jsonl"
    prof = ShapeProfiler(path)
    passes = 150
    errors = []
    start = threading.Barrier(n_threads)

    def worker(i):
        try:
            x = torch.randn(4, 3)
            start.wait()
            for j in range(passes):
                with prof.forward_pass(f"t{i}"):
                    one_pass_body(x)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    prof.close()
    assert not errors
    recs = load(path)
    assert [r["call_id"] for r in recs] == list(range(1, len(recs) + 1))
    assert len(recs) == n_threads * passes * k
    by_pass = Counter((r["forward_pass"], r["phase"]) for r in recs)
    assert len(by_pass) == n_threads * passes
    assert set(by_pass.values()) == {k}          # every pass holds its own calls, all of them
    assert len({p for p, _ in by_pass}) == n_threads * passes  # a number names one pass
    s = read_summary(str(path)[:-6] + "_summary.json")
    assert s["total_operations"] == len(recs)
    assert s["forward_passes"] == s["logged_forward_passes"] == n_threads * passes


KILLED = r'''
import os, sys, threading, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1], dedupe=sys.argv[3] == "1")
n = int(sys.argv[2])
go = threading.Barrier(n + 1)
def worker(i):
    x = torch.randn(4, 3)
    go.wait()
    j = 0
    while True:
        with prof.forward_pass():
            y = torch.ones(3, 5 + (j % 7))
            z = torch.mm(x, y).tanh().add(1)
            a, b = torch.split(z, [2, z.shape[1] - 2], dim=1)
            torch.cat([b, a], dim=1).sum()
        j += 1
for i in range(n):
    threading.Thread(target=worker, args=(i,), daemon=True).start()
go.wait()
print("go", flush=True)
threading.Event().wait()
'''


@pytest.mark.parametrize("n_threads,dedupe", [(2, "0"), (4, "0"), (2, "1")])
def test_sigkill_of_logging_threads_leaves_only_whole_lines(tmp_path, n_threads, dedupe):
    rnd = random.Random(n_threads * 7 + int(dedupe))
    for run in range(6):
        path = tmp_path / f"k{run}.jsonl"
        env = _env()
        p = subprocess.Popen([sys.executable, "-c", KILLED, str(path), str(n_threads), dedupe],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        assert p.stdout.readline().strip() == "go"
        # let it log for a random while (a deduplicated file hardly grows),
        # then kill it mid-flight
        want, until = rnd.randint(200, 6000) * 120, time.monotonic() + rnd.uniform(0.2, 1.5)
        while p.poll() is None and time.monotonic() < until:
            try:
                if os.path.getsize(path) > want:
                    break
            except OSError:
                pass
            os.sched_yield()
        p.send_signal(signal.SIGKILL)
        p.wait()
        data = path.read_bytes()
        body = data.rstrip(b"\0")
        assert b"\0" not in body, f"run {run}: NUL bytes inside the records"
        lines = body.split(b"\n")
        whole, last = lines[:-1], lines[-1]
        recs = [json.loads(x) for x in whole]  # every line but the last parses
        assert [r["call_id"] for r in recs] == list(range(1, len(recs) + 1))
        if last:
            assert last.startswith(b'{"call_id": ')
        s = read_summary(str(path)[:-6] + "_summary.json")
        assert s["total_operations"] <= len(recs)
        if dedupe == "1":
            counted = sum(s.get("signature_counts", {}).get(str(r["call_id"]), 1)
                          for r in recs[:s["total_operations"]])
            assert counted == s["total_operations"] + s["dedupe_skipped_count"]


# ---- a start without an end, forks -------------------------------------------

def test_a_start_without_an_end_does_not_swallow_later_passes(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    prof = ShapeProfiler(path, log_n_passes=2)
    x = torch.ones(2)
    logged = []
    for i in range(5):
        logged.append(prof.start_forward_pass())
        x.neg()
        if i > 0:                     # the first pass's forward raised before its end
            prof.end_forward_pass()
    prof.close()
    assert logged == [True, True, False, False, False]
    passes = Counter(r["forward_pass"] for r in load(path) if r["operation"] == "aten.neg.default")
    assert passes == {1: 1, 2: 1}
    s = read_summary(str(path)[:-6] + "_summary.json")
    assert s["forward_passes"] == 5 and s["logged_forward_passes"] == 2
    assert capsys.readouterr().err.count("still open") == 1


def test_the_context_manager_still_nests(tmp_path):
    path = tmp_path / "n.jsonl"
    prof = ShapeProfiler(path)
    with prof.forward_pass("outer"):
        torch.ones(1).neg()
        assert prof.start_forward_pass("inner")   # inside a with-block: part of it
        torch.ones(2).neg()
        prof.end_forward_pass()
        torch.ones(3).neg()
    prof.close()
    assert {r["forward_pass"] for r in load(path)} == {1}
    assert read_summary(str(path)[:-6] + "_summary.json")["forward_passes"] == 1


FORKED_IN_PASS = r'''
import os, sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1])
assert prof.start_forward_pass()
torch.ones(2).neg()
pid = os.fork()
if pid == 0:
    answers = [prof.start_forward_pass(), prof.logging]
    torch.ones(7).neg()
    prof.end_forward_pass()
    with prof.forward_pass() as logged:
        answers.append(logged)
    print(answers, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
prof.end_forward_pass()
prof.close()
'''


def test_a_forked_child_is_told_it_records_nothing(tmp_path):
    path = tmp_path / "f.jsonl"
    r = run_python(FORKED_IN_PASS, args=(path,))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[False, False, False]"
    assert [r["inputs"].get("self", {}).get("shape") for r in load(path)
            if r["operation"] == "aten.neg.default"] == [[2]]


def test_a_thread_that_exits_inside_its_pass_does_not_hold_the_file_open(tmp_path):
    """A thread ended without ending its pass: the pass ends with the thread,
    so the flusher (which waits for no open pass) writes the summary again."""
    path = tmp_path / "x.jsonl"
    prof = ShapeProfiler(path)

    def forgetful():
        prof.start_forward_pass()
        torch.ones(2).neg()
    t = threading.Thread(target=forgetful)
    t.start()
    t.join()
    with prof.forward_pass():
        torch.ones(3).neg()
    summary = str(path)[:-6] + "_summary.json"
    deadline = time.monotonic() + 20
    while True:  # polls: the flusher promises milliseconds, a busy CI may take longer
        s = read_summary(summary)
        if s["forward_passes"] == 2 and s["total_operations"] == 4:
            break
        assert time.monotonic() < deadline, s
        time.sleep(0.01)
    prof.close()
