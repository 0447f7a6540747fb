"""`sgl-shapeprof trace`: a timed recording as a Perfetto / Chrome trace.
The oracle is the test's own CLOCK_MONOTONIC (time.perf_counter_ns), read
around each call and inside its kernel: each call's slice must hold its
kernel and lie inside the caller's wait."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from sgl_shapeprof import ShapeProfiler
from sgl_shapeprof.analysis.timeline import Call, lay_out

_inner = []  # (start, end) of each kernel run, taken inside it


@torch.library.custom_op("trace_test::spin", mutates_args=())
def spin(x: torch.Tensor, n: int) -> torch.Tensor:
    start = time.perf_counter_ns()
    acc = 0
    for i in range(n):
        acc += i
    out = x + (acc & 1)
    _inner.append((start, time.perf_counter_ns()))
    return out


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sgl_shapeprof", *args], capture_output=True, text=True)


def _record(path, passes, **opts):
    """Records passes (phase, [spin lengths]); each call's (outer start, outer end)."""
    _inner.clear()
    outer = []
    prof = ShapeProfiler(str(path), time=True, **opts)
    x = torch.ones(4, 8)
    for phase, calls in passes:
        prof.start_forward_pass(phase)
        for n in calls:
            t0 = time.perf_counter_ns()
            torch.ops.trace_test.spin(x, n)
            outer.append((t0, time.perf_counter_ns()))
        prof.end_forward_pass()
    prof.close()
    return outer


def _trace(path, out, *extra):
    r = _cli("trace", str(path), "-o", str(out), *extra)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    return doc, r.stdout


def test_each_call_is_a_slice_where_it_ran(tmp_path):
    passes = [("prefill", [30000, 2000]), ("decode", [5000, 500, 8000]), ("decode", [1000])]
    outer = _record(tmp_path / "t.jsonl", passes)
    doc, stdout = _trace(tmp_path / "t.jsonl", tmp_path / "t.trace.json")
    base = doc["otherData"]["clock_base_ns"]
    ev = doc["traceEvents"]
    calls = sorted((e for e in ev if e.get("cat") == "call" and e["name"] == "trace_test.spin.default"),
                   key=lambda e: e["ts"])
    assert len(calls) == len(outer) == len(_inner) == 6
    for e, (os_, oe), (is_, ie) in zip(calls, outer, _inner):
        start = base + round(e["ts"] * 1000)
        end = start + round(e["dur"] * 1000)
        assert os_ - 1 <= start <= is_ + 1 and ie - 1 <= end <= oe + 1, (e, os_, oe, is_, ie)
        assert e["args"]["inputs"] == "x=[4, 8] float32" and e["args"]["outputs"] == "[4, 8] float32"
    # the passes: a slice each, over its own calls, named by its phase
    ps = sorted((e for e in ev if e.get("cat") == "pass"), key=lambda e: e["ts"])
    assert [p["name"] for p in ps] == ["pass 1 (prefill)", "pass 2 (decode)", "pass 3 (decode)"]
    i = 0
    for p, (_, lengths) in zip(ps, passes):
        mine = calls[i:i + len(lengths)]
        i += len(lengths)
        assert p["args"]["calls"] == len(lengths)
        assert p["ts"] == mine[0]["ts"]
        assert abs(p["ts"] + p["dur"] - (mine[-1]["ts"] + mine[-1]["dur"])) < 0.002
        in_calls = sum(c["dur"] for c in mine)  # one thread's calls do not overlap
        assert abs(p["args"]["in_calls_us"] - in_calls) < 0.01
        assert abs(p["args"]["between_calls_us"] - (p["dur"] - in_calls)) < 0.01
    names = {(e["tid"], e["args"]["name"]) for e in ev if e["name"] == "thread_name"}
    assert names == {(0, "passes"), (1, "calls")}
    assert "6 calls in 3 passes of 1 file" in stdout


def test_filters_choose_the_calls(tmp_path):
    _record(tmp_path / "f.jsonl", [("prefill", [100]), ("decode", [200]), ("decode", [300])])
    doc, _ = _trace(tmp_path / "f.jsonl", tmp_path / "f.trace.json", "--passes", "2-3")
    assert sorted(e["name"] for e in doc["traceEvents"] if e.get("cat") == "pass") == ["pass 2 (decode)",
                                                                                      "pass 3 (decode)"]


def test_a_deduplicated_file_says_what_the_timeline_lacks(tmp_path):
    _record(tmp_path / "d.jsonl", [("decode", [100, 100, 100, 100])], dedupe=True)
    doc, stdout = _trace(tmp_path / "d.jsonl", tmp_path / "d.trace.json")
    assert sum(e.get("cat") == "call" for e in doc["traceEvents"]) == 1
    assert "its 1 records stand for 4 calls" in stdout
    assert any("first call only" in n for n in doc["otherData"]["notes"])


def test_refusals_name_what_is_wrong(tmp_path):
    prof = ShapeProfiler(str(tmp_path / "u.jsonl"))
    prof.start_forward_pass()
    torch.ops.trace_test.spin(torch.ones(2), 10)
    prof.end_forward_pass()
    prof.close()
    r = _cli("trace", str(tmp_path / "u.jsonl"), "-o", str(tmp_path / "u.trace.json"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "u.jsonl: not timed" in r.stderr and "--time" in r.stderr
    assert not (tmp_path / "u.trace.json").exists()
    _record(tmp_path / "t.jsonl", [("decode", [10])])
    (tmp_path / "mine.json").write_text("keep")
    r = _cli("trace", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "mine.json"))
    assert r.returncode == 2 and "not overwritten" in r.stderr
    assert (tmp_path / "mine.json").read_text() == "keep"


def test_a_record_without_a_readable_time_is_left_out_and_said(tmp_path):
    _record(tmp_path / "h.jsonl", [("decode", [100, 200, 300])])
    lines = (tmp_path / "h.jsonl").read_text().splitlines(keepends=True)
    spins = [i for i, line in enumerate(lines) if "trace_test.spin" in line]
    for i, bad in zip(spins, ('"start_us": -5.0', '"start_us": "soon"')):
        lines[i] = re.sub(r'"start_us": [0-9.]+', bad, lines[i])
    (tmp_path / "h.jsonl").write_text("".join(lines))
    doc, stdout = _trace(tmp_path / "h.jsonl", tmp_path / "h.trace.json")
    assert sum(e["name"] == "trace_test.spin.default" for e in doc["traceEvents"]) == 1
    assert "h.jsonl: 2 records without a readable start_us and time_us: left out of the timeline" in stdout


def _c(start, dur):
    return Call(start=start, dur=dur, operation="op", call_id=start, forward_pass=1, phase=None, graph=None,
                inputs="", outputs="")


def test_lanes_hold_only_nesting_or_following_calls():
    """Two threads' calls that overlap without nesting must not share a lane
    (a track of the trace nests, or Perfetto draws it wrong), and calls that
    nest keep to one lane. (By times alone a call of B inside one of A's is
    indistinguishable from A's own: lanes are not threads.)"""
    thread_a = [_c(0, 100), _c(10, 20), _c(40, 50), _c(45, 5), _c(200, 10)]
    b_over, b_in, b_late = _c(30, 80), _c(100, 5), _c(205, 20)
    thread_b = [b_over, b_in, b_late]
    lanes = lay_out(thread_a + thread_b)
    assert sorted(id(c) for lane in lanes for c in lane) == sorted(id(c) for c in thread_a + thread_b)
    for lane in lanes:
        for i, a in enumerate(lane):
            for b in lane[i + 1:]:  # any two: apart, or one inside the other
                assert a.end <= b.start or b.end <= a.start or \
                    (a.start <= b.start and b.end <= a.end) or (b.start <= a.start and a.end <= b.end)
    assert all(any(c is x for x in lanes[0]) for c in thread_a)
    assert len(lanes) == 2 and any(c is b_over for c in lanes[1]) and any(c is b_late for c in lanes[1])


def test_perfettos_trace_processor_reads_it(tmp_path):
    """Where Perfetto's trace processor can run (the perfetto package and
    its trace_processor_shell, named by PERFETTO_TRACE_PROCESSOR, since the
    package downloads it on first use), its slices are the trace's."""
    tp_api = pytest.importorskip("perfetto.trace_processor")
    shell = os.environ.get("PERFETTO_TRACE_PROCESSOR")
    if not shell or not os.path.isfile(shell):
        pytest.skip("no trace_processor_shell: set PERFETTO_TRACE_PROCESSOR to one")
    outer = _record(tmp_path / "p.jsonl", [("prefill", [2000, 100]), ("decode", [300])])
    doc, _ = _trace(tmp_path / "p.jsonl", tmp_path / "p.trace.json")
    tp = tp_api.TraceProcessor(trace=str(tmp_path / "p.trace.json"),
                               config=tp_api.TraceProcessorConfig(bin_path=shell))
    try:
        rows = list(tp.query("select name, dur from slice where name = 'trace_test.spin.default' order by ts"))
    finally:
        tp.close()
    mine = sorted((e for e in doc["traceEvents"] if e.get("name") == "trace_test.spin.default"),
                  key=lambda e: e["ts"])
    assert len(rows) == len(outer) == len(mine)
    for r, e in zip(rows, mine):
        assert abs(r.dur - e["dur"] * 1000) <= 1
