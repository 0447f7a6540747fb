"""Timed recording (ShapeProfiler(time=True), record --time): each call's
time, against the test's own clock around and inside a custom op's kernel.
The oracle: a call's record time lies between the time its kernel ran
(measured inside it) and the time the caller waited for it (measured around
it), both on CLOCK_MONOTONIC as the profiler's."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import torch

from sgl_shapeprof import ShapeProfiler

from helpers import load

_inner = []  # (start, end) of each kernel run, taken inside it


@torch.library.custom_op("time_test::spin", mutates_args=())
def spin(x: torch.Tensor, n: int) -> torch.Tensor:
    start = time.perf_counter_ns()
    acc = 0
    for i in range(n):  # work of a length the test chooses
        acc += i
    out = x + (acc & 1)
    _inner.append((start, time.perf_counter_ns()))
    return out


_outer = []  # (start, end) of each call, taken around it


def _run(prof, calls):
    """Each call's (inner ns, outer ns), in call order."""
    _inner.clear()
    _outer.clear()
    x = torch.ones(4, 8)
    prof.start_forward_pass()
    for n in calls:
        t0 = time.perf_counter_ns()
        torch.ops.time_test.spin(x, n)
        _outer.append((t0, time.perf_counter_ns()))
    prof.end_forward_pass()
    prof.close()
    return [(e - s, oe - os) for (s, e), (os, oe) in zip(_inner, _outer)]


def _ns(us: float) -> int:
    return round(us * 1000)


def test_each_record_holds_its_calls_time(tmp_path):
    calls = [2000, 20000, 500, 60000, 8000]
    path = tmp_path / "t.jsonl"
    spans = _run(ShapeProfiler(str(path), time=True), calls)
    recs = [r for r in load(str(path)) if r["operation"] == "time_test.spin.default"]
    assert len(recs) == len(calls)
    for r, (inner, outer) in zip(recs, spans):
        assert inner <= _ns(r["time_us"]) <= outer, (r["time_us"], inner, outer)
    summary = json.loads((tmp_path / "t_summary.json").read_text())
    assert summary["timed"] is True and "signature_times" not in summary


def test_each_record_holds_when_its_call_started(tmp_path):
    """start_us, from the summary's time_origin_ns, places each call on the
    test's own clock: its kernel ran inside [start, start + time], and the
    call began no earlier than the caller's clock read before it."""
    calls = [4000, 30000, 1000, 50000]
    opened = time.perf_counter_ns()
    path = tmp_path / "s.jsonl"
    prof = ShapeProfiler(str(path), time=True)
    _run(prof, calls)
    origin = json.loads((tmp_path / "s_summary.json").read_text())["time_origin_ns"]
    assert opened <= origin <= _outer[0][0]
    recs = [r for r in load(str(path)) if r["operation"] == "time_test.spin.default"]
    assert len(recs) == len(calls)
    for r, (ins, ine), (outs, oute) in zip(recs, _inner, _outer):
        start = origin + _ns(r["start_us"])
        end = start + _ns(r["time_us"])
        assert outs <= start <= ins and ine <= end <= oute, (r, ins, ine, outs, oute)


def test_deduplicated_signature_keeps_count_total_min_median_max(tmp_path):
    calls = [3000, 40000, 1000, 9000, 25000, 500, 12000]
    path = tmp_path / "d.jsonl"
    spans = _run(ShapeProfiler(str(path), time=True, dedupe=True), calls)
    recs = [r for r in load(str(path)) if r["operation"] == "time_test.spin.default"]
    assert len(recs) == 1  # one signature (the count n is not a tensor)
    summary = json.loads((tmp_path / "d_summary.json").read_text())
    st = summary["signature_times"][str(recs[0]["call_id"])]
    inner = sorted(i for i, _ in spans)
    outer = sorted(o for _, o in spans)
    assert st["count"] == len(calls) == summary["signature_counts"][str(recs[0]["call_id"])]
    # each call's time lies in [inner, outer], so does every order statistic
    assert sum(inner) <= _ns(st["total_us"]) <= sum(outer)
    assert inner[0] <= _ns(st["min_us"]) <= outer[0]
    assert inner[-1] <= _ns(st["max_us"]) <= outer[-1]
    assert statistics.median(inner) <= _ns(st["median_us"]) <= statistics.median(outer)
    # the record shows its first call's own time
    assert spans[0][0] <= _ns(recs[0]["time_us"]) <= spans[0][1]


def test_untimed_records_have_no_time(tmp_path):
    path = tmp_path / "u.jsonl"
    _run(ShapeProfiler(str(path), dedupe=True), [100, 200])
    assert all("time_us" not in r for r in load(str(path)))
    summary = json.loads((tmp_path / "u_summary.json").read_text())
    assert summary["timed"] is False and "signature_times" not in summary


def test_analyze_sorts_by_measured_time(tmp_path):
    """analyze --sort time ranks operators by the records' time, and its
    --json gives it; the records' time never splits a signature."""
    path = tmp_path / "a.jsonl"
    prof = ShapeProfiler(str(path), time=True)
    x = torch.ones(64, 64)
    prof.start_forward_pass()
    for _ in range(3):
        torch.ops.time_test.spin(x, 200000)  # long: a Python loop
        torch.add(x, x)                      # short, and called more
        torch.add(x, x)
    prof.end_forward_pass()
    prof.close()
    recs = load(str(path))
    own = {}
    for r in recs:
        own[r["operation"]] = own.get(r["operation"], 0) + _ns(r["time_us"])
    out = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(path), "--sort", "time",
                          "--json"], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    ops = doc["operations"]
    assert [o["operation"] for o in ops] == sorted(own, key=lambda k: -own[k])
    assert ops[0]["operation"] == "time_test.spin.default"
    for o in ops:
        assert o["timed_calls"] == o["calls"]
        assert abs(o["time_us"] * 1000 - own[o["operation"]]) < 1
        assert len(o["signatures"]) == 1  # every call's own time_us does not make a signature
    text = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(path), "--sort", "time",
                           "--show-shapes"], capture_output=True, text=True, check=True).stdout
    assert "Operations by measured time" in text and "time ms" in text


def test_sort_time_refused_without_times(tmp_path):
    path = tmp_path / "n.jsonl"
    _run(ShapeProfiler(str(path)), [100])
    out = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(path), "--sort", "time"],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "no file here was recorded with time" in out.stderr


def test_gemm_shows_measured_time_and_achieved_tflops(tmp_path):
    """gemm's µs per call and TFLOP/s come from the records' times: the
    test's own sums of time_us, and 2*M*N*K per call."""
    path = tmp_path / "g.jsonl"
    prof = ShapeProfiler(str(path), time=True)
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    prof.start_forward_pass()
    for _ in range(4):
        torch.mm(a, b)
    prof.end_forward_pass()
    prof.close()
    own = sum(_ns(r["time_us"]) for r in load(str(path)) if r["operation"] == "aten.mm.default")
    out = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", str(path), "--json", "--gpu", "H100"],
                         capture_output=True, text=True, check=True)
    (g,) = json.loads(out.stdout)
    assert (g["m"], g["n"], g["k"], g["count"], g["timed"]) == (64, 16, 32, 4, 4)
    assert abs(g["us_per_call"] - own / 4 / 1000) < 1e-6
    assert abs(g["tflops"] - 2 * 64 * 16 * 32 * 4 / own / 1000) < 1e-9
    assert g["roofline_us"] > 0
    text = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "gemm", str(path), "--gpu", "H100"],
                          capture_output=True, text=True, check=True).stdout
    assert "us/call" in text and "x roofline" in text


def test_diff_compares_time_per_call(tmp_path):
    """Before and after a kernel change: the same signature's mean time per
    call on each side, from each side's own records."""
    means = []
    for name, n in (("before", 200000), ("after", 2000)):
        path = tmp_path / f"{name}.jsonl"
        prof = ShapeProfiler(str(path), time=True)
        x = torch.ones(4, 8)
        prof.start_forward_pass()
        for _ in range(3):
            torch.ops.time_test.spin(x, n)
        prof.end_forward_pass()
        prof.close()
        ts = [_ns(r["time_us"]) for r in load(str(path)) if r["operation"] == "time_test.spin.default"]
        means.append(sum(ts) / len(ts))
    out = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "diff", str(tmp_path / "before.jsonl"),
                          str(tmp_path / "after.jsonl"), "--json"], capture_output=True, text=True)
    doc = json.loads(out.stdout)
    (t,) = [c for c in doc["time_changes"] if c["operation"] == "time_test.spin.default"]
    assert abs(t["us_per_call_a"] * 1000 - means[0]) < 1 and abs(t["us_per_call_b"] * 1000 - means[1]) < 1
    text = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "diff", str(tmp_path / "before.jsonl"),
                           str(tmp_path / "after.jsonl")], capture_output=True, text=True).stdout
    assert "Measured time per call" in text


def test_tune_ranks_configs_by_measured_time(tmp_path):
    """With times, tune puts first the config key whose calls took the most
    time, not the one called most; without them, the most called."""
    from helpers import tensor, write_records
    from sgl_shapeprof.analysis import tune
    from sgl_shapeprof.analysis.analyze import build
    from sgl_shapeprof.records.scan import scan_all

    def moe(e, n, us):
        rec = {"operation": "sglang.inplace_fused_experts.default",
               "inputs": {"hidden_states": tensor([4, 32], "torch.bfloat16"),
                          "w1": tensor([e, 2 * n, 32], "torch.bfloat16"),
                          "w2": tensor([e, 32, n], "torch.bfloat16"),
                          "topk_weights": tensor([4, 2], "torch.float32"),
                          "topk_ids": tensor([4, 2], "torch.int32")}}
        if us is not None:
            rec["time_us"] = us
        rec["outputs"] = None
        return rec

    for timed in (True, False):
        path = tmp_path / f"moe{timed}.jsonl"
        many_fast = [moe(8, 64, 1.0 if timed else None) for _ in range(3)]
        write_records(path, many_fast + [moe(16, 128, 100.0 if timed else None)])
        uses = tune.moe_uses(build(scan_all([str(path)])).signatures)
        assert [(u.key.e, u.total) for u in uses] == ([(16, 1), (8, 3)] if timed else [(8, 3), (16, 1)])
        if timed:
            assert [(u.time_ns, u.timed) for u in uses] == [(100000, 1), (3000, 3)]


_meta_inner = []


# A plain Library, not custom_op: torch 2.11's custom_op already holds the
# Meta key (through its fake kernel), so a Meta kernel cannot be added to it.
_time_lib = torch.library.Library("time_test", "DEF")
_time_lib.define("spin_fail(Tensor x, int n) -> Tensor")


def _spin_fail_meta(x, n):
    start = time.perf_counter_ns()
    acc = 0
    for i in range(n):
        acc += i
    _meta_inner.append(time.perf_counter_ns() - start)
    raise ValueError(f"spun {acc & 1}")


_time_lib.impl("spin_fail", _spin_fail_meta, "Meta")


def test_a_call_on_meta_tensors_that_raised_has_its_own_time(tmp_path):
    """A call on meta tensors is described only once it raised (FORMAT.md):
    its time is still the call's, at least what its kernel ran, at most what
    the caller waited -- not the time it took to describe it."""
    path = tmp_path / "m.jsonl"
    prof = ShapeProfiler(str(path), time=True)
    x = torch.empty(4, 8, device="meta")
    _meta_inner.clear()
    prof.start_forward_pass()
    t0 = time.perf_counter_ns()
    try:
        torch.ops.time_test.spin_fail(x, 200000)
    except ValueError:
        pass
    outer = time.perf_counter_ns() - t0
    prof.end_forward_pass()
    prof.close()
    (rec,) = [r for r in load(str(path)) if r["operation"] == "time_test.spin_fail.default"]
    assert rec["error"]["error_type"] == "ValueError"
    assert _meta_inner[0] <= _ns(rec["time_us"]) <= outer, (rec["time_us"], _meta_inner, outer)


def test_analyze_by_phase_gives_each_phases_time(tmp_path):
    """--by-phase puts each operation's measured time per phase beside its
    calls, and per shape: the sums of the records' own times."""
    path = tmp_path / "p.jsonl"
    prof = ShapeProfiler(str(path), time=True)
    x, y = torch.ones(4, 8), torch.ones(2, 8)
    for phase, n in (("prefill", 300000), ("decode", 20000), ("decode", 20000)):
        prof.start_forward_pass(phase)
        torch.ops.time_test.spin(x, n)
        torch.ops.time_test.spin(y, n // 10)
        prof.end_forward_pass()
    prof.close()
    want = {}
    for r in load(str(path)):
        if r["operation"] == "time_test.spin.default":
            k = (r["phase"], r["inputs"]["x"]["shape"][0])
            want[k] = want.get(k, 0) + _ns(r["time_us"])
    text = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(path), "--by-phase", "--sort",
                           "time", "--no-largest", "--no-diversity", "--no-summary"],
                          capture_output=True, text=True, check=True).stdout
    section = text[text.index("By phase"):]
    row = next(line for line in section.splitlines() if line.startswith("time_test.spin.default"))
    for phase, calls in (("prefill", 1), ("decode", 2)):
        total = want[(phase, 4)] + want[(phase, 2)]
        assert f"{2 * calls} calls, 2 shapes, {total / 1e6:,.3f} ms" in row, (row, phase, total)
        for rows in (4, 2):
            assert f"    {phase}: {calls}x x=[{rows}, 8] float32, {want[(phase, rows)] / 1e6:,.3f} ms" in section
