"""vLLM's offline engine for `sgl-shapeprof run`: what run checks first, and
the run itself (in the child integrations/engines.py starts)."""
from __future__ import annotations

from typing import List, Optional

NOT_RECORDED_HINT = ""


def refuse(spec: dict) -> Optional[str]:
    """Why this engine cannot run spec, before it starts; None: it can."""
    if spec.get("dp", 1) > 1:  # vllm.LLM raises it too, after a minute of start-up
        return ("--dp: vLLM's offline LLM does not run data parallel (it wants one process per replica: "
                "vLLM's examples/features/data_parallel/data_parallel_offline.py)")
    return None


def prepare(spec: dict, env: dict) -> List[str]:
    """What run sets for the engine; the lines saying so (nothing)."""
    return []


def run_engine(spec: dict, prompts: list) -> list:
    """[[prompt tokens, output tokens], ...] of one offline run; prompts:
    texts, or lists of token ids."""
    import vllm
    layout = {k: spec[s] for k, s in (("pipeline_parallel_size", "pp"), ("data_parallel_size", "dp"))
              if spec.get(s, 1) > 1}
    llm = vllm.LLM(model=spec["model_path"], tensor_parallel_size=spec["tp"], **layout, **spec["engine_args"])
    params = vllm.SamplingParams(max_tokens=spec["max_tokens"], temperature=0, ignore_eos=True)
    if prompts and isinstance(prompts[0], list):
        prompts = [{"prompt_token_ids": ids} for ids in prompts]
    results = llm.generate(prompts, params, use_tqdm=False)
    return [[len(r.prompt_token_ids), len(r.outputs[0].token_ids)] for r in results]
