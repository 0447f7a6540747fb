"""The command line: analyze, record, demo, python -m sgl_shapeprof."""
import io
import json
import os
import subprocess
import sys

import pytest

from helpers import PKG_ROOT, StubServer, load

from sgl_shapeprof.cli import main


def cli(*args, cwd=None, timeout=300):
    # "python" in a command means the one first on PATH: make that ours.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, PATH=path)
    return subprocess.run([sys.executable, "-m", "sgl_shapeprof", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout, env=env)


def write(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def rec(i, op, shape, error=None):
    r = {"call_id": i, "forward_pass": 1, "operation": op,
         "inputs": {"self": {"shape": shape, "dtype": "torch.float16"}},
         "outputs": None if error else {"shape": shape, "dtype": "torch.float16"}}
    if error:
        r["error"] = {"error_type": "RuntimeError", "error_message": error}
    return r


def test_analyze_counts_shapes_errors_filter(tmp_path, capsys):
    path = tmp_path / "a.jsonl"
    write(path, [rec(1, "aten.mm.default", [2, 3]), rec(2, "aten.mm.default", [2, 3]),
                 rec(3, "aten.mm.default", [4, 3]), rec(4, "aten.relu.default", [9]),
                 rec(5, "aten.bmm.default", [1, 2, 3], error="boom: bad shapes")])
    assert main(["analyze", str(path), "--show-shapes"]) == 0
    out = capsys.readouterr().out
    assert "a.jsonl: 5 records, 1 forward pass" in out and "unique operations:        3" in out
    assert out.index("Errors") < out.index("aten.mm.default")          # errors first
    assert "boom: bad shapes" in out and "self=[1, 2, 3] float16" in out
    lines = [ln.split() for ln in out.splitlines()]
    assert ["3", "2", "24", "aten.mm.default"] in lines                # 3 calls, 2 shapes, 24 elements
    assert any(ln[:2] == ["2x", "self=[2,"] for ln in lines)
    assert main(["analyze", str(path), "--filter-op", "relu"]) == 0
    out = capsys.readouterr().out
    assert "aten.relu.default" in out and "aten.mm.default" not in out
    assert main(["analyze", str(path), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "aten.mm.default" in out and "aten.relu.default" not in out


def test_analyze_bad_input(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    path = tmp_path / "a.jsonl"
    write(path, [rec(1, "aten.mm.default", [2, 3])])
    assert main(["analyze", str(path), "--filter-op", "("]) == 2
    assert "bad --filter-op regex" in capsys.readouterr().err


def test_record_a_script(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("import sys, torch\nx = torch.randn(6, 7)\nprint((x @ x.t()).shape[0], sys.argv[1:])\n")
    out = tmp_path / "rec.jsonl"
    r = cli("record", "-o", str(out), "--", sys.executable, str(script), "a", "b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "6 ['a', 'b']"
    ops = [x["operation"] for x in load(out)]
    assert ops == ["aten.randn.default", "aten.t.default", "aten.mm.default"]
    s = json.load(open(tmp_path / "rec_summary.json"))
    assert s["forward_passes"] == 1 and s["total_operations"] == 3


def test_record_script_that_marks_its_passes(tmp_path):
    script = tmp_path / "m.py"
    script.write_text(
        "import torch, sgl_shapeprof\n"
        "prof = sgl_shapeprof.from_env()\n"
        "torch.ones(1).neg()\n"                       # in the implicit pass 1
        "for _ in range(2):\n"
        "    with prof.forward_pass():\n"
        "        torch.ones(2).abs()\n")
    out = tmp_path / "m.jsonl"
    r = cli("record", "-o", str(out), "--", "python", str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [(x["forward_pass"], x["operation"]) for x in load(out)] == [
        (1, "aten.ones.default"), (1, "aten.neg.default"),
        (2, "aten.ones.default"), (2, "aten.abs.default"),
        (3, "aten.ones.default"), (3, "aten.abs.default")]


def test_record_with_a_bad_rank_variable_says_so_in_one_line(tmp_path, monkeypatch):
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    monkeypatch.setenv("RANK", "2" * 30)
    r = cli("record", "-o", str(tmp_path / "s.jsonl"), "--", sys.executable, str(script), cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and f"RANK={'2' * 30!r} is too large" in r.stderr, r.stderr
    assert not (tmp_path / "s.jsonl").exists()
    # run directly (as record runs it), the program runs and profiling is off
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, SGLANG_PROFILE_SHAPES="1",
               SGLANG_PROFILE_SHAPES_FILE=str(tmp_path / "s.jsonl"))
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof.recording.program", str(script)], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert r.stderr.count("\n") == 1 and "RANK=" in r.stderr and "profiling is off" in r.stderr, r.stderr


def test_record_rejects_non_python(tmp_path):
    r = cli("record", "--", "ls")
    assert r.returncode == 2 and "not a Python command" in r.stderr


def test_demo(tmp_path):
    r = cli("demo", "--dir", str(tmp_path / "d"), "--decode-steps", "2", "--steps", "5", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    files = sorted(os.listdir(tmp_path / "d"))
    assert files == ["diffusion_shapes.jsonl", "diffusion_shapes_summary.json",
                     "llm_shapes.jsonl", "llm_shapes_summary.json"]
    assert "aten.linear.default" in r.stdout and "3 forward passes" in r.stdout
    s = json.load(open(tmp_path / "d" / "diffusion_shapes_summary.json"))
    assert s["dedupe_enabled"] and s["dedupe_skipped_count"] > 0


def test_analyze_streams_big_files(tmp_path):
    """Memory grows with distinct signatures, not with records."""
    import tracemalloc

    from sgl_shapeprof.analysis.analyze import analyze_file
    path = tmp_path / "big.jsonl"
    line = json.dumps(rec(1, "aten.mm.default", [128, 256])) + "\n"
    with open(path, "w") as f:
        for _ in range(40):
            f.write(line * 1000)
    size = os.path.getsize(path)
    tracemalloc.start()
    a = analyze_file(str(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert a.records == 40000
    assert peak < size / 10, (peak, size)


def test_analyze_json_for_tuning_scripts(tmp_path, capsys):
    path = tmp_path / "a.jsonl"
    write(path, [rec(1, "aten.mm.default", [2, 3]), rec(2, "aten.mm.default", [2, 3]),
                 rec(3, "aten.mm.default", [4, 3]), rec(4, "aten.relu.default", [9], error="bad")])
    assert main(["analyze", str(path), "--json", "--filter-op", "mm"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["records"] == 3 and data["errors"] == []
    (mm,) = data["operations"]
    assert mm["operation"] == "aten.mm.default" and mm["calls"] == 3
    assert [(s["inputs"]["self"]["shape"], s["count"]) for s in mm["signatures"]] == [([2, 3], 2), ([4, 3], 1)]
    assert mm["signatures"][0]["outputs"] == {"shape": [2, 3], "dtype": "torch.float16"}


COUNT_OPTIONS = [("analyze", "--top"), ("analyze", "--max-shapes"), ("analyze", "--tail"),
                 ("analyze", "--min-elements"), ("analyze", "--max-entries"), ("cost", "--top"),
                 ("diff", "--top"), ("gemm", "--top"), ("replay", "--top"), ("record", "--skip-warmup"),
                 ("record", "--log-n-passes"), ("request", "--passes"), ("request", "--skip"),
                 ("demo", "--decode-steps"), ("demo", "--steps")]


@pytest.mark.parametrize("cmd,option", COUNT_OPTIONS)
def test_a_count_option_refuses_a_negative_or_a_word_in_one_line(cmd, option, capsys):
    """Counts are checked by their option's type, before the command runs."""
    operands = {"diff": ["a.jsonl", "b.jsonl"], "record": ["--", "python", "x.py"], "request": ["1"],
                "demo": []}.get(cmd, ["a.jsonl"])
    for value, why in (("-1", "'-1': must be >= 0"), ("two", "'two' is not a whole number")):
        with pytest.raises(SystemExit) as e:
            main([cmd, option, value, *operands])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == f"sgl-shapeprof {cmd}: error: argument {option}: {why}"


def test_run_shows_the_passes_recorded_while_the_engine_runs(tmp_path):
    # run's progress line (cli/run.py _wait): a child stands in for the
    # engine, writing a worker's summary snapshot, and goes on until the
    # line showing it was written (then the marker file appears)
    from sgl_shapeprof.cli.run import _wait
    marker = tmp_path / "seen"
    child = subprocess.Popen([sys.executable, "-c", f"""
import json, os, time
json.dump({{"logged_forward_passes": 2}}, open({str(tmp_path / "shapes.rank0_summary.json")!r}, "w"))
while not os.path.exists({str(marker)!r}):
    time.sleep(0.05)
"""])

    class Terminal:
        text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s
            if "recorded 2/3 passes" in s:
                marker.write_text("")

        def flush(self):
            pass
    err = Terminal()
    assert _wait(child, str(tmp_path), 3, err) == 0
    assert err.text.endswith("\rrecorded 2/3 passes\n") and "\x1b" not in err.text
    quiet = subprocess.Popen([sys.executable, "-c", "pass"])
    plain = io.StringIO()  # not a terminal: nothing
    assert _wait(quiet, str(tmp_path), 3, plain) == 0 and plain.getvalue() == ""


@pytest.mark.parametrize("status,body,says", [
    (400, '{"message": "prompt too long"}', "/generate answered 400: prompt too long"),
    (200, "<html>a proxy</html>", "/generate answered something that is not its API's JSON: <html>a proxy</html>")])
def test_run_url_closes_the_servers_window_when_a_request_fails(tmp_path, capsys, status, body, says):
    srv = StubServer(status, body)
    try:
        code = main(["run", "--server", "sglang", "--url", srv.url, "--model-path", "m", "--num-prompts", "3",
                     "-o", str(tmp_path / "o")])
    finally:
        srv.close()
    assert code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"sgl-shapeprof run: {srv.url}{says}\n") and "\x1b" not in err
    assert srv.seen[0] == "/start_profile" and srv.seen[-1] == "/stop_profile"


def test_run_url_reads_only_the_files_the_reply_puts_in_its_folder(tmp_path):
    from sgl_shapeprof.integrations.sglang.remote import _files
    out = str(tmp_path / "my runs")  # a space in it
    reply = (f"SHAPES: rank 0 records 5 passes into {out}/a-TP-0.shapes.jsonl\n"
             f"SHAPES: rank 1 records 5 passes into {out}/../../escape.jsonl\n"
             "SHAPES: rank 2 records 5 passes into /home/u/x.jsonl\n"
             "all files are a-TP-*-PP-*.shapes.jsonl in that folder\n"
             "all files are ../b*.jsonl in that folder\n")
    assert _files(reply, out) == [os.path.join(out, "a-TP-0.shapes.jsonl"),
                                  os.path.join(out, "a-TP-*-PP-*.shapes.jsonl")]


def test_run_url_says_in_one_line_when_the_vocabulary_cannot_be_read(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "sglang", "--url",
                        "http://127.0.0.1:9", "--model-path", str(tmp_path / "no-model"), "--isl", "4",
                        "-o", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith(f"sgl-shapeprof run: --isl: cannot read the vocabulary size "
                                                     f"of {tmp_path / 'no-model'} (") and r.stderr.count("\n") == 1
