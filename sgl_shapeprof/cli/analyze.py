"""`sgl-shapeprof analyze`: per-operator counts, shapes, errors of records files."""
from __future__ import annotations

import argparse
import sys

from .common import add_filters, count, fail, open_new, scan_files


def add_parser(sub: "argparse._SubParsersAction") -> None:
    a = sub.add_parser("analyze", help="per-operator counts, shapes, errors of records files")
    a.add_argument("files", nargs="+", metavar="FILE",
                   help="records files (.jsonl, .jsonl.gz, .jsonl.zst), globs ('shapes.rank*.jsonl'), or folders (every node's files gathered: searched with their subfolders)")
    add_filters(a)
    a.add_argument("--quick", action="store_true",
                   help="operation counts only, from the summary when there is one")
    a.add_argument("--top", type=count, metavar="N", help="only the N most called operators (and N rows per section)")
    a.add_argument("--show-shapes", action="store_true", help="list each operator's distinct shapes")
    a.add_argument("--sort", choices=("calls", "time"), default="calls",
                   help="operators (and with --show-shapes their shapes) by calls, or by measured time "
                        "(files recorded with time: SHAPEPROF_TIME=1, the record command's time option)")
    a.add_argument("--max-shapes", type=count, metavar="N", help="with --show-shapes, at most N per operator")
    a.add_argument("--by-phase", action="store_true",
                   help="each operator's shapes per phase side by side (prefill vs decode)")
    a.add_argument("--timeline", metavar="FILE.csv",
                   help="write call_id, operation, op_count, output_elements, output_shape per record")
    a.add_argument("--force", action="store_true", help="let --timeline replace an existing file")
    a.add_argument("--no-summary", action="store_true", help="leave out the summary statistics")
    a.add_argument("--no-largest", action="store_true", help="leave out the largest operations")
    a.add_argument("--no-diversity", action="store_true", help="leave out shape diversity")
    a.add_argument("--tail", type=count, default=20, metavar="N",
                   help="when a file says its process died (a cut last record, or a summary that did not "
                        "close): the last N calls of each pass running then, the call in flight first "
                        "(default 20; 0: not shown)")
    a.add_argument("--json", action="store_true",
                   help="machine-readable: each operator's distinct input/output shapes with true counts")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.analyze import build, quick_counts
    from ..analysis.tail import crash_tail
    from ..records.reader import InputError
    from ..render.text.analyze import Sections, print_analysis, print_quick
    if args.quick:
        from ..records.paths import expand_paths
        try:
            for path in expand_paths(args.files):
                counts, how = quick_counts(path)
                print_quick(path, counts, how, args.top, sys.stdout)
        except InputError as e:
            raise fail(str(e)) from None
        return 0
    timeline = None
    if args.timeline:
        from ..render.csvout import Timeline
        tfile = open_new(args.timeline, args.force, newline="")
        timeline = Timeline(tfile)
    try:
        srcs = scan_files("analyze", args, args.files, on_record=timeline)
    finally:
        if timeline is not None:
            tfile.close()
    a = build(srcs)
    from ..analysis.kernel_time import ledger_beside
    try:
        a.kernel_ledgers = [led for led in (ledger_beside(s.label, s.path) for s in srcs) if led is not None]
    except InputError as e:
        raise fail(str(e)) from None
    if args.sort == "time" and not a.timed:
        raise fail("--sort time: no file here was recorded with time (record --time, SHAPEPROF_TIME=1, "
                   "ShapeProfiler(time=True))")
    try:
        tails = [t for t in (crash_tail(s, args.tail) for s in srcs) if t is not None]
    except InputError as e:
        raise fail(str(e)) from None
    if args.json:
        from ..render.jsonout import analysis_json, tail_json, write_json
        doc = analysis_json(a, top=args.top, by=args.sort)
        if tails:
            doc["crash_tails"] = [tail_json(t) for t in tails]
        write_json(doc, sys.stdout)
    else:
        from ..render.text.tail import write_tail
        print_analysis(a, sys.stdout, Sections(
            summary=not args.no_summary, largest=not args.no_largest,
            diversity=not args.no_diversity, show_shapes=args.show_shapes,
            by_phase=args.by_phase, top=args.top, max_shapes=args.max_shapes, sort=args.sort))
        for t in tails:
            write_tail(t, sys.stdout)
    return 0
