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
    # run's progress line (cli/run/local.py wait): a child stands in for the
    # engine, writing a worker's summary snapshot, and goes on until the
    # line showing it was written (then the marker file appears)
    from sgl_shapeprof.cli.run.local import wait as _wait
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


def _model_folder(path, config='{"model_type": "llama", "vocab_size": 97}'):
    path.mkdir()
    if config is not None:
        (path / "config.json").write_text(config)
    return str(path)


@pytest.mark.parametrize("server,install", [("sglang", 'pip install "sglang==0.5.23"'),
                                            ("vllm", 'pip install "vllm==0.32.0"')])
def test_run_without_the_server_installed_says_what_to_install_in_one_line_and_leaves_nothing(
        tmp_path, capsys, server, install):
    """The engine child would end in a ModuleNotFoundError traceback: the
    missing server is refused before anything is created, with the release
    the tests run (its seam's) and how to install it."""
    import importlib.metadata

    from sgl_shapeprof.integrations.registry import seam
    s = seam(server)
    if s.module in importlib.metadata.packages_distributions():
        pytest.skip(f"{s.display_name} is installed here")
    model = _model_folder(tmp_path / "tiny")
    kept = tmp_path / "kept"
    kept.mkdir()
    for out in (tmp_path / "new", kept):
        assert main(["run", "--server", server, "--model-path", model, "--concurrency", "4", "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (f"sgl-shapeprof run: --server {server}: {s.display_name} is not installed in this Python "
                       f"({sys.executable}): {s.install} installs the release tested; or run sgl-shapeprof from "
                       f"{s.display_name}'s environment\n")
        assert install in err
    assert not (tmp_path / "new").exists() and os.listdir(kept) == []


def test_run_with_a_model_folder_it_cannot_read_says_what_is_wrong_in_one_line(tmp_path, capsys):
    """The engine child would end in transformers' traceback (an empty
    folder: "Unrecognized model ... model_type"), plain or from a job file;
    refused first, whichever server, installed or not."""
    empty = _model_folder(tmp_path / "empty", config=None)
    weights_only = _model_folder(tmp_path / "weights", config=None)
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"")
    bad = _model_folder(tmp_path / "bad", config="{not json")
    out = tmp_path / "o"
    for model, says in ((empty, f"{empty}: an empty folder without config.json (a model folder holds the "
                                "model's config.json, its weights and its tokenizer)"),
                        (weights_only, f"{weights_only}: a folder without config.json"),
                        (bad, f"{bad}/config.json is not JSON (Expecting property name"),
                        (str(tmp_path / "typo" / "tiny"), f"{tmp_path}/typo/tiny: no such folder")):
        for server in ("sglang", "vllm"):
            assert main(["run", "--server", server, "--model-path", model, "--isl", "8", "-o", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"sgl-shapeprof run: --model-path {says}") and err.count("\n") == 1, err
    job = tmp_path / "job.yaml"
    job.write_text(f"name: j\nmodel: {{path: {empty}}}\nresources: {{gpu_type: h200, agg_nodes: 1, agg_workers: 1}}\n"
                   "profiling: {type: shapes, aggregated: {start_step: 1, stop_step: 4}}\n"
                   "benchmark: {type: sa-bench, isl: 16, osl: 5, concurrencies: 4}\n")
    assert main(["run", "--spec", str(job), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (f"sgl-shapeprof run: {job}'s model.path {empty}: an empty folder without "
                                       "config.json (a model folder holds the model's config.json, its weights and "
                                       "its tokenizer)\n")
    assert main(["run", "--spec", str(job), "--model-path", bad, "-o", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"sgl-shapeprof run: --model-path {bad}/config.json is not JSON")
    assert not out.exists()
    # a hub name is the engine's to fetch: not refused for its folder
    from sgl_shapeprof.integrations.engines import model_folder_problem
    assert model_folder_problem("meta-llama/Llama-3.1-8B") is None and model_folder_problem("gpt2") is None


@pytest.mark.parametrize("concurrency,osl,start,stop,want", [
    (4, 10, 3, 7, 4),      # the window ends inside the first wave: one request per slot
    (4, 5, 3, 12, 12),     # passes 1-5, 6-10, 11-15: the window reaches into the third wave
    (4, 5, 0, 10, 8),      # the window ends with the second wave's last decode
    (4, 5, 0, 11, 12),     # one pass more: the third wave's prefill
    (4, 5, 12, None, 16),  # no stop: one request's life past the warm-up, passes 13-17
    (1, 50, None, None, 1),
    (8, 1, 0, 20, 160),    # a prefill worker's share (one token): one pass per wave
])
def test_run_sends_enough_requests_to_keep_the_concurrency_in_flight_through_the_window(
        concurrency, osl, start, stop, want):
    from sgl_shapeprof.cli.run.window import prompts_in_flight
    assert prompts_in_flight(concurrency, osl, start, stop) == want


def test_run_concurrency_without_num_prompts_sends_that_many_and_says_when_given_too_few(tmp_path, capsys):
    """run --url --concurrency 4 without --num-prompts: the requests that keep
    4 in flight through --stop-step (docs/traffic.md's rule), not the default 3;
    --num-prompts fewer than that is sent as asked, with a line saying so."""
    for extra, generates, note in (
            ([], 12, ""),
            (["--num-prompts", "3"], 3, "sgl-shapeprof run: --num-prompts 3 is too few to keep 4 requests in flight "
                                        "through pass 12 (12 would: 4 for every 5 passes, a request's --osl); the "
                                        "window's last passes run fewer\n"),
            (["--num-prompts", "20"], 20, "")):
        srv = StubServer()
        try:
            code = main(["run", "--server", "sglang", "--url", srv.url, "--model-path", "m", "--osl", "5",
                         "--concurrency", "4", "--start-step", "3", "--stop-step", "12", *extra,
                         "-o", str(tmp_path / f"o{generates}")])
        finally:
            srv.close()
        assert code == 0
        assert srv.seen == ["/start_profile"] + ["/generate"] * generates + ["/stop_profile"]
        err = capsys.readouterr().err
        assert err.startswith(note) and "too few" not in err[len(note):], err
    srv = StubServer()  # without --concurrency: the default 3, all at once
    try:
        assert main(["run", "--server", "sglang", "--url", srv.url, "--model-path", "m", "--stop-step", "12",
                     "-o", str(tmp_path / "default")]) == 0
    finally:
        srv.close()
    assert srv.seen.count("/generate") == 3
