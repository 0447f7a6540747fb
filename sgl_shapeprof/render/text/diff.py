"""`sgl-shapeprof diff` as text: signatures only in A, only in B, and count changes."""
from __future__ import annotations

from typing import List, Optional, TextIO

from ...analysis.diff import Diff
from ...records.scan import Source
from ...records.signature import tell_apart


def _names(srcs: List[Source]) -> str:
    return " + ".join(f"{s.path} ({s.worker.name})" if s.worker is not None and s.worker.several else s.path
                      for s in srcs)


def print_diff(d: Diff, out: TextIO, top: Optional[int] = None) -> None:
    w = out.write
    ca, cb = sum(s.calls for s in d.a), sum(s.calls for s in d.b)
    w(f"A: {_names(d.a)} ({ca:,} calls)\nB: {_names(d.b)} ({cb:,} calls)\n")
    if not d.with_outputs:
        w("compared by operation and inputs (a deduplicated file from an older sgl_shapeprof "
          "does not keep its repeats' outputs)\n")
    if not d.differs:
        w("no differences" + (" in signatures" if d.shapes_only else "") + "\n")
        if not d.times and not d.kernel_times:
            return

    def rows(items):
        return items[:top] if top else items
    for title, sigs in (("only in A", d.only_a), ("only in B", d.only_b)):
        if sigs:
            w(f"\nSignatures {title} ({len(sigs)}):\n")
            for s, apart in zip(rows(sigs), tell_apart(rows(sigs), d.every)):
                ph = f" [{s.phase}]" if s.phase is not None else ""
                w(f"  {s.count:>10,}x  {s.operation}{ph}  {s.text}{f'  ({apart})' if apart else ''}\n")
    if d.ops and not d.shapes_only:
        w(f"\nCall counts per operation that changed ({len(d.ops)}):\n")
        w(f"  {'A':>12} {'B':>12} {'change':>9}  operation\n")
        for op, x, y in rows(d.ops):
            ch = f"{(y - x) / x * 100:+.0f}%" if x else "new"
            w(f"  {x:>12,} {y:>12,} {ch:>9}  {op}\n")
    for times, what in ((d.kernel_times, "GPU kernel time per call of the signatures whose kernels both "
                         "recorded ({n}; most time moved first: the change times A's calls; CUPTI, each call's "
                         "kernels summed, FORMAT.md Kernels)"),
                        (d.times, "Measured time per call of the signatures timed in both ({n}; most time "
                         "moved first: the change times A's calls; wall time on the calling thread, "
                         "FORMAT.md time_us)")):
        if not times:
            continue
        w(f"\n{what.format(n=len(times))}:\n")
        w(f"  {'A us':>10} {'B us':>10} {'change':>8}  operation  shapes\n")
        shown = rows(times)
        for (s, x, y), apart in zip(shown, tell_apart([s for s, _, _ in shown], d.every)):
            ch = f"{(y - x) / x * 100:+.0f}%" if x else "-"
            w(f"  {x / 1000:>10.3f} {y / 1000:>10.3f} {ch:>8}  {s.operation}  {s.text}"
              f"{f'  ({apart})' if apart else ''}\n")
    if d.changed and not d.shapes_only:
        w(f"\nSignatures whose count changed ({len(d.changed)}):\n")
        shown = rows(d.changed)
        for (s, x, y), apart in zip(shown, tell_apart([s for s, _, _ in shown], d.every)):
            w(f"  {x:>10,} -> {y:<10,} {s.operation}  {s.text}{f'  ({apart})' if apart else ''}\n")
