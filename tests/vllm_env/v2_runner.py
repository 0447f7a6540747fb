#!/usr/bin/env python3
"""vLLM 0.32's Model Runner V2 on CPU, as far as it runs without Triton's
CPU backend (triton-cpu, not on PyPI): our plugin (from the environment,
SHAPEPROF=1) patches the real vllm.v1.worker.gpu.model_runner, and the real
V2 CPU runner (vllm.v1.worker.cpu.model_runner, with vLLM's own CPU shims
for V2's CUDA calls, as its CPU worker imports them) is built and loads the
model for real. Then, in order:

1. the real profile run (profile_run -> _dummy_run ->
   execute_model(dummy_run=True): a real forward of the model on CPU; its
   sampler, Triton's, replaced by a stand-in);
2. the real warmup_kernels and mixed prefill+decode warm-up (vllm/v1/worker/
   gpu/warmup.py), driving execute_model/sample_tokens with synthetic
   scheduler outputs;
3. scheduler steps as the scheduler makes them: prefill, decode, mixed.

A scheduler step's own body needs Triton kernels (input preparation,
sampling), so execute_model and sample_tokens are replaced by stand-ins
before the runner is built -- for a step, one aten.ones of the step's
token count (execute_model) or request count (sample_tokens), which the
records then show -- except that a dummy run goes on to V2's real
execute_model. Everything else is vLLM's code.

    python v2_runner.py MODEL_DIR OUT.json
"""
import json
import os
import sys


def main():
    model, out = sys.argv[1], sys.argv[2]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs

    config = EngineArgs(model=model, dtype="float32", enforce_eager=True, max_model_len=256,
                        max_num_seqs=4).create_engine_config()
    with set_current_vllm_config(config):
        init_distributed_environment(1, 0, f"tcp://127.0.0.1:{free_port()}", 0, "gloo")
        initialize_model_parallel(1, 1)
        import vllm.v1.worker.cpu_worker  # noqa: F401  vLLM's own CPU shims for V2 (streams, pinned memory)
        from vllm.v1.worker.gpu import model_runner as v2
        from vllm.v1.worker.gpu.warmup import run_mixed_prefill_decode_warmup, warmup_kernels
        assert hasattr(v2.GPUModelRunner.__init__, "__sgl_shapeprof_wrapped__"), "not patched"
        ran = []
        real_execute = v2.GPUModelRunner.execute_model

        def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False, **kwargs):
            if dummy_run:
                ran.append(("dummy", scheduler_output.total_num_scheduled_tokens))
                return real_execute(self, scheduler_output, intermediate_tensors, dummy_run=dummy_run, **kwargs)
            ran.append(("execute", scheduler_output.total_num_scheduled_tokens))
            torch.ones(scheduler_output.total_num_scheduled_tokens, 3)
            self._requests = len(scheduler_output.num_scheduled_tokens)
            return None

        def sample_tokens(self, grammar_output):
            ran.append(("sample", self._requests))
            torch.ones(self._requests, 5)
            return None

        v2.GPUModelRunner.execute_model = execute_model
        v2.GPUModelRunner.sample_tokens = sample_tokens
        from vllm.v1.worker.cpu.model_runner import CPUModelRunner
        runner = CPUModelRunner(config, torch.device("cpu"))
        wrapped = {m: hasattr(vars(runner).get(m), "__sgl_shapeprof_wrapped__")
                   for m in ("execute_model", "sample_tokens")}
        runner.load_model()

        # 1. the real profile run; its sampler is Triton's (gumbel): a stand-in
        runner._dummy_sampler_run = lambda hidden: ran.append(("dummy_sampler", hidden.shape[0]))
        runner.profile_run()
        runner.kv_cache_config = kv_cache_config(runner)  # what the worker would allocate
        steps = len(ran)
        warmup_kernels(runner, runner.execute_model, runner.sample_tokens)     # 2.
        mixed = run_mixed_prefill_decode_warmup(runner, runner.execute_model, runner.sample_tokens, 8)
        warmups = ran[steps:]
        for step in scheduler_steps():                    # 3.
            runner.execute_model(step)
            runner.sample_tokens(None)
        from sgl_shapeprof.recording.env import env_profiler
        env_profiler().close()
    with open(out, "w") as f:
        json.dump({"wrapped": wrapped, "ran": ran, "warmups": warmups, "mixed_warmup": mixed}, f)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kv_cache_config(runner):
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
    specs = runner.get_kv_cache_spec()
    return KVCacheConfig(num_blocks=64, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(list(specs), next(iter(specs.values())))])


def scheduler_steps():
    """Prefill of a and b; decode of both; c's prompt beside their decodes."""
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

    def new(req_id, n):
        return NewRequestData(req_id=req_id, prompt_token_ids=list(range(n)), mm_features=[],
                              sampling_params=None, pooling_params=None, block_ids=([1],),
                              num_computed_tokens=0, lora_request=None)

    def step(new_reqs=(), cached=(), tokens=None):
        out = SchedulerOutput.make_empty()
        out.scheduled_new_reqs = list(new_reqs)
        data = CachedRequestData.make_empty()
        data.req_ids = list(cached)
        data.num_output_tokens = [1] * len(cached)
        out.scheduled_cached_reqs = data
        out.num_scheduled_tokens = tokens
        out.total_num_scheduled_tokens = sum(tokens.values())
        return out
    return [step([new("a", 5), new("b", 3)], tokens={"a": 5, "b": 3}),
            step(cached=["a", "b"], tokens={"a": 1, "b": 1}),
            step([new("c", 7)], cached=["a", "b"], tokens={"a": 1, "b": 1, "c": 7})]


if __name__ == "__main__":
    main()
