"""Profiling on request: armed profilers record nothing until asked, then
exactly the passes asked for, into files of their own; from another thread
and from outside the process."""
import json
import os
import subprocess
import sys
import threading

import pytest
import torch
from helpers import PKG_ROOT, load

import sgl_shapeprof

from sgl_shapeprof import _C  # noqa: F401  (built)
from sgl_shapeprof.cli import main
from sgl_shapeprof.recording.on_request import OnRequestProfiler
from sgl_shapeprof.recording.requests import RequestError


def passes(prof, n, phase=None, start=0):
    x = torch.ones(2, 3)
    for i in range(n):
        with prof.forward_pass(phase):
            torch.add(x, start + i)


def test_armed_records_nothing_and_costs_no_operator(tmp_path):
    prof = OnRequestProfiler(rank=0, output_dir=str(tmp_path), control=False)
    from sgl_shapeprof import _C
    with prof.forward_pass("decode") as logged:
        assert not logged and not _C.thread_enabled()   # the dispatch key stays out
        torch.ones(3).neg()
    assert os.listdir(tmp_path) == []
    prof.close()


def test_request_records_the_next_n_passes_then_stops(tmp_path):
    prof = OnRequestProfiler(rank=3, output_dir=str(tmp_path), control=False)
    passes(prof, 2)                                     # before the request: nothing
    path = prof.request(passes=3)
    assert prof.status()["state"] == "pending"
    passes(prof, 5)
    assert prof.status()["state"] == "armed" and prof.finished == [path]
    recs = load(path)
    assert sorted({r["forward_pass"] for r in recs}) == [1, 2, 3]
    s = json.load(open(path.replace(".jsonl", "_summary.json")))
    assert s["rank"] == 3 and s["logged_forward_passes"] == 3 and s["ended_by"] == "close"
    # a second request never overwrites the first one's file
    again = prof.request(passes=1, output=path)
    assert again != path and again.endswith(".1.jsonl")
    passes(prof, 1)
    assert len(load(path)) == len(recs)
    prof.close()


def test_phases_per_phase_and_stop_from_another_thread(tmp_path):
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    path = prof.request(passes=2, phases=["prefill", "decode"], per_phase=True)
    passes(prof, 1, "extend")
    passes(prof, 4, "decode")
    passes(prof, 2, "extend")   # the second extend pass: its phase is done after it
    assert prof.finished == [path]
    phases = [r.get("phase") for r in load(path)]
    assert phases.count("extend") == 2 and phases.count("decode") == 2
    # stop() from another thread while the model thread is inside a pass
    path2 = prof.request()
    inside, release = threading.Event(), threading.Event()

    def model():
        with prof.forward_pass("decode"):
            torch.ones(2).neg()
            inside.set()
            release.wait(30)
            torch.ones(2).abs()                         # after the stop: not logged
    t = threading.Thread(target=model)
    t.start()
    assert inside.wait(30)
    assert prof.stop() == path2
    release.set()
    t.join(30)
    assert [r["operation"] for r in load(path2)] == ["aten.ones.default", "aten.neg.default"]
    prof.close()


def test_bad_requests_say_why(tmp_path):
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    prof.request(passes=1)
    with pytest.raises(RequestError, match="already recording"):
        prof.request(passes=1)
    prof.stop()
    with pytest.raises(RequestError, match="does not exist"):
        prof.request(output=str(tmp_path / "no" / "x.jsonl"))
    with pytest.raises(ValueError, match="phase"):
        prof.request(phases="de code")
    prof.close()
    with pytest.raises(RequestError, match="closed"):
        prof.request()


SERVER = r'''
import os, sys, time, torch, sgl_shapeprof
prof = sgl_shapeprof.from_env()
print(type(prof).__name__, flush=True)
x = torch.ones(2, 2)
with prof.capture_graph(1):       # start-up: a graph captured, armed
    torch.mul(x, 3)
i = 0
while not os.path.exists(sys.argv[1]):
    with prof.forward_pass("decode"):
        torch.add(x, i)
        prof.graph_replayed(1)
    i += 1
    time.sleep(0.002)   # a server between batches
prof.close()
'''


def test_request_from_outside_the_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, SGLANG_PROFILE_SHAPES="on_request",
               SGLANG_PROFILE_SHAPES_FILE=str(tmp_path / "shapes.jsonl"),
               SGLANG_PROFILE_SHAPES_CONTROL_DIR=str(tmp_path / "ctl"))
    os.environ["SGLANG_PROFILE_SHAPES_CONTROL_DIR"] = env["SGLANG_PROFILE_SHAPES_CONTROL_DIR"]
    stop_file = tmp_path / "stop"
    p = subprocess.Popen([sys.executable, "-c", SERVER, str(stop_file)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "OnRequestProfiler", p.stderr.read()
        out = tmp_path / "req.jsonl"
        r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "request", str(p.pid), "--passes", "4",
                            "-o", str(out)], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"recording 4 passes of rank 0 into {out}" in r.stdout
        r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "request", str(p.pid), "--status"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "armed" in r.stdout     # the 4 passes are done by now
        recs = load(out)
        assert len({r["forward_pass"] for r in recs if r["forward_pass"]}) == 4
        # the graph captured at start-up, kept: written once, replayed by each pass (issue 52)
        assert [(r["operation"], r["graph"]) for r in recs if "graph" in r] == [("aten.mul.Tensor", 1)]
        summary = json.load(open(tmp_path / "req_summary.json"))
        assert summary["ended_by"] == "close" and summary["graphs"] == {"1": {"captures": 1, "replays": 4}}
    finally:
        stop_file.write_text("")
        p.wait(timeout=60)
        del os.environ["SGLANG_PROFILE_SHAPES_CONTROL_DIR"]
    # a process that is not there
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "request", str(p.pid), "--timeout", "5"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and f"no process {p.pid}" in r.stderr


def test_control_folder_must_be_private(tmp_path, monkeypatch):
    d = tmp_path / "open"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_CONTROL_DIR", str(d))
    assert main(["request", str(os.getpid()), "--timeout", "1"]) == 2


@pytest.mark.parametrize("kind", ["a file", "open to others"])
def test_a_bad_control_folder_variable_is_named(tmp_path, monkeypatch, capsys, kind):
    d = tmp_path / "ctl"
    if kind == "a file":
        d.write_text("")
    else:
        d.mkdir()
        os.chmod(d, 0o755)
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_CONTROL_DIR", str(d))
    # the sender: one line naming the variable and its value
    assert main(["request", str(os.getpid()), "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"SGLANG_PROFILE_SHAPES_CONTROL_DIR={str(d)!r}: " in err, err
    assert "must be a directory owned by this user with mode 0700" in err, err
    # the armed process: says once that it cannot take requests from outside
    prof = OnRequestProfiler(rank=0, output_dir=str(tmp_path))
    prof.mailbox.POLL_EVERY = 0
    passes(prof, 3)
    prof.close()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"SGLANG_PROFILE_SHAPES_CONTROL_DIR={str(d)!r}: " in err[0], err
    assert "requests from outside the process are not taken" in err[0], err


def test_armed_from_env_says_which_variables_it_does_not_use(tmp_path, monkeypatch, capsys):
    """SGLANG_PROFILE_SHAPES=on_request: a request gives its own passes,
    phases and skip; the variables for them are not used, and that is said
    (once, naming them) rather than silently ignored."""
    from sgl_shapeprof.recording import env, messages
    monkeypatch.setattr(env, "_env_profiler", None)
    messages._said.discard("armed-unused")  # said once per process: forget an earlier test's
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "on_request")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", str(tmp_path / "s.jsonl"))
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_LOG_N_PASSES", "5")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_PHASES", "decode")
    prof = sgl_shapeprof.from_env()
    assert isinstance(prof, OnRequestProfiler)
    assert sgl_shapeprof.from_env() is prof
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert ("SGLANG_PROFILE_SHAPES_LOG_N_PASSES='5', SGLANG_PROFILE_SHAPES_PHASES='decode': not used with "
            "SGLANG_PROFILE_SHAPES=on_request") in err[0], err
    prof.close()


def test_armed_from_env_output_folder_that_does_not_exist_is_named(tmp_path, monkeypatch):
    from sgl_shapeprof.recording import env
    monkeypatch.setattr(env, "_env_profiler", None)
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "on_request")
    value = str(tmp_path / "nope" / "s.jsonl")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES_FILE", value)
    prof = sgl_shapeprof.from_env()
    with pytest.raises(RequestError, match=f"its directory does not exist \\(SGLANG_PROFILE_SHAPES_FILE={value!r} "
                                           "chose it; or name the output\\)"):
        prof.request(passes=1)
    prof.close()


def test_graphs_captured_before_the_request_are_said_by_every_command(tmp_path, capsys):
    """Graphs captured before the profiler was armed (its captures are kept
    from then on: test_kept_captures.py): the request's file counts their
    replays but holds none of their calls. Every command that counts calls
    says so, with the number of replays it leaves out."""
    w = torch.randn(8, 16)
    prof = OnRequestProfiler(rank=0, output_dir=str(tmp_path), control=False)  # armed after graphs 1, 2
    path = prof.request(passes=3)
    x = torch.ones(4, 8)
    for step in range(3):
        with prof.forward_pass("decode"):
            prof.graph_replayed(1 + step % 2)           # 1, 2, 1
            torch.mm(x, w)                              # an eager pass's own call
    assert prof.finished == [path]
    assert [r["operation"] for r in load(path)] == ["aten.mm.default"] * 3   # no captured call
    said = "3 replays of 2 CUDA graphs (1, 2) whose captures are not in this file"
    for cmd in ("gemm", "cost", "tune", "diff"):
        argv = [cmd, path] + {"diff": [path],
                              "tune": ["--device", "NVIDIA_H100_80GB_HBM3", "--configs", str(tmp_path)]}.get(cmd, [])
        main(argv)                      # text: in the header, stdout's first line
        out = capsys.readouterr().out
        assert said in out.splitlines()[0], out
        if cmd != "diff":               # machine-readable: on stderr, stdout left parseable
            main(argv + ["--json"])
            out, err = capsys.readouterr()
            json.loads(out)
            assert f"sgl-shapeprof {cmd}: " in err and said in err, err
    main(["analyze", path])
    out = capsys.readouterr()
    assert "were replayed but their captures are not in this file" in out.out and "before this" not in out.err
    prof.close()


def test_the_file_is_created_when_the_request_is_taken(tmp_path):
    """Issue 40, point 3: the records file is opened at request time (a
    name of its own, O_EXCL, never through a symbolic link, a regular
    file), not at the next pass: what happens to the folder meanwhile
    cannot redirect it, and a refused request creates nothing."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "r.jsonl")                  # planted where the request writes
    prof = OnRequestProfiler(output_dir=str(out), control=False)
    path = prof.request(passes=1, output=str(out / "r.jsonl"))
    assert path == str(out / "r.1.jsonl") and os.path.isfile(path) and not os.path.islink(path)
    assert os.path.exists(path.replace(".jsonl", "_summary.json"))   # before any pass
    # the folder swapped for a link to another one before the pass: the
    # records and the summary stay in the folder the request was taken in
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rename(out, tmp_path / "moved")
    os.symlink(elsewhere, out)
    passes(prof, 2)
    assert os.listdir(elsewhere) == []
    moved = tmp_path / "moved"
    assert {r["forward_pass"] for r in load(str(moved / "r.1.jsonl"))} == {1}
    s = json.load(open(moved / "r.1_summary.json"))
    assert s["logged_forward_passes"] == 1 and s["ended_by"] == "close"
    assert victim.read_text() == "keep me"
    prof.close()


def test_a_refused_request_creates_nothing_and_a_taken_back_one_leaves_nothing(tmp_path):
    prof = OnRequestProfiler(output_dir=str(tmp_path), control=False)
    for bad in ({"passes": -1}, {"skip": -2}, {"passes": 1.5}, {"phases": ["a b"]},
                {"output": str(tmp_path / "no" / "such" / "x.jsonl")}, {"per_phase": True}):
        with pytest.raises(ValueError):
            prof.request(**bad)
    os.mkfifo(tmp_path / "fifo.jsonl")
    path = prof.request(output=str(tmp_path / "fifo.jsonl"))   # a FIFO's name is taken, never opened
    assert path.endswith("fifo.1.jsonl")
    assert prof.cancel(str(tmp_path / "other.jsonl")) is None   # not the pending one: left alone
    assert prof.cancel() == path
    assert sorted(os.listdir(tmp_path)) == ["fifo.jsonl"]
    assert prof.status()["state"] == "armed"
    passes(prof, 1)
    assert sorted(os.listdir(tmp_path)) == ["fifo.jsonl"]
    # stop() of a request no pass has reached: its files say no pass ran
    path = prof.request(passes=1)
    assert prof.stop() == path
    assert json.load(open(path.replace(".jsonl", "_summary.json")))["logged_forward_passes"] == 0
    prof.close()


def test_a_request_may_time_its_calls(tmp_path):
    """A request's own time switch (the mailbox's "time": true, `request
    --time`) times its file's calls; the armed profiler's setting holds for
    the next request, and a value that is not a switch is refused in one line."""
    from sgl_shapeprof.recording.mailbox import answer
    prof = OnRequestProfiler(rank=0, output_dir=str(tmp_path), control=False)
    reply = answer(prof, json.dumps({"action": "start", "passes": 1, "time": True}).encode())
    assert reply["ok"], reply
    passes(prof, 1)
    assert all("time_us" in r for r in load(reply["records_file"]))
    path = prof.request(passes=1)
    passes(prof, 1)
    assert all("time_us" not in r for r in load(path))
    bad = answer(prof, json.dumps({"action": "start", "time": "yes"}).encode())
    assert not bad["ok"] and bad["message"] == "time 'yes' is not true or false"
    prof.close()
