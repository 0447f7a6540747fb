"""One offline run of a server's engine, for `sgl-shapeprof run`: start it,
send the prompts, shut it down. Profiling comes from the environment the
caller sets (SHAPEPROF=1 ...), through the server's own integration (vLLM's
plugin, SGLang's start-up hook), exactly as for any other program.

    python -m sgl_shapeprof.integrations.engines SPEC.json

SPEC: {"server", "model_path", "tp", "prompts", "max_tokens", "engine_args",
"output"}; writes {"outputs": [[prompt tokens, output tokens], ...]} to output.
"""
from __future__ import annotations

import json
import sys
from typing import List

SERVERS = ("sglang", "vllm")
PROMPTS = ["The capital of France is", "Write a haiku about GPUs:", "Explain tensor parallelism in one sentence:",
           "def fibonacci(n):", "Translate to German: good morning", "The three primary colors are",
           "Summarize the plot of Hamlet:", "List the planets of the solar system:"]


def prompts(n: int) -> List[str]:
    return [PROMPTS[i % len(PROMPTS)] for i in range(n)]


def run_vllm(spec: dict) -> list:
    import vllm
    layout = {k: spec[s] for k, s in (("pipeline_parallel_size", "pp"), ("data_parallel_size", "dp"))
              if spec.get(s, 1) > 1}
    llm = vllm.LLM(model=spec["model_path"], tensor_parallel_size=spec["tp"], **layout, **spec["engine_args"])
    params = vllm.SamplingParams(max_tokens=spec["max_tokens"], temperature=0, ignore_eos=True)
    results = llm.generate(prompts(spec["prompts"]), params, use_tqdm=False)
    return [[len(r.prompt_token_ids), len(r.outputs[0].token_ids)] for r in results]


def run_sglang(spec: dict) -> list:
    import sglang
    layout = {k: spec[s] for k, s in (("pp_size", "pp"), ("dp_size", "dp")) if spec.get(s, 1) > 1}
    engine = sglang.Engine(model_path=spec["model_path"], tp_size=spec["tp"], **layout, **spec["engine_args"])
    try:
        results = engine.generate(prompts(spec["prompts"]),
                                  {"max_new_tokens": spec["max_tokens"], "temperature": 0, "ignore_eos": True})
    finally:
        engine.shutdown()
    return [[r["meta_info"]["prompt_tokens"], r["meta_info"]["completion_tokens"]] for r in results]


def main(argv: List[str]) -> None:
    with open(argv[0]) as f:
        spec = json.load(f)
    outputs = (run_vllm if spec["server"] == "vllm" else run_sglang)(spec)
    with open(spec["output"], "w") as f:
        json.dump({"outputs": outputs}, f)


if __name__ == "__main__":  # the engines start processes that import this main module
    main(sys.argv[1:])
