"""The real vLLM API server for the tests in tests/vllm/ (plain helpers,
not fixtures: test_vllm_server.py and test_vllm_unarmed.py both start it)."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def post(port, path, body=None, key=None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                                 data=json.dumps(body or {}).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.read().decode()


def private_dir(path):
    path.mkdir(mode=0o700)
    return path


@contextlib.contextmanager
def serving(model, d, extra_env, *args):
    """The real server on a free port, with only extra_env's profiling
    variables; (port, its log's path) once /health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    # vLLM SIGKILLs a worker that has not exited 5 s into its shutdown; its
    # CPU worker takes about 7 s here: a longer grace makes the profiler's
    # close (the first thing the worker's shutdown does) win every time
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "60",
                **extra_env})
    log_path = d / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                             "--dtype", "float32", "--enforce-eager", "--max-model-len", "256",
                             "--max-num-seqs", "4", "--shutdown-timeout", "60", "--port", str(port), *args],
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
        proc.wait(timeout=150)
        log.close()


def complete(port, model, tokens, key=None):
    status, body = post(port, "/v1/completions", {"model": str(model), "prompt": "the capital of france is",
                                                  "max_tokens": tokens, "ignore_eos": True}, key=key)
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == tokens


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
