"""`sgl-shapeprof diff A B`: what one run (rank, model version, SGLang
version) ran that the other did not, and how the counts moved."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO, Tuple

from .analyze import build, sig_json
from ..records.scan import Signature, Source


@dataclass
class Diff:
    a: List[Source]
    b: List[Source]
    only_a: List[Signature] = field(default_factory=list)
    only_b: List[Signature] = field(default_factory=list)
    changed: List[Tuple[Signature, int, int]] = field(default_factory=list)  # sig, count A, count B
    ops: List[Tuple[str, int, int]] = field(default_factory=list)  # op, calls A, calls B (differing)
    shapes_only: bool = False
    with_outputs: bool = True  # False when a side is deduplicated

    @property
    def differs(self) -> bool:
        return bool(self.only_a or self.only_b or (not self.shapes_only and (self.changed or self.ops)))


def _index(srcs: List[Source], by_phase: bool, with_outputs: bool) -> Dict[tuple, Signature]:
    out: Dict[tuple, Signature] = {}
    for s in build(srcs).signatures:
        k = s.key if with_outputs else s.key[:2] + (s.error is not None,)
        if by_phase:
            k = (k, s.phase)
        m = out.get(k)
        if m is None:
            out[k] = Signature(s.operation, s.inputs, s.outputs, s.error, s.phase if by_phase else None,
                               s.incomplete, s.count, s.records, s.first_call, s.out_elements)
        else:
            m.count += s.count
            m.records += s.records
    return out


def diff(a: List[Source], b: List[Source], by_phase: bool = False, shapes_only: bool = False) -> Diff:
    # A deduplicated file written before signatures held outputs (its summary
    # does not say what a signature is) kept one record per operation and
    # inputs: the outputs of its repeats are not known, compare without them.
    with_outputs = not any(s.deduplicated and not (s.summary or {}).get("signature") for s in a + b)
    ia, ib = _index(a, by_phase, with_outputs), _index(b, by_phase, with_outputs)
    d = Diff(a, b, shapes_only=shapes_only, with_outputs=with_outputs)
    d.only_a = sorted((ia[k] for k in ia.keys() - ib.keys()), key=lambda s: (s.operation, -s.count))
    d.only_b = sorted((ib[k] for k in ib.keys() - ia.keys()), key=lambda s: (s.operation, -s.count))
    d.changed = sorted(((ia[k], ia[k].count, ib[k].count) for k in ia.keys() & ib.keys()
                        if ia[k].count != ib[k].count),
                       key=lambda t: (-abs(t[2] - t[1]), t[0].operation))
    opa: Dict[str, int] = {}
    opb: Dict[str, int] = {}
    for s in ia.values():
        opa[s.operation] = opa.get(s.operation, 0) + s.count
    for s in ib.values():
        opb[s.operation] = opb.get(s.operation, 0) + s.count
    d.ops = sorted(((op, opa.get(op, 0), opb.get(op, 0)) for op in opa.keys() | opb.keys()
                    if opa.get(op, 0) != opb.get(op, 0)), key=lambda t: (-abs(t[2] - t[1]), t[0]))
    return d


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
        return

    def rows(items):
        return items[:top] if top else items
    for title, sigs in (("only in A", d.only_a), ("only in B", d.only_b)):
        if sigs:
            w(f"\nSignatures {title} ({len(sigs)}):\n")
            for s in rows(sigs):
                ph = f" [{s.phase}]" if s.phase is not None else ""
                w(f"  {s.count:>10,}x  {s.operation}{ph}  {s.text}\n")
    if d.ops and not d.shapes_only:
        w(f"\nCall counts per operation that changed ({len(d.ops)}):\n")
        w(f"  {'A':>12} {'B':>12} {'change':>9}  operation\n")
        for op, x, y in rows(d.ops):
            ch = f"{(y - x) / x * 100:+.0f}%" if x else "new"
            w(f"  {x:>12,} {y:>12,} {ch:>9}  {op}\n")
    if d.changed and not d.shapes_only:
        w(f"\nSignatures whose count changed ({len(d.changed)}):\n")
        for s, x, y in rows(d.changed):
            w(f"  {x:>10,} -> {y:<10,} {s.operation}  {s.text}\n")


def diff_json(d: Diff) -> dict:
    return {
        "a": [s.path for s in d.a], "b": [s.path for s in d.b],
        "differs": d.differs,
        "only_in_a": [dict(sig_json(s), operation=s.operation) for s in d.only_a],
        "only_in_b": [dict(sig_json(s), operation=s.operation) for s in d.only_b],
        "count_changes": [dict(sig_json(s), operation=s.operation, count_a=x, count_b=y)
                          for s, x, y in d.changed],
        "operation_changes": [{"operation": op, "calls_a": x, "calls_b": y} for op, x, y in d.ops],
    }
