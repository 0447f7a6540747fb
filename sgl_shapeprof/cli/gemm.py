"""`sgl-shapeprof gemm`: every matrix multiply as M, N, K, batch, dtypes, count, FLOPs."""
from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import asdict
from typing import List

from ..analysis.analyze import build
from ..analysis.gemm import FIELDS, GEMM_OPS, Gemm, custom_ops, gemms
from ..analysis.tunableop import untuned
from ..records.values import human
from .common import add_filters, fail, open_new, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    g = sub.add_parser("gemm", help="every matrix multiply as M, N, K, batch, dtypes, count, FLOPs")
    g.add_argument("files", nargs="+", metavar="FILE", help="records files, globs, or folders (searched with their subfolders)")
    add_filters(g)
    g.add_argument("--op", action="append", default=[], metavar="NAME[:A,B]",
                   help="also a custom GEMM op: its name, optionally its two matrix inputs' names "
                        "(default: the first two 2-D+ tensor inputs)")
    g.add_argument("--top", type=int, metavar="N", help="only the N GEMMs with the most FLOPs")
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
    gs = gemms(build(srcs).signatures, custom)
    if args.tunableop:
        write_untuned(gs, args.tunableop, force=args.force)
    shown = gs[:args.top] if args.top else gs
    if args.json:
        json.dump([dict(asdict(g), total_flops=g.total_flops) for g in shown], sys.stdout, indent=1)
        print()
        return 0
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(FIELDS)
        for g in shown:
            w.writerow([g.operation, g.m, g.n, g.k, g.batch, g.a_dtype, g.b_dtype, g.out_dtype, g.count,
                        g.flops, g.total_flops, g.b_layout])
        return 0
    o = sys.stdout.write
    if not gs:
        names = set().union(*(s.seen_operations for s in srcs)) if srcs else set()
        o("no matrix multiplies (" + ", ".join(f"aten.{k}" for k in GEMM_OPS) + ") in "
          + ", ".join(s.path for s in srcs) + (f"; it has {len(names)} other operations"
                                                 " (name custom GEMM ops with --op NAME)" if names else "")
          + "\n")
        return 0
    total = sum(g.total_flops for g in gs) or 1
    o(f"{len(gs)} distinct GEMMs, {human(total)} FLOP in all\n")
    o(f"{'M':>8} {'N':>7} {'K':>7} {'batch':>6} {'dtypes (A,B->out)':>26} {'count':>9} "
      f"{'FLOP/call':>10} {'total':>9} {'share':>6}  operation\n")
    for g in shown:
        dt = f"{g.a_dtype},{g.b_dtype}->{g.out_dtype}"
        o(f"{g.m:>8} {g.n:>7} {g.k:>7} {g.batch:>6} {dt:>26} {g.count:>9,} {human(g.flops):>10} "
          f"{human(g.total_flops):>9} {100 * g.total_flops / total:>5.1f}%  {g.operation}\n")
    if len(shown) < len(gs):
        o(f"... {len(gs) - len(shown)} more (--top)\n")
    return 0


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
