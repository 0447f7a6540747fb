"""`sgl-shapeprof demo`: profile the built-in tiny models and show the result."""
from __future__ import annotations

import importlib.metadata
import importlib.util
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

    print(f"2/2 tiny UNet denoiser: 2 requests of {diffusion_steps} denoising steps, each request one forward "
          f"pass, deduplicated (float32, CPU)")
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
    print(next_steps())
    sys.stdout.flush()


def next_steps() -> str:
    """The commands to try next on the demo's files; one that needs a
    package this environment lacks names its extra (pyproject.toml's, read
    from the installed metadata)."""
    report = "report FILE"
    if importlib.util.find_spec("plotly") is None:
        report += f" (needs plotly: pip install {extra_requirement('report')!r})"
    return ("Next: sgl-shapeprof analyze FILE --show-shapes [--filter-op PATTERN]; gemm FILE; cost FILE --gpu H100; "
            f"{report}; replay FILE")


def extra_requirement(extra: str) -> str:
    """The requirement an extra of this package adds ("plotly>=5.20"), as
    installed; the extra's own spelling where the metadata is missing."""
    try:
        for req in importlib.metadata.requires("sgl_shapeprof") or []:
            name, _, marker = req.partition(";")
            if marker.replace(" ", "").replace("'", '"') == f'extra=="{extra}"':
                return name.strip()
    except importlib.metadata.PackageNotFoundError:
        pass
    return f"sgl_shapeprof[{extra}]"
