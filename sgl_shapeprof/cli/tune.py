"""`sgl-shapeprof tune`: which fused-MoE configs the run needed, which are
tuned for a device, how far calls fall back, and the tuner's input lists."""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from ..analysis.analyze import build
from ..analysis.gemm import gemms
from ..analysis.tunableop import GemmTuned, results_coverage, results_lines, tunable_calls
from ..analysis.tune.flashinfer_bench import bench_set, files
from ..analysis.tune.graphs import graph_sizes
from ..analysis.tune.moe import tuner_command
from ..analysis.tune.result import TuneResult, tune_result
from ..render.csvout import tune_csv
from ..render.jsonout import tune_json, workload_traces_json, write_json, write_jsonl
from ..render.text.tune import tune_text
from .common import add_filters, fail, open_new, scan_files
from .gemm import write_untuned


# the options after FILE and the filters, in --help's order: (flag, add_argument's keywords)
OPTIONS = (
    ("--device", dict(metavar="NAME", help="the GPU as SGLang names it (NVIDIA H200; a unique end of a known "
                                           "name: H200); required but with --flashinfer-bench alone")),
    ("--configs", dict(metavar="DIR", help="your own config files, looked in before SGLang's (a flat folder, "
                                           "or SGLANG_MOE_CONFIG_DIR's layout: DIR/configs/triton_X_Y_Z/)")),
    ("--triton", dict(metavar="VERSION", help="the server's Triton version, whose folder SGLang reads first "
                                              "(default: this environment's)")),
    ("--model", dict(metavar="PATH", help="the model, for the tuner's command line")),
    ("--tp-size", dict(type=int, metavar="N", help="the server's TP size, for the tuner's command line")),
    ("--ep-size", dict(type=int, metavar="N", help="the server's EP size, for the tuner's command line")),
    ("--tunableop-results", dict(metavar="FILE.csv", help="a PyTorch TunableOp results file "
                                                          "(tunableop_results*.csv): which of the run's GEMMs "
                                                          "it tunes")),
    ("--tunableop-untuned", dict(metavar="FILE.csv", help="write the run's GEMMs that --tunableop-results does "
                                                          "not tune (all without it) as TunableOp untuned "
                                                          "entries")),
    ("--flashinfer-bench", dict(metavar="DIR", help="write the FlashInfer calls as a flashinfer-bench dataset in "
                                                     "DIR (new or empty): definitions by FlashInfer's own "
                                                     "fi_trace, one workload per shape that ran; needs "
                                                     "FlashInfer importable. Alone (no --device): only that")),
    ("--force", dict(action="store_true", help="let --tunableop-untuned replace an existing file")),
    ("--fail-under", dict(type=float, metavar="P",
                          help="exit 1 when fewer than P%% of the fused-MoE calls (and, with "
                               "--tunableop-results, of the GEMM calls TunableOp tunes) run on a tuned config")),
    ("--cuda-graph-bs", dict(nargs="?", type=float, const=95.0, metavar="P",
                             help="CUDA-graph batch sizes: the captured decode sizes used and each one's "
                                  "padding, and the fewest sizes covering P%% (default 95) of the real decode "
                                  "batch sizes (replays and eager calls), with the padding each list costs")),
    ("--csv", dict(action="store_true", help="CSV on stdout: one row per fused-MoE key, phase and M")),
    ("--json", dict(action="store_true", help="JSON on stdout")),
)


def add_parser(sub: "argparse._SubParsersAction") -> None:
    t = sub.add_parser("tune", help="tuned-config coverage of the fused-MoE calls, and the tuner's inputs")
    t.add_argument("files", nargs="+", metavar="FILE", help="records files, globs, or folders (searched with their subfolders)")
    add_filters(t)
    for flag, kw in OPTIONS:
        t.add_argument(flag, **kw)  # type: ignore[arg-type]
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for flag in ("fail_under", "cuda_graph_bs"):
        v = getattr(args, flag)
        if v is not None and not 0 <= v <= 100:
            raise fail(f"--{flag.replace('_', '-')} takes a percentage, 0 to 100")
    if args.device is None and not args.flashinfer_bench:
        raise fail("--device NAME is required (the GPU as SGLang names it), unless --flashinfer-bench alone")
    srcs = scan_files("tune", args, args.files)
    sigs = build(srcs).signatures
    if args.flashinfer_bench:
        write_flashinfer_bench(sigs, args.flashinfer_bench)
        if args.device is None:
            return 0
    try:
        r = tune_result(sigs, args.device, args.configs, args.triton)
    except ValueError as e:
        raise fail(str(e)) from None
    gemm_cov: Optional[List[GemmTuned]] = None
    if args.tunableop_results:
        try:
            with open(args.tunableop_results, encoding="utf-8") as f:
                tuned = results_lines(f.read())
        except (OSError, UnicodeDecodeError) as e:
            raise fail(f"cannot read {args.tunableop_results}: {getattr(e, 'strerror', None) or e}") from None
        except ValueError as e:
            raise fail(f"{args.tunableop_results}: {e}") from None
        gemm_cov = results_coverage(gemms(sigs), tuned)
    sizes = graph_sizes(srcs, r.moe, args.cuda_graph_bs) if args.cuda_graph_bs is not None else None
    tuners = [tuner_command(u, args.model, args.tp_size, args.ep_size) for u in r.moe
              if any(u.nearest(m) != m for m, _ in u.ms())]
    if args.json:
        write_json(tune_json(r, tuners, srcs, gemm_cov, args.tunableop_results, sizes), sys.stdout)
    elif args.csv:
        tune_csv(r, sys.stdout)
    else:
        tune_text(r, tuners, srcs, sys.stdout, gemm_cov, args.tunableop_results, sizes)
    if args.tunableop_untuned:
        todo = [c.gemm for c in (gemm_cov or results_coverage(gemms(sigs), {})) if c.kernel is None]
        write_untuned(todo, args.tunableop_untuned, force=args.force)
    if args.fail_under is not None:
        return gate(r, gemm_cov, args.fail_under)
    return 0


def write_flashinfer_bench(sigs, out_dir: str) -> None:
    """--flashinfer-bench DIR: a new (or empty) folder; said on stderr what
    was written, and what could not be."""
    b = bench_set(sigs)
    if not b.definitions:
        why = max(b.skipped.items(), key=lambda x: x[1])[0] if b.skipped else "the records have no FlashInfer calls"
        raise fail(f"--flashinfer-bench: nothing to write: {why}")
    try:
        os.makedirs(out_dir, exist_ok=True)
        if os.listdir(out_dir):
            raise fail(f"--flashinfer-bench {out_dir}: not empty (give a new or empty folder)")
        for rel, kind, body in files(b):
            path = os.path.join(out_dir, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open_new(path, False) as f:
                if kind == "definition":
                    f.write(body)  # type: ignore[arg-type]  # fi_trace's own file
                else:
                    write_jsonl(workload_traces_json(os.path.basename(rel)[:-len(".jsonl")], body), f)  # type: ignore[arg-type]
    except OSError as e:
        raise fail(f"cannot write in {out_dir}: {e.strerror or e}") from None
    n_work = sum(len(ws) for ws in b.workloads.values())
    print(f"wrote {len(b.definitions)} flashinfer-bench definitions (by FlashInfer's fi_trace) and {n_work} "
          f"workloads to {out_dir}", file=sys.stderr)
    for reason, calls in sorted(b.skipped.items(), key=lambda x: -x[1]):
        print(f"  not written, {calls} call(s): {reason}", file=sys.stderr)


def gate(r: TuneResult, gemm_cov: Optional[List[GemmTuned]], under: float) -> int:
    """--fail-under: 1 when a kind of call is under the share."""
    shares = []
    for what, cov in (("fused-MoE calls", r.moe_coverage), ("block-GEMM calls", r.block_coverage)):
        total = cov.get("all")
        if total is not None and total.calls:
            shares.append((what, total.pct(total.tuned)))
    if gemm_cov is not None:
        n, t = tunable_calls(gemm_cov)
        if n:
            shares.append(("GEMM calls TunableOp tunes", 100.0 * t / n))
    if not shares:
        raise fail("--fail-under: no fused-MoE calls (sglang::inplace_fused_experts, "
                   "outplace_fused_experts), block-GEMM calls or TunableOp GEMMs in the files")
    low = [(what, p) for what, p in shares if p < under]
    for what, p in low:
        print(f"tune: {p:.1f}% of {what} run on tuned configs, under --fail-under {under:g}", file=sys.stderr)
    return 1 if low else 0
