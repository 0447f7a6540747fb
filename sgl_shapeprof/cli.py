"""sgl-shapeprof: analyze records files, profile any script, run the demo."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from typing import List, Optional

from . import __version__


def _analyze(args: argparse.Namespace) -> int:
    from .analyze import analysis_json, analyze_file, print_analysis
    if not os.path.isfile(args.file):
        print(f"sgl-shapeprof analyze: no such file: {args.file}", file=sys.stderr)
        return 2
    try:
        a = analyze_file(args.file, filter_op=args.filter_op)
    except re.error as e:
        print(f"sgl-shapeprof analyze: bad --filter-op regex {args.filter_op!r}: {e}", file=sys.stderr)
        return 2
    if args.json:
        import json
        json.dump(analysis_json(a, args.file, top=args.top), sys.stdout, indent=1)
        print()
    else:
        print_analysis(a, args.file, show_shapes=args.show_shapes, top=args.top)
    return 0


def _record(args: argparse.Namespace) -> int:
    cmd: List[str] = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("sgl-shapeprof record: give the command after --, e.g. "
              "sgl-shapeprof record -o shapes.jsonl -- python script.py", file=sys.stderr)
        return 2
    exe = os.path.basename(cmd[0])
    if exe.endswith(".py"):
        target = cmd
    elif exe.startswith("python"):
        target = cmd[1:]
        if not target:
            print("sgl-shapeprof record: python needs a script, -m module or -c code", file=sys.stderr)
            return 2
    else:
        print(f"sgl-shapeprof record: {cmd[0]!r} is not a Python command; record runs "
              "'python script.py ...', 'python -m module ...' or 'script.py ...'", file=sys.stderr)
        return 2
    out = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(out)):
        print(f"sgl-shapeprof record: directory of {args.output} does not exist", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.update({
        "SGLANG_PROFILE_SHAPES": "1",
        "SGLANG_PROFILE_SHAPES_FILE": out,
        "SGLANG_PROFILE_SHAPES_DEDUPE": "1" if args.dedupe else "0",
        "SGLANG_PROFILE_SHAPES_SKIP_WARMUP": str(args.skip_warmup),
        "SGLANG_PROFILE_SHAPES_LOG_N_PASSES": str(args.log_n_passes),
    })
    python = cmd[0] if exe.startswith("python") else sys.executable
    python = shutil.which(python) or python
    argv = [python, "-m", "sgl_shapeprof._record", *target]
    sys.stdout.flush()
    os.execve(python, argv, env)  # the script gets this process: pid, signals, exit code
    return 0  # not reached


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    return run_demo(args.dir, decode_steps=args.decode_steps, diffusion_steps=args.steps)


def _hook(args: argparse.Namespace) -> int:
    from .hook import hook_command
    return hook_command(args.action, args.site_dir)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sgl-shapeprof", description=__doc__)
    p.add_argument("--version", action="version", version=f"sgl_shapeprof {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("analyze", help="per-operator counts and shapes of a records file")
    a.add_argument("file", help="records file (.jsonl), also one left by a crash")
    a.add_argument("--show-shapes", action="store_true", help="list each operator's distinct shapes")
    a.add_argument("--top", type=int, metavar="N", help="only the N most called operators")
    a.add_argument("--filter-op", metavar="REGEX", help="only operators matching REGEX (re.search)")
    a.add_argument("--json", action="store_true",
                   help="machine-readable: each operator's distinct input/output shapes with counts")
    a.set_defaults(func=_analyze)

    r = sub.add_parser("record", help="profile a Python script: record [-o FILE] -- python script.py ARGS")
    r.add_argument("-o", "--output", default="shapes.jsonl", help="records file (default shapes.jsonl)")
    r.add_argument("--dedupe", action="store_true", help="write each signature once")
    r.add_argument("--skip-warmup", type=int, default=0, metavar="N", help="passes not logged first")
    r.add_argument("--log-n-passes", type=int, default=0, metavar="N", help="logged passes at most (0: all)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    r.set_defaults(func=_record)

    h = sub.add_parser("hook", help="the zero-edit start-up hook: install | uninstall | status")
    h.add_argument("action", choices=["install", "uninstall", "status"])
    h.add_argument("--site-dir", help="site-packages folder (default: this Python's)")
    h.set_defaults(func=_hook)

    d = sub.add_parser("demo", help="profile built-in tiny LLM and diffusion models on CPU")
    d.add_argument("--dir", default="shapeprof-demo", help="where the files go (default ./shapeprof-demo)")
    d.add_argument("--decode-steps", type=int, default=4, help="decode passes after the prefill")
    d.add_argument("--steps", type=int, default=50, help="denoising steps per diffusion pass")
    d.set_defaults(func=_demo)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("top", "skip_warmup", "log_n_passes", "decode_steps", "steps"):
        v = getattr(args, name, None)
        if v is not None and v < 0:
            print(f"sgl-shapeprof {args.cmd}: --{name.replace('_', '-')} must be >= 0", file=sys.stderr)
            return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
