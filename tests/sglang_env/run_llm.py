#!/usr/bin/env python3
"""Run SGLang's real offline engine on CPU with the tiny random Llama.

    python run_llm.py MODEL_DIR [--tp 2] [--pp 2] [--dp 2] [--ep 2] [--max-new-tokens 4] [--json OUT.json]
                      [--profile DIR] [--nnodes 2 --node-rank R --dist-init-addr HOST:PORT --port P]

--nnodes/--node-rank: one node of a multi-node launch (on loopback in the
tests: each node its own process); a node other than 0 runs its workers
until node 0 shuts the deployment down.

--profile DIR: Engine.start_profile(activities=["CPU", "SHAPES"]) before
generating and stop_profile() after, into DIR: SGLang's own trace files
beside ours (their names are SGLang's word for which worker wrote them).

--json writes one object per prompt: prompt, text, output_ids, prompt_tokens,
completion_tokens, cached_tokens (radix-cache hits; 0 here, as both prompts
are scheduled in one batch).

Needs: PYTHONPATH containing tests/sglang_env/stubs (placeholder sgl_kernel).
The environment variables below are set here if the caller has not set them.
"""
import argparse
import os
import sys
import time

T0 = time.time()

from cpu_env import cpu_environment  # noqa: E402  (beside this script)


def _env(workers):
    cpu_environment()
    # One OpenMP thread group per worker, core ids separated by '|'.
    ncpu = os.cpu_count() or 1
    if workers == 1:
        os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", f"0-{ncpu - 1}" if ncpu > 1 else "0")
    else:
        os.environ.setdefault(
            "SGLANG_CPU_OMP_THREADS_BIND", "|".join(str(i % ncpu) for i in range(workers))
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=4)
    ap.add_argument("--json", default=None, help="write per-prompt results here")
    ap.add_argument("--profile", default=None, help="start_profile CPU+SHAPES into this folder")
    ap.add_argument("--nnodes", type=int, default=1)
    ap.add_argument("--node-rank", type=int, default=0)
    ap.add_argument("--dist-init-addr", default=None)
    ap.add_argument("--port", type=int, default=None)
    a = ap.parse_args()
    _env(a.tp * a.pp * a.dp // a.nnodes)
    nodes = {}
    if a.nnodes > 1:
        nodes = dict(nnodes=a.nnodes, node_rank=a.node_rank, dist_init_addr=a.dist_init_addr)
    if a.port:
        nodes["port"] = a.port
    if a.ep > 1:
        nodes["ep_size"] = a.ep

    import sglang as sgl

    t_import = time.time()
    engine = sgl.Engine(
        model_path=a.model,
        device="cpu",
        attention_backend="torch_native",
        sampling_backend="pytorch",
        disable_cuda_graph=True,
        tp_size=a.tp,
        pp_size=a.pp,
        dp_size=a.dp,
        dtype="bfloat16",
        mem_fraction_static=0.05,
        max_total_tokens=2048,
        context_length=256,
        max_running_requests=8,
        chunked_prefill_size=256,
        grammar_backend="none",
        skip_server_warmup=True,
        log_level="warning",
        random_seed=0,
        **nodes,
    )
    t_up = time.time()
    if a.node_rank > 0:  # its workers ran until node 0 shut the deployment down
        print(f"run_llm node {a.node_rank}: done after {t_up - T0:.1f}s")
        return 0
    prompts = ["the capital of france is", "tell me a story once upon a time"]
    if a.profile:
        engine.start_profile(output_dir=a.profile, activities=["CPU", "SHAPES"])
    outs = engine.generate(
        prompts, {"max_new_tokens": a.max_new_tokens, "temperature": 0.0, "ignore_eos": True}
    )
    if a.profile:
        engine.stop_profile()
    t_gen = time.time()
    for p, o in zip(prompts, outs):
        meta = o.get("meta_info", {})
        print(f"prompt={p!r} -> {o['text']!r} (completion_tokens={meta.get('completion_tokens')})")
    if a.json:
        import json

        with open(a.json, "w") as f:
            json.dump(
                [
                    {
                        "prompt": p,
                        "text": o["text"],
                        "output_ids": o.get("output_ids"),
                        "prompt_tokens": o["meta_info"]["prompt_tokens"],
                        "completion_tokens": o["meta_info"]["completion_tokens"],
                        "cached_tokens": o["meta_info"].get("cached_tokens", 0),
                    }
                    for p, o in zip(prompts, outs)
                ],
                f,
                indent=1,
            )
    engine.shutdown()
    t_end = time.time()
    print(
        f"run_llm tp={a.tp} pp={a.pp} dp={a.dp} ep={a.ep}: import {t_import - T0:.1f}s, engine start {t_up - t_import:.1f}s, "
        f"generate {t_gen - t_up:.1f}s, shutdown {t_end - t_gen:.1f}s, total {t_end - T0:.1f}s"
    )
    ok = all(o.get("meta_info", {}).get("completion_tokens") == a.max_new_tokens for o in outs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
