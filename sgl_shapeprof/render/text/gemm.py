"""`sgl-shapeprof gemm` as text: every matrix multiply as M, N, K, batch,
dtypes, count, FLOPs."""
from __future__ import annotations

from typing import List, Optional, TextIO

from ...analysis.gemm import GEMM_OPS, Gemm
from ...records.scan import Source
from ...records.values import human


def gemm_text(gs: List[Gemm], srcs: List[Source], out: TextIO, top: Optional[int] = None) -> None:
    """gs: all the GEMMs (the shares are of their FLOPs); top: show the first top."""
    o = out.write
    shown = gs[:top] if top else gs
    if not gs:
        names = set().union(*(s.seen_operations for s in srcs)) if srcs else set()
        o("no matrix multiplies (" + ", ".join(f"aten.{k}" for k in GEMM_OPS) + ") in "
          + ", ".join(s.path for s in srcs) + (f"; it has {len(names)} other operations"
                                                 " (name custom GEMM ops with --op NAME)" if names else "")
          + "\n")
        return
    total = sum(g.total_flops for g in gs) or 1
    timed = any(g.measured for g in gs)
    kernels = any(g.kernel_calls for g in gs)
    roofline = any(g.roofline_us is not None for g in gs)
    o(f"{len(gs)} distinct GEMMs, {human(total)} FLOP in all\n")
    if timed:
        o(("(us/call and TFLOP/s: GPU kernel time per call, each call's kernels summed (CUPTI, FORMAT.md "
           "Kernels), where its kernels were recorded, else " if kernels else "(us/call and TFLOP/s: ")
          + "measured wall time per call on the calling thread (FORMAT.md time_us); "
          "on a GPU a launch's, not its kernel's, unless recorded with sync"
          + ("; x roofline: that time over cost's roofline for the shape" if roofline else "") + ")\n")
    o(f"{'M':>8} {'N':>7} {'K':>7} {'batch':>6} {'dtypes (A,B->out)':>26} {'count':>9} "
      f"{'FLOP/call':>10} {'total':>9} {'share':>6}  "
      + (f"{'us/call':>10} {'TFLOP/s':>8} " if timed else "")
      + (f"{'x roofline':>10} " if timed and roofline else "") + "operation\n")
    for g in shown:
        dt = f"{g.a_dtype},{g.b_dtype}->{g.out_dtype}"
        grouped = f" (grouped: M rows over {g.groups} weight groups)" if g.groups else ""
        if g.experts:
            grouped += f" (E {g.experts}" + (f", top-{g.top_k}: M = tokens x {g.top_k})" if g.top_k else ")")
        if g.b_scaling:
            grouped += f" (B scaled {g.b_scaling})"
        measured = ""
        if timed:
            us, tf = g.us_per_call, g.tflops
            measured = (f"{us:>10.3f} {tf:>8.3f} " if us is not None and tf is not None
                        else f"{'-':>10} {'-':>8} ")
            if roofline:
                measured += (f"{us / g.roofline_us:>10.1f} " if us is not None and g.roofline_us
                             else f"{'-':>10} ")
        o(f"{g.m:>8} {g.n:>7} {g.k:>7} {g.batch:>6} {dt:>26} {g.count:>9,} {human(g.flops):>10} "
          f"{human(g.total_flops):>9} {100 * g.total_flops / total:>5.1f}%  {measured}{g.operation}{grouped}\n")
    if len(shown) < len(gs):
        o(f"... {len(gs) - len(shown)} more (--top)\n")
