"""`sgl-shapeprof gemm`: every matrix multiply as M, N, K, batch, dtypes, count, FLOPs."""
from __future__ import annotations

import argparse
import sys
from typing import List

from ..analysis.analyze import build
from ..analysis.gemm import Gemm, custom_ops, gemms
from ..analysis.tunableop import untuned
from ..render.csvout import gemm_csv
from ..render.jsonout import gemm_json, write_json
from ..render.text.gemm import gemm_text
from .common import add_device, add_filters, count, device_of, fail, open_new, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    g = sub.add_parser("gemm", help="every matrix multiply as M, N, K, batch, dtypes, count, FLOPs")
    g.add_argument("files", nargs="+", metavar="FILE", help="records files, globs, or folders (searched with their subfolders)")
    add_filters(g)
    g.add_argument("--op", action="append", default=[], metavar="NAME[:A,B]",
                   help="also a custom GEMM op: its name, optionally its two matrix inputs' names "
                        "(default: the first two 2-D+ tensor inputs)")
    add_device(g)
    g.add_argument("--top", type=count, metavar="N", help="only the N GEMMs with the most FLOPs")
    g.add_argument("--csv", action="store_true", help="CSV on stdout")
    g.add_argument("--json", action="store_true", help="JSON on stdout")
    g.add_argument("--tunableop", metavar="FILE.csv",
                   help="write the GEMMs as TunableOp untuned entries (torch.cuda.tunable.tune_gemm_in_file)")
    g.add_argument("--force", action="store_true", help="let --tunableop replace an existing file")
    g.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    srcs = scan_files("gemm", args, args.files)
    try:
        custom = custom_ops(args.op)
    except ValueError as e:
        raise fail(str(e)) from None
    dev = device_of(args)
    gs = gemms(build(srcs).signatures, custom, _roofline(dev) if dev is not None else None)
    if args.tunableop:
        write_untuned(gs, args.tunableop, force=args.force)
    shown = gs[:args.top] if args.top else gs
    if args.json:
        write_json(gemm_json(shown), sys.stdout)
    elif args.csv:
        gemm_csv(shown, sys.stdout)
    else:
        gemm_text(gs, srcs, sys.stdout, top=args.top)
    return 0


def _roofline(dev):
    """cost's estimate for a signature's shape on dev, in seconds per call."""
    from ..analysis.cost import costs
    return lambda sig: costs([sig], dev)[0].seconds


def write_untuned(gs: List[Gemm], path: str, force: bool = False) -> None:
    """--tunableop FILE: the GEMMs as TunableOp untuned entries."""
    u = untuned(gs)
    with open_new(path, force) as f:
        f.write(u.text)
    lines, skipped, assumed = u.lines, u.skipped, u.assumed
    msg = f"wrote {len(lines)} TunableOp untuned GEMM entries to {path}"
    if assumed:
        msg += (f" ({assumed} assume contiguous operands: recorded without --args, so no strides, "
                "or batched)")
    print(msg, file=sys.stderr)
    for s in skipped[:10]:
        print(f"  not exported: {s}", file=sys.stderr)
    if len(skipped) > 10:
        print(f"  ... {len(skipped) - 10} more not exported", file=sys.stderr)
