"""`sgl-shapeprof demo`: profile built-in tiny LLM and diffusion models on CPU."""
from __future__ import annotations

import argparse

from .common import count


def add_parser(sub: "argparse._SubParsersAction") -> None:
    d = sub.add_parser("demo", help="profile built-in tiny LLM and diffusion models on CPU")
    d.add_argument("--dir", default="shapeprof-demo", help="where the files go (default ./shapeprof-demo)")
    d.add_argument("--decode-steps", type=count, default=4, help="decode passes after the prefill")
    d.add_argument("--steps", type=count, default=50, help="denoising steps per diffusion pass")
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo
    run_demo(args.dir, decode_steps=args.decode_steps, diffusion_steps=args.steps)
    return 0
