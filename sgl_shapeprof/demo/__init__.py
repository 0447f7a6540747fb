"""`sgl-shapeprof demo`: profile the built-in tiny models and show the result."""
from __future__ import annotations

import os
import sys
import time


def run_demo(folder: str, decode_steps: int = 4, diffusion_steps: int = 50) -> None:
    import torch

    from .. import ShapeProfiler
    from ..analysis.analyze import analyze_file
    from ..render.text.analyze import Sections, print_analysis
    from .models import make_llama, make_unet, run_diffusion, run_llama

    os.makedirs(folder, exist_ok=True)
    folder = os.path.abspath(folder)
    llm_path = os.path.join(folder, "llm_shapes.jsonl")
    dif_path = os.path.join(folder, "diffusion_shapes.jsonl")

    # with arguments (args=True): the files can be replayed (`sgl-shapeprof replay`)
    print(f"1/2 tiny Llama-style decoder: 1 prefill + {decode_steps} decode passes (bfloat16, CPU)")
    t0 = time.perf_counter()
    model = make_llama(torch.bfloat16)
    with torch.inference_mode(), ShapeProfiler(llm_path, dedupe=False, args=True) as prof:
        run_llama(model, prof, decode_steps=decode_steps)
    print(f"    {prof.stats()['records']} records in {time.perf_counter() - t0:.2f}s")

    print(f"2/2 tiny UNet denoiser: 2 passes x {diffusion_steps} steps, deduplicated (float32, CPU)")
    t0 = time.perf_counter()
    unet = make_unet()
    with torch.inference_mode(), ShapeProfiler(dif_path, dedupe=True, args=True) as prof:
        run_diffusion(unet, prof, passes=2, steps=diffusion_steps)
    st = prof.stats()
    print(f"    {st['records']} records written, {st['dedupe_skipped']} repeats deduplicated "
          f"in {time.perf_counter() - t0:.2f}s")

    for path in (llm_path, dif_path):
        print()
        print_analysis(analyze_file(path), sec=Sections(top=10, show_shapes=path == llm_path, max_shapes=3,
                                                        largest=False, diversity=False, summary=False))
    print(f"\nFiles are in {folder}:")
    for name in sorted(os.listdir(folder)):
        print(f"  {name}")
    print("Next: sgl-shapeprof analyze FILE --show-shapes [--filter-op PATTERN]; gemm FILE; cost FILE --gpu H100; "
          "report FILE; replay FILE")
    sys.stdout.flush()
