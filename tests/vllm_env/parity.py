#!/usr/bin/env python3
"""One vLLM run (CPU, eager, in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0),
recorded by either logger, for tests/vllm/test_vllm_engine.py's comparison:

    python parity.py MODEL_DIR ours OUT.jsonl   # SHAPEPROF=1 (set by the caller): our plugin
    python parity.py MODEL_DIR ref OUT.jsonl    # tests/reference_logger.py's TorchDispatchMode

`ref` puts the reference logger around the same methods our plugin wraps
(GPUModelRunner.execute_model as a pass with step_phase's label, the
sample_tokens after it inside that pass), by patching the class here: the
harness, not the product. Both runs: the same prompts, greedy.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def reference(out):
    sys.path.insert(0, os.path.dirname(HERE))
    from reference_logger import ReferenceLogger

    from sgl_shapeprof.integrations.vllm.workers import step_phase
    from vllm.v1.worker import gpu_model_runner as m

    ref = ReferenceLogger(out)
    execute, sample = m.GPUModelRunner.execute_model, m.GPUModelRunner.sample_tokens
    last = {"logged": False}

    def execute_model(self, scheduler_output, *args, **kwargs):
        phase = step_phase(scheduler_output)
        last["logged"] = phase is not None
        if phase is None:
            return execute(self, scheduler_output, *args, **kwargs)
        ref.start_forward_pass(phase)
        try:
            return execute(self, scheduler_output, *args, **kwargs)
        finally:
            ref.end_forward_pass()

    def sample_tokens(self, *args, **kwargs):
        if not last["logged"]:
            return sample(self, *args, **kwargs)
        last["logged"] = False
        with ref:  # the step's pass again (same number and phase)
            return sample(self, *args, **kwargs)

    m.GPUModelRunner.execute_model, m.GPUModelRunner.sample_tokens = execute_model, sample_tokens
    return ref


def main():
    model, which, out = sys.argv[1:4]
    os.environ.update(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    import vllm

    ref = reference(out) if which == "ref" else None
    llm = vllm.LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256, max_num_seqs=4, seed=0)
    prompts = ["the capital of france is", "the cat is red and the dog is"]
    llm.generate(prompts, vllm.SamplingParams(max_tokens=3, temperature=0, ignore_eos=True), use_tqdm=False)
    if ref is not None:
        ref.close()


if __name__ == "__main__":
    main()
