"""sgl-shapeprof: analyze records files, profile any script, run the demo."""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .. import __version__
from . import analyze, cost, demo, diff, gemm, hook, record, replay, report, repro, request, run, trace, tune
from .common import CommandFailed

# one module per command, each adding its parser (in this order in --help)
COMMANDS = (analyze, diff, gemm, tune, cost, report, trace, replay, repro, record, run, request, hook, demo)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sgl-shapeprof", description=__doc__)
    p.add_argument("--version", action="version", version=f"sgl_shapeprof {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CommandFailed as e:
        print(f"sgl-shapeprof {args.cmd}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `sgl-shapeprof analyze ... | head`: the reader has what it wanted
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
