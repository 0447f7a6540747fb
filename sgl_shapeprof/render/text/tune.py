"""`sgl-shapeprof tune` as text: per fused-MoE key its file and the tuned M
each call falls back to, the coverage, the config each kernel launch ran,
the tuner's command lines, the block-quantized and DeepGEMM GEMMs, and,
where asked, TunableOp's coverage and the CUDA-graph batch sizes."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, TextIO

from ...analysis.tunableop import GemmTuned, tunable_calls
from ...analysis.tune.coverage import PhaseCoverage
from ...analysis.tune.graphs import GraphSizes
from ...records.phases import DECODE
from ...analysis.tune.moe import MoeUse, phase_group
from ...analysis.tune.result import TuneResult
from ...records.scan import Source


def tune_text(r: TuneResult, tuners: List[str], srcs: List[Source], out: TextIO,
              gemm_cov: Optional[List[GemmTuned]] = None, results_path: str = "",
              sizes: Optional[GraphSizes] = None) -> None:
    """The whole text: the result, then TunableOp's coverage (gemm_cov, of
    results_path) and the CUDA-graph batch sizes where they were asked for."""
    print_text(r, tuners, srcs, out)
    if gemm_cov is not None:
        print_tunableop(gemm_cov, results_path, out)
    if sizes is not None:
        print_graph_sizes(sizes, out)
    elif not r.moe and not r.library_moe and any(DECODE in s.eager_sizes or s.graphs for s in srcs):
        # a dense model's profile: what tune can still say of it is its decode batches
        out.write("the decode batch sizes that ran, and the CUDA-graph sizes that cover them: --cuda-graph-bs\n")


def print_tunableop(cov: List[GemmTuned], path: str, out: TextIO) -> None:
    o = out.write
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


def print_text(r: TuneResult, tuners: List[str], srcs: List[Source], out: TextIO) -> None:
    o = out.write
    if not r.moe and r.library_moe:
        pass  # the kernel libraries' fused MoE below
    elif not r.moe:
        o("no fused-MoE calls (sglang::inplace_fused_experts, outplace_fused_experts) in "
          + ", ".join(s.path for s in srcs) + "\n")
    else:
        o(f"fused-MoE configs for device_name={r.device}, "
          f"Triton {r.triton or '(unknown: every folder, newest first)'}\n")
        o("looked in: " + "; ".join(r.roots) + ("" if r.sglang else "  (SGLang not importable: files matched "
                                                "by the fields their names spell)") + "\n")
        print_keys(r.moe, r.triton, lambda u: f"E={u.key.e},N={u.key.n},device_name={r.device},...", out)
        print_coverage(r.moe_coverage, out)
    if r.launches:
        print_launches(r, out)
    if r.library_moe:
        print_library_moe(r, out)
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
        print_keys(r.block, None, lambda u: f"{u.key.text} for {r.device}", out)
        print_coverage(r.block_coverage, out)
        o("\n(N, K) pairs to tune (block-GEMM tuner; DeepGEMM compiles per N and K), with the observed M, "
          "most called first:\n")
        print_pairs(r.block, out)
    if r.deepgemm:
        o("\nDeepGEMM block-FP8 GEMMs (sglang::deep_gemm_fp8_fp8_bf16_nt): DeepGEMM compiles a kernel per "
          "N and K at run time, no config file to tune; the (N, K) pairs to pre-compile, with the observed M, "
          "most called first:\n")
        print_pairs(r.deepgemm, out)
        for a in sorted({a for u in r.deepgemm for a in u.assumed}):
            o(f"  assumed: {a}\n")
    if r.deep_gemm_kernels:
        o("\nDeepGEMM's own GEMMs (torch.ops.deep_gemm): DeepGEMM compiles a kernel per function, N, K and "
          "groups at run time (M is an argument), and SGLang's start-up warm-up compiles each over a list of M; "
          "the kernels to pre-compile, with the observed M (min-max), most called first:\n")
        for u in r.deep_gemm_kernels:
            ms = sorted(m for m, _ in u.ms())
            o(f"  {u.key.text}: M {ms[0]}-{ms[-1]} ({len(ms)} distinct)  ({u.total:,} calls)\n")
        for a in sorted({a for u in r.deep_gemm_kernels for a in u.assumed}):
            o(f"  {a}\n")


VERDICTS = {"tuned": "the tuned config", "default": "SGLang's default config: an untuned shape",
            "other": "a config that is neither the tuned file's nor the default",
            "unknown": "(what SGLang would pick is not known here)"}


def print_launches(r: TuneResult, out: TextIO) -> None:
    """Per distinct fused-MoE kernel launch: the config it ran, and whose."""
    o = out.write
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


def print_library_moe(r: TuneResult, out: TextIO) -> None:
    """Kernel libraries' fused MoE (FlashInfer's trtllm_*_moe): no config
    file to tune (FlashInfer autotunes its kernels at run time), but the
    shapes to tune or benchmark them for, and the tokens per call that ran."""
    o = out.write
    o("\nkernel libraries' fused-MoE calls (FlashInfer's trtllm: it picks its kernels at run time, no "
      "config file): each shape, and the tokens per call (M) that ran, most called first:\n")
    for g in r.library_moe:
        experts = "?" if g.experts is None else g.experts
        local = f" (local {g.local_experts})" if g.local_experts is not None and g.local_experts != g.experts else ""
        o(f"  {g.operation} E={experts}{local} H={g.hidden} I={g.intermediate} up={g.up_width} "
          f"top-k={g.top_k} dtype={g.dtype or '?'}: {g.calls:,} call{'s' if g.calls != 1 else ''}\n")
        rows = sorted(g.tokens.items(), key=lambda x: (-x[1], x[0][1]))
        o("      M: " + ", ".join(f"{m} ({phase_group(p)}, {n:,})" for (p, m), n in rows[:24]) +
          (", ..." if len(rows) > 24 else "") + "\n")


def print_pairs(uses: List[MoeUse], out: TextIO) -> None:
    for u in uses:
        k = u.key
        out.write(f"  N={k.n} K={k.k} block={k.block_shape[0]}x{k.block_shape[1]} {k.dtype}: "  # type: ignore[attr-defined]
                         + " ".join(str(m) for m, _ in u.ms()) + f"  ({u.total:,} calls)\n")


def print_keys(uses: List[MoeUse], triton: Optional[str], missing: Callable[[MoeUse], str], out: TextIO) -> None:
    o = out.write
    for u in uses:
        lk = u.lookup
        took = (f", {u.kernel_ns / 1e6:,.3f} ms of GPU kernels over {u.kernel_calls:,}" if u.kernel_calls else
                f", {u.time_ns / 1e6:,.3f} ms measured over {u.timed:,}" if u.timed else "")
        o(f"\n{u.key.text}  K={u.hidden}  {u.total:,} calls{took}  ({', '.join(u.operations)})\n")
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


def print_coverage(cov: Dict[str, PhaseCoverage], out: TextIO) -> None:
    o = out.write
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


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


def print_graph_sizes(g: GraphSizes, out: TextIO) -> None:
    o = out.write
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
        o("  no real decode batch size is known (no replay with its real size, no eager decode pass with its "
          "size, no eager fused-MoE decode call)\n")
        return
    total = sum(g.batches.values())
    what = {"replays": "graph replays",
            "passes": f"decode passes ({_num(sum(g.eager.values()))} eager, "
                      f"{_num(total - sum(g.eager.values()))} graph replays)"}.get(
        g.unit, "fused-MoE calls: eager ones, and replays times their graph's fused-MoE calls")
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
