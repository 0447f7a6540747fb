"""`python -m vllm.entrypoints.openai.api_server` (vLLM 0.32, CPU) with
sgl_shapeprof installed and SHAPEPROF unset: /start_profile and
/stop_profile say what to set instead of a bare 404, or, with vLLM's
profiler configured, run it as before and log once that shapes are not
recorded; `sgl-shapeprof request` sent to a worker says how it was started.
One server at a time (each is an API server, EngineCore and a worker)."""
import json
import os
import urllib.error

import pytest
from helpers import needs_vllm
from vllm_server_helpers import complete, model_process, post, private_dir, request, serving

pytestmark = needs_vllm("0.32.0")


@pytest.fixture
def torch_profiler(model, tmp_path):
    """SHAPEPROF unset, vLLM's torch profiler configured (one test: gone
    before the next server starts)."""
    d = tmp_path
    with serving(model, d, {}, "--profiler-config.profiler", "torch",
                 "--profiler-config.torch_profiler_dir", str(d / "traces")) as (port, proc, log):
        yield port, d, model, log


def test_unarmed_with_vllms_profiler_runs_it_and_says_once_shapes_are_not_recorded(torch_profiler):
    port, d, model, log = torch_profiler
    for _ in range(2):
        assert post(port, "/start_profile")[0] == 200
        complete(port, model, 2)
        assert post(port, "/stop_profile")[0] == 200
    assert os.listdir(d / "traces")      # vLLM's profiler ran as before
    said = [line for line in open(log) if "shapes are not recorded" in line]
    assert len(said) == 1 and said[0].rstrip().endswith(
        "/start_profile starts vLLM's profiler only: shapes are not recorded (SHAPEPROF is unset; "
        "SHAPEPROF=on_request records them too)"), said
    assert not list(d.glob("*.jsonl"))


@pytest.fixture(scope="module")
def unarmed(model, tmp_path_factory):
    """sgl_shapeprof installed, SHAPEPROF unset, no vLLM profiler."""
    d = tmp_path_factory.mktemp("unarmed")
    with serving(model, d, {}) as (port, proc, log):
        yield port, model, proc, log


NO_PROFILER = ("{}: this vLLM server takes no profile requests (SHAPEPROF is unset, no "
               "--profiler-config.profiler): start it with SHAPEPROF=on_request to record shapes (sgl_shapeprof), "
               "or --profiler-config.profiler=torch for vLLM's torch traces")


def test_unarmed_server_says_what_to_set(unarmed):
    """vLLM alone answers FastAPI's bare 404 {"detail": "Not Found"}: the
    same status, in vLLM's error JSON, with one line saying what to set;
    the server goes on serving."""
    port, model, proc, log = unarmed
    for path, body in (("/start_profile", {"max_iterations": 2}), ("/stop_profile", None)):
        with pytest.raises(urllib.error.HTTPError) as e:
            post(port, path, body)
        assert e.value.code == 404
        assert json.loads(e.value.read()) == {"error": {"message": NO_PROFILER.format(path), "type": "Not Found",
                                                        "param": None, "code": 404}}
    complete(port, model, 2)
    assert NO_PROFILER.format("/start_profile") in open(log).read()   # in vLLM's log too
    with pytest.raises(urllib.error.HTTPError) as e:   # any other unknown route: vLLM's own 404
        post(port, "/no_such_route")
    assert e.value.code == 404 and json.loads(e.value.read()) == {"detail": "Not Found"}


def test_request_to_an_unarmed_worker_says_how_it_was_started(unarmed, tmp_path):
    """vLLM's process titles overwrite its workers' /proc/PID/environ: the
    message reads the nearest ancestor's, the API server's."""
    port, model, proc, log = unarmed
    pid = model_process(proc)
    r = request(pid, "--timeout", 1, control=private_dir(tmp_path / "ctl"))
    assert r.returncode == 2 and r.stderr == (
        f"sgl-shapeprof request: process {pid} did not answer within 1 s: it was started from process {proc.pid} "
        "with SHAPEPROF unset, not SHAPEPROF=on_request, so it takes no requests unless it made an "
        "OnRequestProfiler itself (the request stays until it is taken)\n")
