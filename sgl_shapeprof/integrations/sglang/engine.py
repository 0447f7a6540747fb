"""SGLang's offline engine for `sgl-shapeprof run`: what run sets up for it,
and the run itself (in the child integrations/engines.py starts)."""
from __future__ import annotations

import os
from typing import List, Optional

# SGLang's CPU engine (no CUDA) with several workers: each needs its own
# OpenMP cores, else it asserts on NUMA binding, and its KV pool is sized
# from the machine's memory per worker unless bounded, which can get every
# worker killed. Set when the user has not, and said.
CPU_KV_TOKENS = 4096

# what run adds when the engine ran and nothing was recorded
NOT_RECORDED_HINT = " (is the start-up hook installed? sgl-shapeprof hook install)"


def refuse(spec: dict) -> Optional[str]:
    """Why this engine cannot run spec, before it starts; None: it can."""
    return None


def _on_cpu(engine_args: dict) -> bool:
    if str(engine_args.get("device", "")).startswith("cpu"):
        return True
    try:
        import torch
        return not torch.cuda.is_available()
    except Exception:
        return False


def prepare(spec: dict, env: dict) -> List[str]:
    """What run sets for the engine (in spec's engine_args and env); the
    lines saying so."""
    engine_args = spec["engine_args"]
    workers = spec["tp"] * spec.get("pp", 1) * spec.get("dp", 1)
    said: List[str] = []
    if workers < 2 or not _on_cpu(engine_args):
        return said
    if not env.get("SGLANG_CPU_OMP_THREADS_BIND"):
        n = os.cpu_count() or 1
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(i % n) for i in range(workers))
        said.append(f"SGLang's CPU engine: SGLANG_CPU_OMP_THREADS_BIND={env['SGLANG_CPU_OMP_THREADS_BIND']!r} "
                    f"(one core group per worker; set it to choose)")
    if "max_total_tokens" not in engine_args:
        engine_args["max_total_tokens"] = CPU_KV_TOKENS
        said.append(f"SGLang's CPU engine: max_total_tokens={CPU_KV_TOKENS} per worker "
                    f"(--engine-arg max_total_tokens=N to change)")
    return said


def run_engine(spec: dict, prompts: list) -> list:
    """[[prompt tokens, output tokens], ...] of one offline run; prompts:
    texts, or lists of token ids."""
    import sglang
    layout = {k: spec[s] for k, s in (("pp_size", "pp"), ("dp_size", "dp")) if spec.get(s, 1) > 1}
    engine = sglang.Engine(model_path=spec["model_path"], tp_size=spec["tp"], **layout, **spec["engine_args"])
    try:
        params = {"max_new_tokens": spec["max_tokens"], "temperature": 0, "ignore_eos": True}
        if prompts and isinstance(prompts[0], list):
            results = engine.generate(input_ids=prompts, sampling_params=params)
        else:
            results = engine.generate(prompts, params)
    finally:
        engine.shutdown()
    return [[r["meta_info"]["prompt_tokens"], r["meta_info"]["completion_tokens"]] for r in results]
