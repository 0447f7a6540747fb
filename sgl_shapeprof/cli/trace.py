"""`sgl-shapeprof trace`: a timed recording as a Perfetto / Chrome trace."""
from __future__ import annotations

import argparse
import os
from typing import List

from ..analysis.timeline import read_timeline
from ..records.paths import expand_paths
from ..records.reader import InputError
from ..records.values import human
from ..render.text.analyze import report_warnings
from ..render.trace_json import write_trace
from .common import add_filters, fail, filter_of, new_output


def add_parser(sub: "argparse._SubParsersAction") -> None:
    tp = sub.add_parser("trace", help="a timed recording as a timeline (Perfetto / Chrome trace JSON)")
    tp.add_argument("files", nargs="+", metavar="FILE",
                    help="timed records files (record --time), globs, or folders (searched with their subfolders)")
    add_filters(tp)
    tp.add_argument("-o", "--output", default="shapes_trace.json",
                    help="the trace file (default shapes_trace.json); open it in ui.perfetto.dev or chrome://tracing")
    tp.add_argument("--force", action="store_true", help="replace an existing output file")
    tp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    flt = filter_of(args)
    try:
        timelines = [read_timeline(p, flt) for p in expand_paths(args.files)]
    except (InputError, ValueError) as e:
        raise fail(str(e)) from None
    notes: List[str] = []
    for tl in timelines:
        notes += [f"{tl.label}: {line}" for line in report_warnings(tl.report)]
        if tl.no_time:
            notes.append(f"{tl.label}: {tl.no_time:,} record{'s' if tl.no_time != 1 else ''} without a readable "
                         "start_us and time_us: left out of the timeline")
        if tl.stood_for > tl.calls:
            notes.append(f"{tl.path} is deduplicated: its {tl.calls:,} records stand for {tl.stood_for:,} calls, "
                         "and the timeline shows each signature's first call only (record without --dedupe "
                         "for every call)")
    hosts = {tl.host for tl in timelines}
    if len(hosts) > 1:
        notes.append("the files come from several machines (" + ", ".join(sorted(str(h) for h in hosts)) +
                     "): each machine's clock is its own, so only the files of one machine are aligned")
    for tl in timelines:
        if tl.kernels_note:
            notes.append(f"{tl.label}: its kernels are left out: {tl.kernels_note}")
    if not any(tl.kernels for tl in timelines):
        notes.append("CPU time only: no GPU kernels in these files (record with SHAPEPROF_TIME=kernels, "
                     "record --kernels, on a GPU)")
    out: str = args.output
    with new_output(out, args.force) as f:
        write_trace(f, timelines, notes)
    for line in notes:
        print(f"trace: {line}")
    calls = sum(tl.calls for tl in timelines)
    passes = sum(len(tl.passes) for tl in timelines)
    print(f"trace: {out} ({human(os.path.getsize(out))}B): {calls:,} calls in {passes:,} passes of "
          f"{len(timelines)} file{'s' if len(timelines) != 1 else ''}; open it in ui.perfetto.dev")
    return 0
