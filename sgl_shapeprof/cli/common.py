"""What every command shares: failing with one line, opening a new output
file, scanning the records files given."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
from typing import IO, Iterator, List, Optional

from ..analysis.deployment import inventory
from ..records.reader import InputError
from ..records.filter import Filter, parse_passes
from ..records.paths import expand_paths
from ..records.scan import Source, scan_all
from ..render.text.analyze import read_warnings


class CommandFailed(Exception):
    """Ends the command: main() prints `sgl-shapeprof CMD: message` and
    exits 2."""


def fail(message: str) -> "CommandFailed":
    """raise fail("..."): the one way a command fails."""
    return CommandFailed(message)


EXISTS = "{path} exists; not overwritten (--force to replace it)"


def open_new(path: str, force: bool, newline: Optional[str] = None) -> IO[str]:
    """A text file to write, created now: an existing one is refused unless
    force (the check is the open itself, mode 'x': no race)."""
    try:
        return open(path, "w" if force else "x", newline=newline, encoding="utf-8")
    except FileExistsError:
        raise fail(EXISTS.format(path=path)) from None
    except OSError as e:
        raise fail(f"cannot write {path}: {e.strerror or e}") from None


@contextlib.contextmanager
def new_output(path: str, force: bool, newline: Optional[str] = None) -> Iterator[IO[str]]:
    """with new_output(path, force) as f: the file opened (so refused)
    before the work; removed again if the work fails before it is written."""
    f = open_new(path, force, newline)
    try:
        yield f
    except BaseException:
        f.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        f.close()


def count(value: str) -> int:
    """An option's type: a whole number, 0 or more (argparse says which
    option in one line when it is not)."""
    try:
        n = int(value, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must be >= 0")
    return n


def add_filters(p: argparse.ArgumentParser) -> None:
    """The options filter_of reads: every command that scans takes them."""
    p.add_argument("--filter-op", metavar="PATTERN",
                   help="only operations matching PATTERN (case-insensitive; a word is a substring, "
                        "a regex is searched)")
    p.add_argument("--phase", metavar="LABEL", help="only calls in passes with this phase label")
    p.add_argument("--passes", metavar="A-B", help="only calls in forward passes A to B (also A, A-)")
    p.add_argument("--min-elements", type=count, default=0, metavar="N",
                   help="only calls whose outputs have at least N elements")
    p.add_argument("--max-entries", type=count, default=0, metavar="N", help="read at most N records per file")


def filter_of(args: argparse.Namespace) -> Filter:
    """The filter the command's --filter-op, --phase, ... options give."""
    try:
        passes = parse_passes(args.passes) if getattr(args, "passes", None) else None
        return Filter(op=args.filter_op, phase=getattr(args, "phase", None), passes=passes,
                      min_elements=getattr(args, "min_elements", 0) or 0,
                      max_entries=getattr(args, "max_entries", 0) or 0)
    except re.error as e:
        raise fail(f"bad --filter-op regex {args.filter_op!r}: {e}") from None
    except ValueError as e:
        raise fail(str(e)) from None


def progress(label: str):
    """A progress line on stderr for long scans (only on a terminal)."""
    if not sys.stderr.isatty():
        return None

    def show(n: int) -> None:
        print(f"\r{label}: {n:,} records read", end="", file=sys.stderr, flush=True)
    return show


def scan_files(cmd: str, args: argparse.Namespace, files: List[str], on_record=None,
               side: Optional[str] = None) -> List[Source]:
    """The files scanned, with the command's filters (applied here, once:
    each Source keeps the filter it was scanned with); side: "A" or "B"
    of a diff, naming its notes."""
    flt = filter_of(args)
    try:
        paths = expand_paths(files)
        prog = progress(cmd)
        srcs = scan_all(paths, flt, progress=prog, on_record=on_record)
        if prog:
            print("\r\033[K", end="", file=sys.stderr)
    except (InputError, ValueError) as e:
        raise fail(str(e)) from None
    if cmd != "analyze" or getattr(args, "json", False):  # analyze's text says these in its own header
        lines = [f"{side}: {line}" if side else line for line in notes(srcs)]
        # --json/--csv write to stdout (true, or "-" where they take a file)
        if any(getattr(args, k, None) in (True, "-") for k in ("json", "csv")):
            for line in lines:  # stdout is for the machine-readable output
                print(f"sgl-shapeprof {cmd}: {line}", file=sys.stderr)
        else:  # the text output's header, before anything else on stdout
            for line in lines:
                print(line)
    return srcs


def notes(srcs: List[Source]) -> List[str]:
    """What the files are (a deployment's workers, which are missing, which
    are claimed twice) and what their counts leave out."""
    lines = inventory(srcs)
    for s in srcs:
        lines += [f"{s.label}: {line}" for line in read_warnings(s)]
        said = uncaptured(s)
        if said:
            lines.append(f"{s.label}: {said}")
    return lines


def uncaptured(src: Source) -> Optional[str]:
    """What a file's counts leave out: replays of graphs whose captures
    are not in it (captured before the profiler was armed or started, or
    not kept for requests: over the cap); None if none."""
    keys = sorted(k for k, g in src.graphs.items() if g["replays"] and not g["captures"])
    if not keys:
        return None
    n = sum(src.graphs[k]["replays"] for k in keys)
    return (f"{n:,} replay{'s' if n != 1 else ''} of {len(keys)} CUDA graph{'s' if len(keys) != 1 else ''} "
            f"({', '.join(map(str, keys[:8]))}{', ...' if len(keys) > 8 else ''}) whose captures are not "
            f"in this file (captured before the profiler was armed, or not kept: its log says why): their "
            f"calls are not counted here (record from start-up to count them: SGLANG_PROFILE_SHAPES=1)")


def add_device(p: argparse.ArgumentParser, default: Optional[str] = None) -> None:
    """The GPU a command estimates times for, defined once for every command
    that does (cost, report): --gpu NAME, or --peak-tflops with --bandwidth.
    `default`: the GPU used when none is given (None: no roofline)."""
    from ..analysis.cost import GPUS
    names = ", ".join(g.name for g in GPUS.values())
    p.add_argument("--gpu", metavar="NAME", help=f"estimate times on this GPU: {names}"
                                                  f"{f' (default {default})' if default else ''}")
    p.add_argument("--peak-tflops", type=float, metavar="T", help="dense peak TFLOP/s (instead of --gpu)")
    p.add_argument("--bandwidth", type=float, metavar="TB/s", help="memory bandwidth TB/s (instead of --gpu)")
    p.set_defaults(default_gpu=default)


def device_of(args: argparse.Namespace):
    """The Device add_device's options chose (or the command's default), or
    None; a bad value is the command's one-line error."""
    from ..analysis.cost import device_for
    custom = args.peak_tflops is not None or args.bandwidth is not None
    try:
        return device_for(args.gpu or (None if custom else args.default_gpu), args.peak_tflops, args.bandwidth)
    except ValueError as e:
        raise fail(str(e)) from None


def add_imports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: it registers operators the file calls (sgl_kernel, ...)")


def import_modules(modules: List[str]) -> None:
    """--import: the libraries that register the file's custom operators
    (found in the current directory too, as `python -m` finds them)."""
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:
            raise fail(f"--import {module}: {type(e).__name__}: {e}")
