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
    o(f"{len(gs)} distinct GEMMs, {human(total)} FLOP in all\n")
    o(f"{'M':>8} {'N':>7} {'K':>7} {'batch':>6} {'dtypes (A,B->out)':>26} {'count':>9} "
      f"{'FLOP/call':>10} {'total':>9} {'share':>6}  operation\n")
    for g in shown:
        dt = f"{g.a_dtype},{g.b_dtype}->{g.out_dtype}"
        grouped = f" (grouped: M rows over {g.groups} weight groups)" if g.groups else ""
        o(f"{g.m:>8} {g.n:>7} {g.k:>7} {g.batch:>6} {dt:>26} {g.count:>9,} {human(g.flops):>10} "
          f"{human(g.total_flops):>9} {100 * g.total_flops / total:>5.1f}%  {g.operation}{grouped}\n")
    if len(shown) < len(gs):
        o(f"... {len(gs) - len(shown)} more (--top)\n")
