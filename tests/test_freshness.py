"""Files that are never stale: soon after passes end (the flusher thread's
work: SP_FLUSH_QUIET = 1 ms after the last pass end) the records file holds exactly its
records (no NUL tail of the pre-extended window) and the summary on disk
agrees with them, even when the process is then SIGKILLed (SGLang ends its
workers that way)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import PKG_ROOT

CHILD = r'''
import sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1], dedupe=sys.argv[2] == "1", log_n_passes=int(sys.argv[4]))
x = torch.randn(4, 8)
for i in range(int(sys.argv[3])):
    with prof.forward_pass("decode" if i else "extend"):
        y = torch.relu(x @ torch.ones(8, 8 + i % 3)) + 1
        y.sum()
print("ready", flush=True)
sys.stdin.readline()   # the parent kills us here, between passes
'''


def wait_for_flush(summary_path, passes, timeout=10.0):
    """Polls (no fixed sleep) until the summary on disk counts `passes`
    passes; the flusher promises a few ms, we allow far more on a busy CI."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = json.loads(open(summary_path).read())
            if s["forward_passes"] == passes:
                return s
        except (OSError, ValueError):
            pass
        assert time.monotonic() < deadline, f"no summary for {passes} passes after {timeout} s"
        time.sleep(0.01)


def run_and_kill(tmp_path, dedupe, passes, limit=0):
    path = tmp_path / "k.jsonl"
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(path), "1" if dedupe else "0", str(passes),
                          str(limit)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        wait_for_flush(tmp_path / "k_summary.json", passes)
        data = path.read_bytes()   # while the process lives, between passes
    finally:
        p.kill()
        p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL
    return path, data


@pytest.mark.parametrize("dedupe", [False, True])
def test_sigkill_right_after_a_pass_leaves_exact_files(tmp_path, dedupe):
    path, live = run_and_kill(tmp_path, dedupe, passes=7)
    data = path.read_bytes()
    assert data == live                      # nothing changed at the kill
    assert b"\0" not in data and data.endswith(b"\n")
    records = [json.loads(line) for line in data.decode().splitlines()]
    summary = json.loads((tmp_path / "k_summary.json").read_text())
    assert summary["ended_by"] == "running"
    assert summary["total_operations"] == len(records)
    assert summary["records_bytes"] == len(data)
    assert summary["forward_passes"] == summary["logged_forward_passes"] == 7
    assert {r["forward_pass"] for r in records} <= set(range(1, 8))
    assert summary["phase_passes"] == {"extend": 1, "decode": 6}
    counts = summary["operation_counts"]
    assert sum(counts.values()) == summary["total_operations"] + summary["dedupe_skipped_count"]
    if dedupe:
        assert summary["dedupe_skipped_count"] > 0
        # 3 shapes of the mm in decode, 1 in extend (a phase is part of the
        # signature): each written once
        assert sum(r["operation"] == "aten.mm.default" for r in records) == 4
        assert counts["aten.mm.default"] == 7
        # every record's true count, exact as of the kill
        sc = summary["signature_counts"]
        true = [sc.get(str(r["call_id"]), 1) for r in records]
        assert sum(true) == summary["total_operations"] + summary["dedupe_skipped_count"]
        assert sum(n for r, n in zip(records, true) if r["operation"] == "aten.mm.default") == 7
    else:
        assert summary["dedupe_skipped_count"] == 0
        assert sum(r["operation"] == "aten.mm.default" for r in records) == 7


def test_passes_past_the_limit_write_nothing_and_keep_the_file_exact(tmp_path):
    path, _ = run_and_kill(tmp_path, False, passes=5, limit=2)
    data = path.read_bytes()
    assert b"\0" not in data
    records = [json.loads(line) for line in data.decode().splitlines()]
    assert {r["forward_pass"] for r in records} == {1, 2}
    summary = json.loads((tmp_path / "k_summary.json").read_text())
    assert summary["logged_forward_passes"] == 2
    assert summary["total_operations"] == len(records)


def test_a_rerun_killed_early_leaves_no_earlier_summary(tmp_path):
    from sgl_shapeprof import ShapeProfiler
    import torch
    first = ShapeProfiler(str(tmp_path / "k.jsonl"))
    with first.forward_pass():
        torch.ones(3) + 1
    first.close()
    assert json.loads((tmp_path / "k_summary.json").read_text())["ended_by"] == "close"
    # the second run on the same path dies before any pass ends
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    code = ("import sys, torch; from sgl_shapeprof import ShapeProfiler; "
            "p = ShapeProfiler(sys.argv[1]); p.start_forward_pass(); torch.ones(2) * 3; "
            "print('ready', flush=True); sys.stdin.readline()")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "k.jsonl")], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    p.kill()
    p.wait(timeout=60)
    summary = json.loads((tmp_path / "k_summary.json").read_text())
    assert summary["ended_by"] == "running" and summary["total_operations"] == 0


def test_file_is_exact_between_passes_and_grows_again(tmp_path):
    from sgl_shapeprof import ShapeProfiler
    import torch
    path = tmp_path / "g.jsonl"
    prof = ShapeProfiler(str(path))
    sizes = []
    for i in range(3):
        with prof.forward_pass():
            for _ in range(200):
                torch.ones(5, i + 1).neg()
        wait_for_flush(tmp_path / "g_summary.json", i + 1)
        data = path.read_bytes()
        assert b"\0" not in data and data.endswith(b"\n")
        assert len(data.splitlines()) == 400 * (i + 1)
        sizes.append(len(data))
    prof.close()
    assert sizes[0] < sizes[1] < sizes[2] == path.stat().st_size


BUSY = r'''
import os, sys, torch
from sgl_shapeprof import ShapeProfiler
prof = ShapeProfiler(sys.argv[1])
x = torch.ones(4, 4)
n = 0
while not os.path.exists(sys.argv[2]):   # passes back to back until told to stop
    for _ in range(100):
        with prof.forward_pass("decode"):
            x.add(1).mul(2)
    n += 100
print(n, flush=True)
sys.stdin.readline()
'''


def test_summary_is_rewritten_while_passes_never_stop(tmp_path):
    """Flushes wait for a quiet moment, but not for ever: a process whose
    passes never stop (a busy server) still gets its summary rewritten as it
    runs (the flusher's SP_FLUSH_BUSY cap: a summary alone, mid-pass if need
    be, without waiting for a gap between passes)."""
    stop = tmp_path / "stop"
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    p = subprocess.Popen([sys.executable, "-c", BUSY, str(tmp_path / "b.jsonl"), str(stop)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 5 and time.monotonic() < deadline and p.poll() is None:
            try:
                s = json.loads((tmp_path / "b_summary.json").read_text())
                seen.add(s["forward_passes"])
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        running = p.poll() is None
        stop.touch()
        ran = int(p.stdout.readline())
    finally:
        p.kill()
        p.wait(timeout=60)
    assert running, p.stderr.read()
    # five different summaries while the passes went on, each a true count
    assert len(seen) >= 5, seen
    assert max(seen) <= ran
