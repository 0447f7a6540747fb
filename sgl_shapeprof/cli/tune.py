"""`sgl-shapeprof tune`: which fused-MoE configs the run needed, which are
tuned for a device, how far calls fall back, and the tuner's input lists."""
from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Callable, Dict, List, Optional

from ..analysis.analyze import build
from ..analysis.deployment import inventory
from ..analysis.gemm import gemms
from ..analysis.moe_launch import launch_json
from ..analysis.tunableop import GemmTuned, results_coverage, results_lines
from ..analysis.tune import (CSV_FIELDS, GraphSizes, MoeUse, PhaseCoverage, TuneResult, block_json, coverage_json,
                             csv_rows, deepgemm_json, graph_sizes, phase_group, tune_result, tuner_command,
                             use_json)
from .common import add_filters, fail, scan_files
from .gemm import write_untuned


# the options after FILE and the filters, in --help's order: (flag, add_argument's keywords)
OPTIONS = (
    ("--device", dict(required=True, metavar="NAME",
                      help="the GPU as SGLang names it (NVIDIA H200; a unique end of a known name: H200)")),
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
    srcs = scan_files("tune", args, args.files)
    sigs = build(srcs).signatures
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
        json.dump({"device": r.device, "triton": r.triton, "sglang": r.sglang, "roots": r.roots,
                   "coverage": coverage_json(r.moe_coverage),
                   "keys": [use_json(u, r.device, r.triton) for u in r.moe],
                   "tuner_commands": tuners,
                   "block_gemm": {"folders": r.gemm_folders, "coverage": coverage_json(r.block_coverage),
                                  "keys": [block_json(u, r.device) for u in r.block]},
                   "deepgemm": [deepgemm_json(u) for u in r.deepgemm],
                   "launches": [launch_json(x) for x in r.launches],
                   "tunableop": None if gemm_cov is None else tunableop_json(gemm_cov, args.tunableop_results),
                   "cuda_graph_bs": None if sizes is None else graph_sizes_json(sizes),
                   "inventory": inventory(srcs)},
                  sys.stdout, indent=1)
        print()
    elif args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(CSV_FIELDS)
        w.writerows(csv_rows(r.moe, r.device, r.triton))
    else:
        print_text(r, tuners, srcs)
        if gemm_cov is not None:
            print_tunableop(gemm_cov, args.tunableop_results)
        if sizes is not None:
            print_graph_sizes(sizes)
    if args.tunableop_untuned:
        todo = [c.gemm for c in (gemm_cov or results_coverage(gemms(sigs), {})) if c.kernel is None]
        write_untuned(todo, args.tunableop_untuned, force=args.force)
    if args.fail_under is not None:
        return gate(r, gemm_cov, args.fail_under)
    return 0


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


def tunable_calls(cov: List[GemmTuned]) -> "tuple[int, int]":
    """(calls of GEMMs TunableOp tunes, calls of those the results tune)."""
    n = sum(c.gemm.count for c in cov if c.line)
    return n, sum(c.gemm.count for c in cov if c.line and c.kernel)


def tunableop_json(cov: List[GemmTuned], path: str) -> dict:
    n, t = tunable_calls(cov)
    return {"results": path, "calls": n, "tuned_calls": t,
            "gemms": [{"operation": c.gemm.operation, "m": c.gemm.m, "n": c.gemm.n, "k": c.gemm.k,
                       "batch": c.gemm.batch, "count": c.gemm.count, "entry": c.line, "kernel": c.kernel,
                       "note": c.note} for c in cov]}


def print_tunableop(cov: List[GemmTuned], path: str) -> None:
    o = sys.stdout.write
    n, t = tunable_calls(cov)
    ok = [c for c in cov if c.line]
    o(f"\nTunableOp ({path}): {sum(1 for c in ok if c.kernel)} of {len(ok)} distinct GEMMs tuned, "
      f"{_pct(t, n)} of their {n:,} calls\n")
    for c in sorted(ok, key=lambda c: (c.kernel is not None, -c.gemm.total_flops))[:20]:
        g = c.gemm
        o(f"  {'tuned' if c.kernel else 'NOT TUNED':>9} {g.count:>9,}x  {c.line}"
          + (f"  ({c.note})" if c.note else "") + "\n")
    if len(ok) > 20:
        o(f"  ... {len(ok) - 20} more (--json)\n")
    skipped = len(cov) - len(ok)
    if skipped:
        o(f"  ({skipped} GEMMs TunableOp does not tune: mixed or integer dtypes, _scaled_mm, custom ops)\n")


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


def print_text(r: TuneResult, tuners: List[str], srcs) -> None:
    o = sys.stdout.write
    if not r.moe:
        o("no fused-MoE calls (sglang::inplace_fused_experts, outplace_fused_experts) in "
          + ", ".join(s.path for s in srcs) + "\n")
    else:
        o(f"fused-MoE configs for device_name={r.device}, "
          f"Triton {r.triton or '(unknown: every folder, newest first)'}\n")
        o("looked in: " + "; ".join(r.roots) + ("" if r.sglang else "  (SGLang not importable: files matched "
                                                "by the fields their names spell)") + "\n")
        print_keys(r.moe, r.triton, lambda u: f"E={u.key.e},N={u.key.n},device_name={r.device},...")
        print_coverage(r.moe_coverage)
    if r.launches:
        print_launches(r)
    if tuners:
        o("\ntune the keys whose calls run another M's config (SGLang's tuner; batch sizes: observed M, "
          "most called first):\n")
        for t in tuners:
            o(f"  {t}\n")
        o("  (the script derives E and N from --model, --tp-size and --ep-size: pick those that give the "
          "keys above; it writes the file in its working directory)\n")
    if r.block:
        o(f"\nblock-quantized GEMM configs for device_name={r.device} (SGLang's Triton w8a8 block GEMMs, "
          "recorded by the start-up hook)\n")
        o("looked in: " + "; ".join(r.gemm_folders) + "\n")
        print_keys(r.block, None, lambda u: f"{u.key.text} for {r.device}")
        print_coverage(r.block_coverage)
        o("\n(N, K) pairs to tune (block-GEMM tuner; DeepGEMM compiles per N and K), with the observed M, "
          "most called first:\n")
        print_pairs(r.block)
    if r.deepgemm:
        o("\nDeepGEMM block-FP8 GEMMs (sglang::deep_gemm_fp8_fp8_bf16_nt): DeepGEMM compiles a kernel per "
          "N and K at run time, no config file to tune; the (N, K) pairs to pre-compile, with the observed M, "
          "most called first:\n")
        print_pairs(r.deepgemm)
        for a in sorted({a for u in r.deepgemm for a in u.assumed}):
            o(f"  assumed: {a}\n")


VERDICTS = {"tuned": "the tuned config", "default": "SGLang's default config: an untuned shape",
            "other": "a config that is neither the tuned file's nor the default",
            "unknown": "(what SGLang would pick is not known here)"}


def print_launches(r: TuneResult) -> None:
    """Per distinct fused-MoE kernel launch: the config it ran, and whose."""
    o = sys.stdout.write
    o(f"\nfused-MoE kernel launches: the config each ran (SGLang's lookup for device_name={r.device})\n")
    for x in r.launches:
        key = f"E={x.e},N={x.n if x.n is not None else '?'},dtype={x.dtype or 'none'}"
        if x.block_shape:
            key += f",block_shape=[{x.block_shape[0]}, {x.block_shape[1]}]"
        m = "?" if x.m is None else x.m
        top = "?" if x.top_k is None else x.top_k
        o(f"  {key} {x.gemm:<4} M={m} top-k={top} ({phase_group(x.phase)}, {x.calls:,} launch{'es' if x.calls != 1 else ''}): "
          f"{VERDICTS[x.verdict]}: {x.config_text()}\n")
        if x.verdict == "tuned":
            o(f"      from {x.file} (tuned for M={x.tuned_m})\n")
        elif x.verdict == "other" and x.expected is not None:
            whose = f"{x.file}, tuned for M={x.tuned_m}" if x.file else "SGLang's default, no tuned file"
            o(f"      SGLang would pick {x.config_text(x.expected)} ({whose})\n")
        for a in x.assumed:
            o(f"      assumed: {a}\n")
    untuned = sum(x.calls for x in r.launches if x.verdict == "default")
    total = sum(x.calls for x in r.launches)
    o(f"  {untuned:,} of {total:,} launches ran SGLang's default config\n")


def print_pairs(uses: List[MoeUse]) -> None:
    for u in uses:
        k = u.key
        sys.stdout.write(f"  N={k.n} K={k.k} block={k.block_shape[0]}x{k.block_shape[1]} {k.dtype}: "  # type: ignore[attr-defined]
                         + " ".join(str(m) for m, _ in u.ms()) + f"  ({u.total:,} calls)\n")


def print_keys(uses: List[MoeUse], triton: Optional[str], missing: Callable[[MoeUse], str]) -> None:
    o = sys.stdout.write
    for u in uses:
        lk = u.lookup
        o(f"\n{u.key.text}  K={u.hidden}  {u.total:,} calls  ({', '.join(u.operations)})\n")
        if lk is not None and lk.path:
            o(f"  tuned: {lk.path}\n")
            if lk.other_version:
                o(f"  (from Triton {lk.version}'s folder: none for Triton {triton}; SGLang warns "
                  "performance may be sub-optimal)\n")
        else:
            o(f"  NOT TUNED: no {lk.name if lk and lk.name else missing(u)}; SGLang runs its default config\n")
        if u.down is not None:
            if u.down.path:
                o(f"  down GEMM: {u.down.path}\n")
            elif lk is not None and lk.path:
                o(f"  down GEMM: no {u.down.name or 'down-projection file'}; SGLang reuses the up config "
                  "for it, without TMA\n")
        for a in u.assumed:
            o(f"  assumed: {a}\n")
        o(f"  {'phase':<10} {'M':>7} {'calls':>10} {'share':>6} {'tuned M':>8} {'distance':>9}\n")
        total = u.total or 1
        for phase, ms in sorted(u.calls.items()):
            for m, c in sorted(ms.items(), key=lambda x: (-x[1], x[0])):
                t = u.nearest(m)
                dist = "-" if t is None else ("exact" if t == m else f"{t - m:+d}")
                o(f"  {phase:<10} {m:>7} {c:>10,} {100 * c / total:>5.1f}% {('-' if t is None else t):>8} "
                  f"{dist:>9}\n")


def print_coverage(cov: Dict[str, PhaseCoverage]) -> None:
    o = sys.stdout.write
    o("\ncoverage:\n")
    for p, c in sorted(cov.items(), key=lambda x: (x[0] == "all", x[0])):
        line = (f"  {p}: {c.calls:,} calls; {_pct(c.tuned, c.calls)} on tuned configs, "
                f"{_pct(c.exact, c.calls)} on one tuned for their own M")
        if c.other_m:
            line += (f"; {_pct(c.other_m, c.calls)} of {p} calls run a config tuned for another M "
                     f"(mean distance {c.distance / c.other_m:.1f})")
        if c.calls - c.tuned:
            line += f"; {_pct(c.calls - c.tuned, c.calls)} on SGLang's default config"
        o(line + "\n")


def graph_sizes_json(g: GraphSizes) -> dict:
    return {"share": g.share, "replays": {str(k): v for k, v in sorted(g.replays.items())},
            "unused": g.unused,
            "graphs": [{"size": x.size, "replays": x.replays, "real_known": x.known,
                        "real_sizes": {str(r): n for r, n in sorted(x.served.items())},
                        "mean_real": x.mean_real, "padding": x.padding}
                       for _, x in sorted(g.graphs.items())],
            "real_unknown": g.unknown, "unweighed": g.unweighed,
            "eager_decode": {str(k): v for k, v in sorted(g.eager.items())},
            "unit": g.unit, "batch_sizes": {str(k): v for k, v in sorted(g.batches.items())},
            "suggested": g.suggested, "padding_now": g.waste_now, "padding_suggested": g.waste_suggested,
            "above_now": g.above(sorted(g.graphs)), "above_suggested": g.above(g.suggested)}


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


def print_graph_sizes(g: GraphSizes) -> None:
    o = sys.stdout.write
    o("\nCUDA-graph batch sizes (decode):\n")
    if not g.graphs:
        o("  no decode graph captured or replayed in these files\n")
    else:
        if g.unused:
            o("  captured, never replayed: " + " ".join(map(str, g.unused)) + "\n")
        o("  graph size   replays   real size known   mean real size   padding\n")
        for _, x in sorted(g.graphs.items()):
            if x.replays:
                o(f"  {x.size:>10}  {x.replays:>8,}  {x.known:>16,}  "
                  + (f"{x.mean_real:>15.1f}  {100 * x.padding:>7.1f}%" if x.known else f"{'-':>15}  {'-':>8}")
                  + "\n")
        if g.unknown:
            o(f"  {g.unknown:,} replays without their real batch size (recorded by an older version, or "
              "a graph runner that does not say it): their padding is not known\n")
        if g.unweighed:
            o("  left out: the replays of sizes " + " ".join(map(str, g.unweighed)) + ", whose captures are "
              "not in the records, cannot be weighed against the eager fused-MoE calls\n")
    if not g.batches:
        o("  no real decode batch size is known (no replay with its real size, no eager fused-MoE decode call)\n")
        return
    total = sum(g.batches.values())
    what = ("graph replays" if g.unit == "replays" else
            "fused-MoE calls: eager ones, and replays times their graph's fused-MoE calls")
    o(f"  real decode batch sizes, {_num(total)} {what}: "
      + ", ".join(f"{b}:{_num(n)}" for b, n in sorted(g.batches.items(), key=lambda x: (-x[1], x[0]))[:20]) + "\n")
    o(f"  --cuda-graph-bs covering {g.share:g}% of them: {' '.join(map(str, g.suggested))}\n")
    if g.graphs and g.waste_now is None:
        o(f"  none of them fits a captured size (the largest is {max(g.graphs)}): they ran without a graph\n")
    for what, sizes, w in (("the captured sizes", sorted(g.graphs), g.waste_now),
                           ("that list", g.suggested, g.waste_suggested)):
        if w is not None:
            above = g.above(sizes)
            o(f"  padding on {what}: {100 * w:.1f}% of the padded rows"
              + (f"; {100 * above:.1f}% of the calls are larger than its largest size and run without a graph"
                 if above else "") + "\n")