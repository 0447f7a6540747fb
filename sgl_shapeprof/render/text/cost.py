"""`sgl-shapeprof cost` as text: FLOPs and bytes per signature (or operator),
and the roofline time on a device."""
from __future__ import annotations

from typing import Optional, TextIO

from ...analysis.cost import NOT_COUNTED, OUTER, WITHIN, Device, format_time, peaks_text
from ...records.values import human


def cost_text(rows: list, dev: Optional[Device], out: TextIO, top: Optional[int] = None,
              by_op: bool = False) -> None:
    """rows: analysis.cost.ranked_rows's, all of them (the shares are of
    their total); top: show the first top."""
    total = sum((r[4] or 0) * r[1] for r in rows if r[5] not in NOT_COUNTED) or 1.0  # counted once
    all_rows = len(rows)
    if top:
        rows = rows[:top]
    o = out.write
    if dev:
        o(f"roofline on {dev.name} ({peaks_text(dev)}, {dev.bandwidth:g} TB/s): estimated "
          f"{format_time(total)} of operator time over {all_rows} {'operators' if by_op else 'signatures'}"
          " (the larger of FLOPs/peak and bytes/bandwidth per call; views move nothing)\n")
    o(f"{'count':>10} {'FLOP/call':>10} {'bytes/call':>10} {'total FLOP':>10}")
    if dev:
        o(f" {'per call':>9} {'total':>9} {'share':>6} {'bound':>7}")
    o("  operation\n")
    for r in rows:
        op, n, fl, by, sec, bound, sig = r
        o(f"{n:>10,} {human(fl) if fl is not None else '-':>10} {human(by):>10} "
          f"{human((fl or 0) * n):>10}")
        if dev:
            o(f" {format_time(sec):>9} {format_time(sec * n):>9} {100 * sec * n / total:>5.1f}% {bound:>7}")
        o(f"  {op}")
        if sig is not None:
            o(f"  {sig.text}")
        o("\n")
    if len(rows) < all_rows:
        o(f"... {all_rows - len(rows)} more (--top)\n")
    if any(r[5] == WITHIN for r in rows):
        o(f"{WITHIN}: calls made inside another recorded call (a custom op's kernel launching them): their "
          "time is part of that call's, shown but not added to the total\n")
    if any(r[5] == OUTER for r in rows):
        o(f"{OUTER}: calls with no FLOP formula whose work the calls made inside them stand for (the GEMMs "
          "their kernels launched): shown but not added to the total\n")
