"""`sgl-shapeprof cost`: FLOPs and bytes per signature, roofline time with --gpu."""
from __future__ import annotations

import argparse
import csv
import json
import sys

from ..analysis.analyze import build
from ..analysis.deployment import inventory
from ..analysis.cost import by_op, costs, device_for, format_time, peaks_text
from ..records.values import format_inputs, format_value, human
from .common import add_filters, fail, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    c = sub.add_parser("cost", help="FLOPs and bytes per signature (torch's formulas), roofline time with --gpu")
    c.add_argument("files", nargs="+", metavar="FILE", help="records files, globs, or folders (searched with their subfolders)")
    add_filters(c)
    c.add_argument("--gpu", metavar="NAME", help="roofline on this GPU: H100, H200, B200, A100, MI300X")
    c.add_argument("--peak-tflops", type=float, metavar="T", help="dense peak TFLOP/s (instead of --gpu)")
    c.add_argument("--bandwidth", type=float, metavar="TB/s", help="memory bandwidth TB/s (instead of --gpu)")
    c.add_argument("--top", type=int, metavar="N", help="only the N costliest signatures")
    c.add_argument("--by-op", action="store_true", help="one row per operator instead of per signature")
    c.add_argument("--csv", action="store_true", help="CSV on stdout")
    c.add_argument("--json", action="store_true", help="JSON on stdout")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    srcs = scan_files("cost", args, args.files)
    try:
        dev = device_for(args.gpu, args.peak_tflops, args.bandwidth)
    except ValueError as e:
        raise fail(str(e)) from None
    a = build(srcs)
    cs = costs(a.signatures, dev)
    if args.by_op:
        rows = by_op(cs)
    else:
        rows = [(c.sig.operation, c.sig.count, c.flops, c.bytes, c.seconds, c.bound, c.sig) for c in cs]
    key = (lambda r: -(r[4] or 0) * r[1]) if dev else (lambda r: (-(r[2] or 0) * r[1], -r[3] * r[1]))
    rows.sort(key=key)
    total = sum((r[4] or 0) * r[1] for r in rows) or 1.0
    all_rows = len(rows)
    if args.top:
        rows = rows[:args.top]
    fields = ["operation", "count", "flops_per_call", "bytes_per_call", "total_flops", "total_bytes",
              "est_us_per_call", "est_total_ms", "bound", "inputs", "outputs"]

    def as_dict(r) -> dict:
        op, n, fl, by, sec, bound, sig = r
        return {"operation": op, "count": n, "flops_per_call": fl, "bytes_per_call": by,
                "total_flops": (fl or 0) * n, "total_bytes": by * n,
                "est_us_per_call": None if sec is None else sec * 1e6,
                "est_total_ms": None if sec is None else sec * n * 1e3, "bound": bound or None,
                "inputs": sig.inputs if sig else None, "outputs": sig.outputs if sig else None}
    if args.json:
        json.dump({"device": dev.__dict__ if dev else None, "rows": [as_dict(r) for r in rows],
                   "inventory": inventory(srcs)},
                  sys.stdout, indent=1)
        print()
        return 0
    if args.csv:
        w = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in rows:
            d = as_dict(r)
            d["inputs"] = json.dumps(d["inputs"])
            d["outputs"] = json.dumps(d["outputs"])
            w.writerow(d)
        return 0
    o = sys.stdout.write
    if dev:
        o(f"roofline on {dev.name} ({peaks_text(dev)}, {dev.bandwidth:g} TB/s): estimated "
          f"{format_time(total)} of operator time over {all_rows} {'operators' if args.by_op else 'signatures'}"
          " (the larger of FLOPs/peak and bytes/bandwidth per call; views move nothing)\n")
    o(f"{'count':>10} {'FLOP/call':>10} {'bytes/call':>10} {'total FLOP':>10}")
    if dev:
        o(f" {'per call':>9} {'total':>9} {'share':>6} {'bound':>7}")
    o("  operation\n")
    for r in rows:
        op, n, fl, by, sec, bound, sig = r
        o(f"{n:>10,} {human(fl) if fl is not None else '-':>10} {human(by):>10} "
          f"{human((fl or 0) * n):>10}")
        if dev:
            o(f" {format_time(sec):>9} {format_time(sec * n):>9} {100 * sec * n / total:>5.1f}% {bound:>7}")
        o(f"  {op}")
        if sig is not None:
            o(f"  {format_inputs(sig.inputs)} -> {format_value(sig.outputs)}")
        o("\n")
    if len(rows) < all_rows:
        o(f"... {all_rows - len(rows)} more (--top)\n")
    return 0
