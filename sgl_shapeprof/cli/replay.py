"""`sgl-shapeprof replay`: each distinct recorded call run again and timed."""
from __future__ import annotations

import argparse
import contextlib
import sys
from typing import List

from ..records.scan import Source
from ..render.csvout import replay_csv
from ..render.jsonout import replay_json, write_json
from ..render.text.replay import doubt_line, replay_text
from ..replay import compare, default_max_bytes, distinct_calls, replay
from .common import add_filters, add_imports, count, fail, import_modules, new_output, scan_files


def _bar(label: str):
    """A progress bar on stderr for long runs (only on a terminal)."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int, what: str) -> None:
        if done >= total:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
            return
        filled = 30 * done // max(total, 1)
        print(f"\r{label} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {what}\033[K",
              end="", file=sys.stderr, flush=True)
    return show


def add_parser(sub: "argparse._SubParsersAction") -> None:
    rl = sub.add_parser("replay", help="run each distinct recorded call again (files recorded with --args) "
                                       "and time it: where the operator time goes on this device")
    rl.add_argument("files", nargs="*", metavar="FILE", help="records files (or globs) recorded with --args")
    add_filters(rl)
    rl.add_argument("--top", type=count, metavar="N", help="only the N distinct calls that ran most often")
    rl.add_argument("--device", metavar="DEV", help="replay every call on DEV (cpu, cuda, cuda:1) instead "
                                                    "of where it was recorded")
    rl.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads(N) first")
    add_imports(rl)
    rl.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed runs per call (default 3)")
    rl.add_argument("--iterations", type=int, metavar="N",
                    help="timed runs per call (default: 10 to 1000, about 10 ms)")
    rl.add_argument("--warm-cache", action="store_true",
                    help="run each call on one set of inputs, which stays cached from run to run "
                         "(default: rotate among copies that together exceed the L2 cache)")
    rl.add_argument("--max-memory", type=float, metavar="GIB",
                    help="skip calls whose inputs in host memory need more (default: half of "
                         "this machine's memory)")
    rl.add_argument("--csv", nargs="?", const="-", metavar="FILE",
                    help="CSV per distinct call, to FILE (the table is printed too) or stdout")
    rl.add_argument("--json", nargs="?", const="-", metavar="FILE",
                    help="JSON list, one object per distinct call, to FILE or stdout")
    rl.add_argument("--force", action="store_true", help="let --csv/--json replace an existing file")
    rl.add_argument("--compare", nargs=2, metavar=("A.csv", "B.csv"),
                    help="per-call speed-up of B over A, from two replays' CSVs (before/after, two devices)")
    rl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name in ("threads", "warmup", "iterations"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "warmup" else 1):
            raise fail(f"--{name} must be >= {0 if name == 'warmup' else 1}")
    if args.compare:
        if args.files:
            raise fail("--compare takes two replay CSVs, not records files")
        try:
            compare(args.compare[0], args.compare[1], sys.stdout, top=args.top)
        except ValueError as e:
            raise fail(str(e)) from None
        return 0
    if not args.files:
        raise fail("give a records file recorded with --args (or --compare A.csv B.csv)")
    import_modules(args.imports)
    if args.device:
        import torch
        try:
            dev = torch.device(args.device)
        except RuntimeError as e:
            raise fail(f"--device {args.device}: {e}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise fail(f"--device {args.device} but CUDA is not available")
        if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
            raise fail(f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA devices")
    return _replay(args, scan_files("replay", args, args.files))


def _replay(args: argparse.Namespace, srcs: List[Source]) -> int:
    import torch
    calls = distinct_calls(srcs)
    if args.top:
        calls = calls[:args.top]
    if not calls:
        print("no calls to replay in " + ", ".join(s.path for s in srcs)
              + (" (check the filters)" if any(s.filtered for s in srcs) else ""), file=sys.stderr)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    max_bytes = int(args.max_memory * 2**30) if args.max_memory else default_max_bytes()
    outputs = [(path, kind) for path, kind in ((args.csv, "csv"), (args.json, "json")) if path]
    if [p for p, _ in outputs].count("-") > 1:
        raise fail("--csv and --json cannot both go to stdout: give one a FILE")
    with contextlib.ExitStack() as files:  # opened before the replay runs: refused before, not after
        opened = [(sys.stdout if path == "-" else files.enter_context(new_output(path, args.force, newline="")),
                   kind) for path, kind in outputs]
        results = replay(calls, args.device, args.warmup, args.iterations, max_bytes, args.warm_cache,
                         _bar("replay"))
        for f, kind in opened:
            if kind == "csv":
                replay_csv(results, f)
            else:
                write_json(replay_json(results), f)
    if "-" not in (p for p, _ in outputs):
        replay_text([s.path for s in srcs], results, sys.stdout, args.warmup, args.iterations,
                    args.warm_cache)
    else:  # no table: the doubt is still said
        print(doubt_line(results, "timing_doubts in the " + " and ".join(k.upper() for _, k in outputs)),
              end="", file=sys.stderr)
    return 0
