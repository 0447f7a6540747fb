"""`sgl-shapeprof cost`: FLOPs and bytes per signature, roofline time with --gpu."""
from __future__ import annotations

import argparse
import sys

from ..analysis.analyze import build
from ..analysis.cost import costs, ranked_rows
from ..render.csvout import cost_csv
from ..render.jsonout import cost_json, write_json
from ..render.text.cost import cost_text
from .common import add_device, add_filters, count, device_of, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    c = sub.add_parser("cost", help="FLOPs and bytes per signature (torch's formulas), roofline time with --gpu")
    c.add_argument("files", nargs="+", metavar="FILE", help="records files, globs, or folders (searched with their subfolders)")
    add_filters(c)
    add_device(c)
    c.add_argument("--top", type=count, metavar="N", help="only the N costliest signatures")
    c.add_argument("--by-op", action="store_true", help="one row per operator instead of per signature")
    c.add_argument("--csv", action="store_true", help="CSV on stdout")
    c.add_argument("--json", action="store_true", help="JSON on stdout")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    srcs = scan_files("cost", args, args.files)
    dev = device_of(args)
    rows = ranked_rows(costs(build(srcs).signatures, dev), dev, per_op=args.by_op)
    shown = rows[:args.top] if args.top else rows
    if args.json:
        write_json(cost_json(dev, shown, srcs), sys.stdout)
    elif args.csv:
        cost_csv(shown, sys.stdout)
    else:
        cost_text(rows, dev, sys.stdout, top=args.top, by_op=args.by_op)
    return 0
