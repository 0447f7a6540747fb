"""Issue 52: a profiler armed for requests keeps the graph captures made at
start-up, and a request's file holds the captures of the graphs its passes
replayed, counted as a from-start-up recording of the same window counts
them.

The oracle is a ShapeProfiler recording the same workload from start-up,
its window chosen with skip_warmup: the analysis commands must give the
same counts per operation and signature."""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from sgl_shapeprof import OnRequestProfiler, ShapeProfiler
from sgl_shapeprof.cli.main import main

from helpers import load, true_counts

SIZES = (1, 2, 4)              # graphs captured at start-up, by padded batch size
REPLAYS = [1, 2, 1, 2, 2, 1]   # the window's passes: graph 4 is never replayed
WARM = 3                       # passes served before the request


def capture_body(b: int, w: torch.Tensor) -> None:
    """What a graph's capture runs: a GEMM (gemm, cost) and friends."""
    x = torch.ones(b, 8)
    y = torch.relu(torch.mm(x, w))
    torch.sum(y, 0)


def serve(prof, weights, recapture=None) -> None:
    """Start-up captures, WARM passes, then the window's passes."""
    for b in SIZES:
        with prof.capture_graph(b, "decode"):
            capture_body(b, weights[b])
    for step in range(WARM + len(REPLAYS)):
        if step == WARM and isinstance(prof, OnRequestProfiler):
            prof.request(passes=len(REPLAYS), output=prof.output_dir + "/req.jsonl")
        if recapture is not None and step == recapture[0]:
            with prof.capture_graph(2, "decode"):    # captured again while serving (a new size's shapes)
                capture_body(2, recapture[1])
        with prof.forward_pass("decode"):
            torch.ones(3) + 1                        # an eager call of every pass
            if step >= WARM:
                prof.pass_size(REPLAYS[step - WARM])
                prof.graph_replayed(REPLAYS[step - WARM], real=1)
            else:
                prof.graph_replayed(1, real=1)


def command_json(argv, capsys):
    capsys.readouterr()
    main(argv + ["--json"])
    return json.loads(capsys.readouterr().out)


def recordings(tmp_path, **kw):
    torch.manual_seed(0)
    weights = {b: torch.randn(8, 8 + b) for b in SIZES}
    recapture = kw.pop("recapture", None)
    (tmp_path / "armed").mkdir()
    armed = OnRequestProfiler(output_dir=str(tmp_path / "armed"), control=False, **kw)
    serve(armed, weights, recapture)
    armed.close()
    ref = ShapeProfiler(str(tmp_path / "ref.jsonl"), skip_warmup=WARM, **kw)
    serve(ref, weights)
    ref.close()
    return str(tmp_path / "armed" / "req.jsonl"), str(tmp_path / "ref.jsonl")


@pytest.mark.parametrize("kw", [{}, {"dedupe": True}, {"args": True}, {"dedupe": True, "args": True}],
                         ids=["plain", "dedupe", "args", "dedupe-args"])
def test_a_request_holds_the_start_up_captures_it_replayed(tmp_path, capsys, kw):
    req, ref = recordings(tmp_path, **kw)
    records = load(req)
    graphs = {r.get("graph") for r in records if r["forward_pass"] == 0}
    assert graphs == {1, 2}                          # replayed in the window; 4 never was
    assert all(r["phase"] == "decode" for r in records)
    ids = [r["call_id"] for r in records]
    assert ids == list(range(1, len(ids) + 1))       # the file's own call ids
    s = json.load(open(req.replace(".jsonl", "_summary.json")))
    assert s["graphs"] == {"1": {"captures": 1, "replays": 3, "real_sizes": {"1": 3}},
                           "2": {"captures": 1, "replays": 3, "real_sizes": {"1": 3}},
                           "4": {"captures": 0, "replays": 0}}   # the server has it: unused
    assert s["total_operations"] == len(records)
    # the oracle: the same window recorded from start-up
    assert true_counts(req) == true_counts(ref)
    for cmd in (["gemm"], ["cost", "--gpu", "H100"]):
        a, b = command_json(cmd + [req], capsys), command_json(cmd + [ref], capsys)
        assert _counted(a) == _counted(b), cmd
    capsys.readouterr()
    main(["analyze", req])
    out = capsys.readouterr().out
    assert "their captures are not in this file" not in out
    assert "2 captured (1, 2)" in out


def _counted(doc):
    """A command's rows that stand for calls: a from-start-up file also
    lists the shapes of graphs it captured but never replayed, at 0."""
    doc = _without_files(doc)
    rows = doc if isinstance(doc, list) else doc.get("rows", doc.get("shapes", doc))
    if isinstance(rows, list):
        return [r for r in rows if not isinstance(r, dict) or r.get("count", 1)]
    return rows


def _without_files(doc):
    """A command's JSON less the fields that name the file it read."""
    if isinstance(doc, dict):
        return {k: _without_files(v) for k, v in doc.items() if k not in ("file", "files", "records_file")}
    if isinstance(doc, list):
        return [_without_files(v) for v in doc]
    return doc


def test_tune_names_the_same_graph_sizes_as_the_oracle(tmp_path, capsys):
    req, ref = recordings(tmp_path)
    argv = ["tune", "--cuda-graph-bs", "--device", "NVIDIA_H100_80GB_HBM3", "--configs", str(tmp_path)]
    a, b = command_json(argv + [req], capsys), command_json(argv + [ref], capsys)
    assert _without_files(a) == _without_files(b)


def test_the_newest_capture_of_a_key_is_the_one_a_request_holds(tmp_path, capsys):
    """Graph 2 captured again while serving, before the request: the
    request's file holds the newest capture only."""
    req, _ = recordings(tmp_path, recapture=(WARM - 1, torch.randn(8, 40)))
    mm = [r for r in load(req) if r["operation"] == "aten.mm.default" and r.get("graph") == 2]
    assert [r["inputs"]["mat2"]["shape"] for r in mm] == [[8, 40]]


def test_a_graph_captured_again_inside_the_window_is_written_again_and_said(tmp_path, capsys):
    """Graph 2 replayed, captured again, replayed: both captures ran in the
    window, so both are in the file (captures: 2), and analyze says that
    their calls then count once per capture and replay."""
    req, _ = recordings(tmp_path, recapture=(WARM + 2, torch.randn(8, 40)))
    mm = [r for r in load(req) if r["operation"] == "aten.mm.default" and r.get("graph") == 2]
    assert [r["inputs"]["mat2"]["shape"] for r in mm] == [[8, 10], [8, 40]]
    s = json.load(open(req.replace(".jsonl", "_summary.json")))
    assert s["graphs"]["2"]["captures"] == 2
    capsys.readouterr()
    main(["analyze", req])
    assert "graphs 2 were captured more than once" in capsys.readouterr().out


def test_a_request_filtered_to_another_phase_holds_no_capture(tmp_path):
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    with prof.capture_graph(1, "decode"):
        capture_body(1, torch.randn(8, 8))
    path = prof.request(passes=1, phases=["extend"])
    with prof.forward_pass("extend"):
        prof.graph_replayed(1)
    prof.close()
    assert [r for r in load(path) if r["forward_pass"] == 0] == []
    s = json.load(open(path.replace(".jsonl", "_summary.json")))
    assert s["graphs"] == {"1": {"captures": 0, "replays": 1}}


def test_captures_past_the_cap_are_not_kept_and_the_request_says_so(tmp_path, capsys):
    """The kept captures are capped as a request's file is (max_mb): a
    capture that would pass it is not kept (said once), and the request's
    analysis says its replays have no capture."""
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False, max_mb=0.003)   # 3145 bytes: three captures
    w = torch.randn(8, 8)
    for b in (1, 2, 3, 4):
        with prof.capture_graph(b, "decode"):
            capture_body(b, w)
    err = capsys.readouterr().err
    assert "is not kept for requests" in err and "SHAPEPROF_MAX_MB" in err, err
    kept = prof.captures.stats()
    assert 0 < kept["graphs"] < 4 and kept["bytes"] <= 3145
    path = prof.request(passes=1)
    with prof.forward_pass("decode"):
        for b in (1, 2, 3, 4):
            prof.graph_replayed(b)
    prof.close()
    s = json.load(open(path.replace(".jsonl", "_summary.json")))
    captured = {int(k) for k, g in s["graphs"].items() if g["captures"]}
    assert len(captured) == kept["graphs"]
    main(["analyze", path])
    out = capsys.readouterr().out
    assert "were replayed but their captures are not in this file" in out


def test_a_capture_inside_an_open_pass_is_part_of_it(tmp_path):
    """As with ShapeProfiler: a capture begun inside this thread's open
    pass belongs to that pass (here the request's), not to the kept ones."""
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    path = prof.request(passes=1)
    with prof.forward_pass("decode"):
        with prof.capture_graph(7, "decode"):
            torch.ones(2) * 2
    prof.close()
    assert prof.captures.stats()["graphs"] == 0
    assert [r["forward_pass"] for r in load(path) if r["operation"] == "aten.mul.Tensor"] == [1]


def test_a_process_killed_after_the_write_out_leaves_a_summary_that_counts_it(tmp_path):
    """SIGKILL after a request's pass adopted a capture: the snapshot
    written after that pass counts the adopted records."""
    code = f"""
import os, signal, time, torch
from sgl_shapeprof import OnRequestProfiler
prof = OnRequestProfiler(output_dir={str(tmp_path)!r}, control=False, dedupe=True)
a, b = torch.ones(1, 4), torch.ones(4, 4)
with prof.capture_graph(1, "decode"):
    for _ in range(3):
        torch.mm(a, b)
path = prof.request(passes=5)
for _ in range(2):
    with prof.forward_pass("decode"):
        prof.graph_replayed(1)
summary = path.replace(".jsonl", "_summary.json")
import json
while json.load(open(summary))["logged_forward_passes"] < 2:
    time.sleep(0.01)
print(path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    path = proc.stdout.strip()
    s = json.load(open(path.replace(".jsonl", "_summary.json")))
    assert s["ended_by"] == "running"
    assert s["graphs"] == {"1": {"captures": 1, "replays": 2}}
    records = load(path)
    assert [r["operation"] for r in records] == ["aten.mm.default"]
    assert s["signature_counts"] == {str(records[0]["call_id"]): 3}
    assert s["operation_counts"] == {"aten.mm.default": 3}


def test_the_private_folder_is_removed_at_close(tmp_path):
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    with prof.capture_graph(1, "decode"):
        torch.ones(2) * 2
    folder = prof.captures._folder
    assert folder and os.listdir(folder) == []      # each capture's file is read back and removed
    prof.close()
    assert not os.path.exists(folder)


def test_a_capture_inside_a_pass_no_request_records_is_kept(tmp_path):
    """Armed and idle, a graph captured while a pass runs (a lazily captured
    graph, a new size while serving): the pass records nothing, the capture
    is kept all the same, and the pass after it goes on unrecorded."""
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    with prof.forward_pass("decode"):
        torch.ones(2).neg()                          # not recorded: no request
        with prof.capture_graph(5, "decode"):
            torch.ones(5) * 2
        torch.ones(2).abs()                          # not recorded either
    assert prof.captures.stats()["graphs"] == 1
    path = prof.request(passes=1)
    with prof.forward_pass("decode"):
        prof.graph_replayed(5)
    prof.close()
    assert [(r["operation"], r["graph"]) for r in load(path)] == [
        ("aten.ones.default", 5), ("aten.mul.Tensor", 5)]
