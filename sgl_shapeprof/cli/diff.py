"""`sgl-shapeprof diff`: signatures only in A, only in B, and count changes; exit 1 if they differ."""
from __future__ import annotations

import argparse
import sys

from .common import add_filters, count, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    df = sub.add_parser("diff", help="signatures only in A, only in B, and count changes; exit 1 if they differ")
    df.add_argument("a", nargs=1, metavar="A", help="records file (or a glob of rank files)")
    df.add_argument("b", nargs=1, metavar="B", help="records file (or a glob of rank files)")
    add_filters(df)
    df.add_argument("--by-phase", action="store_true", help="a signature in another phase counts as different")
    df.add_argument("--shapes-only", action="store_true",
                    help="differ only on signatures (exit 1 on a new or missing shape, not on counts)")
    df.add_argument("--top", type=count, metavar="N", help="at most N rows per section")
    df.add_argument("--json", action="store_true", help="machine-readable")
    df.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.diff import diff
    a = scan_files("diff", args, args.a, side="A")
    b = scan_files("diff", args, args.b, side="B")
    d = diff(a, b, by_phase=args.by_phase, shapes_only=args.shapes_only)
    if args.json:
        from ..render.jsonout import diff_json, write_json
        write_json(diff_json(d), sys.stdout)
    else:
        from ..render.text.diff import print_diff
        print_diff(d, sys.stdout, top=args.top)
    return 1 if d.differs else 0
