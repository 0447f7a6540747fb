#!/usr/bin/env python3
"""Run SGLang's real diffusion runtime (sglang.multimodal_gen DiffGenerator,
diffusers backend) on CPU with the tiny random StableDiffusion pipeline.

    python run_diffusion.py MODEL_DIR [--steps 2] [--size 64] [--out DIR]

Needs: PYTHONPATH containing tests/sglang_env/stubs (set here if missing).
"""
import argparse
import os
import sys
import tempfile
import time

T0 = time.time()

from cpu_env import cpu_environment  # noqa: E402  (beside this script)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cpu_environment()
    out = a.out or tempfile.mkdtemp(prefix="sgl_diff_out_")

    from sglang.multimodal_gen import DiffGenerator

    t_import = time.time()
    gen = DiffGenerator.from_pretrained(
        model_path=a.model,
        backend="diffusers",
        num_gpus=1,
        warmup_mode="off",
    )
    t_up = time.time()
    try:
        result = gen.generate(
            sampling_params_kwargs=dict(
                prompt="a photo of a cat",
                num_inference_steps=a.steps,
                height=a.size,
                width=a.size,
                guidance_scale=1.0,
                seed=0,
                save_output=True,
                output_path=out,
            )
        )
    finally:
        t_gen = time.time()
        gen.shutdown()
    t_end = time.time()
    res = result[0] if isinstance(result, list) else result
    path = getattr(res, "output_file_path", None)
    print(f"result: {type(res).__name__}, output file: {path}")
    print(
        f"run_diffusion: import {t_import - T0:.1f}s, generator start {t_up - t_import:.1f}s, "
        f"generate {t_gen - t_up:.1f}s, shutdown {t_end - t_gen:.1f}s, total {t_end - T0:.1f}s"
    )
    return 0 if res is not None and path and os.path.exists(path) else 1


if __name__ == "__main__":
    sys.exit(main())
