"""sgl-shapeprof: analyze records files, profile any script, run the demo."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import List, Optional

from .. import __version__
from . import cost as cost_cmd, gemm as gemm_cmd, replay as replay_cmd, report as report_cmd
from .common import CommandFailed, fail, open_new, scan_files


def _analyze(args: argparse.Namespace) -> int:
    from ..analysis.analyze import Sections, Timeline, analysis_json, build, print_analysis, quick_counts
    if args.quick:
        from ..records.reader import InputError
        from ..records.scan import expand_paths
        try:
            for path in expand_paths(args.files):
                counts, how = quick_counts(path)
                print(f"{path}: {sum(counts.values()):,} calls, {len(counts)} operations ({how})")
                for op, n in sorted(counts.items(), key=lambda kv: -kv[1])[:args.top or None]:
                    print(f"{n:>12,}  {op}")
        except InputError as e:
            raise fail(str(e)) from None
        return 0
    timeline = None
    if args.timeline:
        tfile = open_new(args.timeline, args.force, newline="")
        timeline = Timeline(tfile)
    try:
        srcs = scan_files("analyze", args, args.files, on_record=timeline)
    finally:
        if timeline is not None:
            tfile.close()
    a = build(srcs)
    if args.json:
        import json
        json.dump(analysis_json(a, top=args.top), sys.stdout, indent=1)
        print()
    else:
        print_analysis(a, sys.stdout, Sections(
            summary=not args.no_summary, largest=not args.no_largest,
            diversity=not args.no_diversity, show_shapes=args.show_shapes,
            by_phase=args.by_phase, top=args.top, max_shapes=args.max_shapes))
    return 0


def _diff(args: argparse.Namespace) -> int:
    from ..analysis.diff import diff, diff_json, print_diff
    a = scan_files("diff", args, args.a)
    b = scan_files("diff", args, args.b)
    d = diff(a, b, by_phase=args.by_phase, shapes_only=args.shapes_only)
    if args.json:
        import json
        json.dump(diff_json(d), sys.stdout, indent=1)
        print()
    else:
        print_diff(d, sys.stdout, top=args.top)
    return 1 if d.differs else 0


def _record(args: argparse.Namespace) -> int:
    cmd: List[str] = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise fail("give the command after --, e.g. sgl-shapeprof record -o shapes.jsonl -- python script.py")
    exe = os.path.basename(cmd[0])
    if exe.endswith(".py"):
        target = cmd
    elif exe.startswith("python"):
        target = cmd[1:]
        if not target:
            raise fail("python needs a script, -m module or -c code")
    else:
        raise fail(f"{cmd[0]!r} is not a Python command; record runs "
                   "'python script.py ...', 'python -m module ...' or 'script.py ...'")
    out = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(out)):
        raise fail(f"directory of {args.output} does not exist")
    from ..recording import config
    try:
        config.env_rank()  # the program's own rank variables: a bad one is said here, once
    except config.ConfigError as e:
        raise fail(str(e)) from None
    env = dict(os.environ)
    env.update({
        config.ENV_ENABLE: "1",
        config.ENV_FILE: out,
        config.ENV_DEDUPE: "1" if args.dedupe else "0",
        config.ENV_SKIP_WARMUP: str(args.skip_warmup),
        config.ENV_LOG_N_PASSES: str(args.log_n_passes),
        config.ENV_ARGS: "1" if args.args else "0",
    })
    python = cmd[0] if exe.startswith("python") else sys.executable
    python = shutil.which(python) or python
    argv = [python, "-m", "sgl_shapeprof.recording._record", *target]
    sys.stdout.flush()
    os.execve(python, argv, env)  # the script gets this process: pid, signals, exit code
    return 0  # not reached


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo
    return run_demo(args.dir, decode_steps=args.decode_steps, diffusion_steps=args.steps)


def _request(args: argparse.Namespace) -> int:
    from ..recording.on_request import RequestError, send
    if args.stop:
        msg = {"action": "stop"}
    elif args.status:
        msg = {"action": "status"}
    else:
        msg = {"action": "start", "passes": args.passes, "skip": args.skip,
               "phases": args.phases, "output": os.path.abspath(args.output) if args.output else None}
    try:
        reply = send(args.pid, msg, timeout=args.timeout)
    except (RequestError, OSError) as e:
        raise fail(str(e)) from None
    if reply is None:
        raise fail(f"process {args.pid} did not answer within {args.timeout:g} s: it takes "
                                "requests at forward-pass starts, and only when started with "
                                "SGLANG_PROFILE_SHAPES=on_request (the request stays until it is taken)")
    print(f"pid {args.pid}: {reply.get('message')}")
    return 0 if reply.get("ok") else 1


def _hook(args: argparse.Namespace) -> int:
    from ..integrations.sglang import install
    site_dir = args.site_dir or install.default_site_dir()
    if not os.path.isdir(site_dir):
        raise fail(f"no such folder: {site_dir}")
    target = install.hook_path(site_dir)
    if args.action == "status":
        print(f"{'installed' if os.path.exists(target) else 'not installed'}: {target}")
        return 0
    try:
        if args.action == "install":
            install.install(site_dir)
            print(f"installed {target}; SGLANG_PROFILE_SHAPES=1 now profiles SGLang workers unedited")
        elif install.uninstall(site_dir):
            print(f"removed {target}")
        else:
            print(f"not installed: {target}")
    except OSError as e:
        raise fail(str(e)) from None  # was exit 1; every other command's failure is 2
    return 0


def _add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter-op", metavar="PATTERN",
                   help="only operations matching PATTERN (case-insensitive; a word is a substring, "
                        "a regex is searched)")
    p.add_argument("--phase", metavar="LABEL", help="only calls in passes with this phase label")
    p.add_argument("--passes", metavar="A-B", help="only calls in forward passes A to B (also A, A-)")
    p.add_argument("--min-elements", type=int, default=0, metavar="N",
                   help="only calls whose outputs have at least N elements")
    p.add_argument("--max-entries", type=int, default=0, metavar="N", help="read at most N records per file")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sgl-shapeprof", description=__doc__)
    p.add_argument("--version", action="version", version=f"sgl_shapeprof {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("analyze", help="per-operator counts, shapes, errors of records files")
    a.add_argument("files", nargs="+", metavar="FILE",
                   help="records files (.jsonl, .jsonl.gz, .jsonl.zst; a glob such as 'shapes.rank*.jsonl')")
    _add_filters(a)
    a.add_argument("--quick", action="store_true",
                   help="operation counts only, from the summary when there is one")
    a.add_argument("--top", type=int, metavar="N", help="only the N most called operators (and N rows per section)")
    a.add_argument("--show-shapes", action="store_true", help="list each operator's distinct shapes")
    a.add_argument("--max-shapes", type=int, metavar="N", help="with --show-shapes, at most N per operator")
    a.add_argument("--by-phase", action="store_true",
                   help="each operator's shapes per phase side by side (prefill vs decode)")
    a.add_argument("--timeline", metavar="FILE.csv",
                   help="write call_id, operation, op_count, output_elements, output_shape per record")
    a.add_argument("--force", action="store_true", help="let --timeline replace an existing file")
    a.add_argument("--no-summary", action="store_true", help="leave out the summary statistics")
    a.add_argument("--no-largest", action="store_true", help="leave out the largest operations")
    a.add_argument("--no-diversity", action="store_true", help="leave out shape diversity")
    a.add_argument("--json", action="store_true",
                   help="machine-readable: each operator's distinct input/output shapes with true counts")
    a.set_defaults(func=_analyze)

    df = sub.add_parser("diff", help="signatures only in A, only in B, and count changes; exit 1 if they differ")
    df.add_argument("a", nargs=1, metavar="A", help="records file (or a glob of rank files)")
    df.add_argument("b", nargs=1, metavar="B", help="records file (or a glob of rank files)")
    _add_filters(df)
    df.add_argument("--by-phase", action="store_true", help="a signature in another phase counts as different")
    df.add_argument("--shapes-only", action="store_true",
                    help="differ only on signatures (exit 1 on a new or missing shape, not on counts)")
    df.add_argument("--top", type=int, metavar="N", help="at most N rows per section")
    df.add_argument("--json", action="store_true", help="machine-readable")
    df.set_defaults(func=_diff)

    g = sub.add_parser("gemm", help="every matrix multiply as M, N, K, batch, dtypes, count, FLOPs")
    g.add_argument("files", nargs="+", metavar="FILE", help="records files (or globs)")
    _add_filters(g)
    g.add_argument("--op", action="append", default=[], metavar="NAME[:A,B]",
                   help="also a custom GEMM op: its name, optionally its two matrix inputs' names "
                        "(default: the first two 2-D+ tensor inputs)")
    g.add_argument("--top", type=int, metavar="N", help="only the N GEMMs with the most FLOPs")
    g.add_argument("--csv", action="store_true", help="CSV on stdout")
    g.add_argument("--json", action="store_true", help="JSON on stdout")
    g.add_argument("--tunableop", metavar="FILE.csv",
                   help="write the GEMMs as TunableOp untuned entries (torch.cuda.tunable.tune_gemm_in_file)")
    g.add_argument("--force", action="store_true", help="let --tunableop replace an existing file")
    g.set_defaults(func=gemm_cmd.run)

    c = sub.add_parser("cost", help="FLOPs and bytes per signature (torch's formulas), roofline time with --gpu")
    c.add_argument("files", nargs="+", metavar="FILE", help="records files (or globs)")
    _add_filters(c)
    c.add_argument("--gpu", metavar="NAME", help="roofline on this GPU: H100, H200, B200, A100, MI300X")
    c.add_argument("--peak-tflops", type=float, metavar="T", help="dense peak TFLOP/s (instead of --gpu)")
    c.add_argument("--bandwidth", type=float, metavar="TB/s", help="memory bandwidth TB/s (instead of --gpu)")
    c.add_argument("--top", type=int, metavar="N", help="only the N costliest signatures")
    c.add_argument("--by-op", action="store_true", help="one row per operator instead of per signature")
    c.add_argument("--csv", action="store_true", help="CSV on stdout")
    c.add_argument("--json", action="store_true", help="JSON on stdout")
    c.set_defaults(func=cost_cmd.run)

    rp = sub.add_parser("report", help="one self-contained HTML page of plots")
    rp.add_argument("files", nargs="+", metavar="FILE", help="records files (or globs)")
    _add_filters(rp)
    rp.add_argument("-o", "--output", default="shapes_report.html", help="the HTML file (default shapes_report.html)")
    rp.add_argument("--gpu", metavar="NAME", default="H100", help="GPU for estimated times (default H100)")
    rp.add_argument("--force", action="store_true", help="replace an existing output file")
    rp.set_defaults(func=report_cmd.run)

    rl = sub.add_parser("replay", help="run each distinct recorded call again (files recorded with --args) "
                                       "and time it: where the operator time goes on this device")
    rl.add_argument("files", nargs="*", metavar="FILE", help="records files (or globs) recorded with --args")
    _add_filters(rl)
    rl.add_argument("--top", type=int, metavar="N", help="only the N distinct calls that ran most often")
    rl.add_argument("--device", metavar="DEV", help="replay every call on DEV (cpu, cuda, cuda:1) instead "
                                                    "of where it was recorded")
    rl.add_argument("--threads", type=int, metavar="N", help="torch.set_num_threads(N) first")
    rl.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                    help="import MODULE first: it registers operators the file calls (sgl_kernel, ...)")
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
    rl.set_defaults(func=replay_cmd.run)

    r = sub.add_parser("record", help="profile a Python script: record [-o FILE] -- python script.py ARGS")
    r.add_argument("-o", "--output", default="shapes.jsonl", help="records file (default shapes.jsonl)")
    r.add_argument("--dedupe", action="store_true", help="write each signature once")
    r.add_argument("--skip-warmup", type=int, default=0, metavar="N", help="passes not logged first")
    r.add_argument("--log-n-passes", type=int, default=0, metavar="N", help="logged passes at most (0: all)")
    r.add_argument("--args", action="store_true",
                   help="record every argument, strides and devices too (what `replay` needs)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    r.set_defaults(func=_record)

    q = sub.add_parser("request", help="ask a running process armed with SGLANG_PROFILE_SHAPES=on_request "
                                        "to record passes (or --stop, --status)")
    q.add_argument("pid", type=int, help="the process (each TP rank's scheduler, for SGLang)")
    q.add_argument("--passes", type=int, default=10, metavar="N", help="logged passes to record (0: until --stop)")
    q.add_argument("--phases", metavar="A,B", help="only passes with these phase labels")
    q.add_argument("--skip", type=int, default=0, metavar="N", help="passes to let by first")
    q.add_argument("-o", "--output", help="records file (default: shapes-<time>-rank<N>.jsonl in its folder)")
    q.add_argument("--stop", action="store_true", help="end the running request; its files are complete")
    q.add_argument("--status", action="store_true", help="what the process is doing")
    q.add_argument("--timeout", type=float, default=30.0, metavar="S", help="seconds to wait for the answer")
    q.set_defaults(func=_request)

    h = sub.add_parser("hook", help="the zero-edit start-up hook: install | uninstall | status")
    h.add_argument("action", choices=["install", "uninstall", "status"])
    h.add_argument("--site-dir", help="site-packages folder (default: this Python's)")
    h.set_defaults(func=_hook)

    d = sub.add_parser("demo", help="profile built-in tiny LLM and diffusion models on CPU")
    d.add_argument("--dir", default="shapeprof-demo", help="where the files go (default ./shapeprof-demo)")
    d.add_argument("--decode-steps", type=int, default=4, help="decode passes after the prefill")
    d.add_argument("--steps", type=int, default=50, help="denoising steps per diffusion pass")
    d.set_defaults(func=_demo)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("top", "skip_warmup", "log_n_passes", "decode_steps", "steps", "max_shapes",
                 "min_elements", "max_entries", "passes", "skip"):
        v = getattr(args, name, None)
        if isinstance(v, int) and v < 0:
            print(f"sgl-shapeprof {args.cmd}: --{name.replace('_', '-')} must be >= 0", file=sys.stderr)
            return 2
    try:
        return args.func(args)
    except CommandFailed as e:
        print(f"sgl-shapeprof {args.cmd}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `sgl-shapeprof analyze ... | head`: the reader has what it wanted
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
