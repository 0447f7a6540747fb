"""`sgl-shapeprof report`: one self-contained HTML page of plots."""
from __future__ import annotations

import argparse
import os

from ..analysis.analyze import build
from ..analysis.report import report
from ..analysis.tune.result import tune_result
from ..records.values import human
from ..render.html import report_html
from .common import add_device, add_filters, device_of, fail, new_output, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    rp = sub.add_parser("report", help="one self-contained HTML page of plots")
    rp.add_argument("files", nargs="+", metavar="FILE", help="records files, globs, or folders (searched with their subfolders)")
    add_filters(rp)
    rp.add_argument("-o", "--output", default="shapes_report.html", help="the HTML file (default shapes_report.html)")
    add_device(rp, default="H100")
    rp.add_argument("--tune-device", metavar="NAME",
                    help="add a tuned-config coverage section for this GPU (named as for the tune command)")
    rp.add_argument("--configs", metavar="DIR", help="with --tune-device: your own config files (as `tune`)")
    rp.add_argument("--force", action="store_true", help="replace an existing output file")
    rp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    srcs = scan_files("report", args, args.files)
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise fail('needs plotly: pip install "sgl_shapeprof[report]" (or pip install plotly)') from None
    dev = device_of(args)
    a = build(srcs)
    tune = None
    if args.tune_device:
        try:
            tune = tune_result(a.signatures, args.tune_device, args.configs)
        except ValueError as e:
            raise fail(str(e)) from None
    elif args.configs:
        raise fail("--configs goes with --tune-device")
    out: str = args.output
    with new_output(out, args.force) as f:  # refused before the work, not after
        f.write(report_html(report(a, dev, tune)))
    print(f"report: {out} ({human(os.path.getsize(out))}B)")
    return 0
