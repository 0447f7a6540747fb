"""`sgl-shapeprof diff A B`: what one run (rank, model version, SGLang
version) ran that the other did not, and how the counts moved."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from .analyze import build
from ..records.scan import Source
from ..records.signature import Signature
from ..records.values import format_inputs


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
    every: List[Signature] = field(default_factory=list)  # both sides' (what a line may print like)
    # signatures timed on both sides (a timed recording): sig, mean ns per call in A, in B; most
    # time gained or lost over B's calls first
    times: List[Tuple[Signature, float, float]] = field(default_factory=list)
    # the same of GPU kernel time per call, where both recorded kernels (FORMAT.md "Kernels")
    kernel_times: List[Tuple[Signature, float, float]] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.only_a or self.only_b or (not self.shapes_only and (self.changed or self.ops)))


def _index(srcs: List[Source], by_phase: bool, with_outputs: bool, shapes_only: bool) -> Dict[tuple, Signature]:
    out: Dict[tuple, Signature] = {}
    for s in build(srcs).signatures:
        if shapes_only:  # by what a line prints: strides, offsets and arguments aside
            k: tuple = (s.operation, s.text if with_outputs else format_inputs(s.inputs), s.error is not None)
        else:
            k = s.key if with_outputs else s.key[:2] + (s.error is not None,)
        if by_phase:
            k = (k, s.phase)
        m = out.get(k)
        if m is None:
            out[k] = Signature(s.operation, s.inputs, s.outputs, s.error, s.phase if by_phase else None,
                               s.incomplete, s.count, s.records, s.first_call, s.out_elements,
                               args=s.args, graph=s.graph, within=s.within)
            m = out[k]
        else:
            m.count += s.count
            m.records += s.records
        if s.timed:
            m.add_time(s.timed, s.time_ns, s.time_min, s.time_max)
        if s.kernel_calls:
            m.add_kernel_time(s.kernel_calls, s.kernel_ns, s.kernel_min, s.kernel_max)
    return out


def _text(s: Signature) -> Tuple[str, str, str]:
    """Ties' order: the signature's text, never the order of a set of keys
    (a key holding None hashes by address: it changes every run)."""
    return s.key[1:] + (s.phase or "",)


def diff(a: List[Source], b: List[Source], by_phase: bool = False, shapes_only: bool = False) -> Diff:
    # A deduplicated file written before signatures held outputs (its summary
    # does not say what a signature is) kept one record per operation and
    # inputs: the outputs of its repeats are not known, compare without them.
    with_outputs = not any(s.deduplicated and not (s.summary or {}).get("signature") for s in a + b)
    ia, ib = _index(a, by_phase, with_outputs, shapes_only), _index(b, by_phase, with_outputs, shapes_only)
    d = Diff(a, b, shapes_only=shapes_only, with_outputs=with_outputs)
    d.every = list(ia.values()) + [s for k, s in ib.items() if k not in ia]
    d.only_a = sorted((ia[k] for k in ia.keys() - ib.keys()),
                      key=lambda s: (s.operation, -s.count, _text(s)))
    d.only_b = sorted((ib[k] for k in ib.keys() - ia.keys()),
                      key=lambda s: (s.operation, -s.count, _text(s)))
    d.changed = sorted(((ia[k], ia[k].count, ib[k].count) for k in ia.keys() & ib.keys()
                        if ia[k].count != ib[k].count),
                       key=lambda t: (-abs(t[2] - t[1]), t[0].operation, _text(t[0])))
    both = [(ia[k], ia[k].time_ns / ia[k].timed, ib[k].time_ns / ib[k].timed)
            for k in ia.keys() & ib.keys() if ia[k].timed and ib[k].timed]
    d.times = sorted(both, key=lambda t: (-abs(t[2] - t[1]) * t[0].count, t[0].operation, _text(t[0])))
    both = [(ia[k], ia[k].kernel_ns / ia[k].kernel_calls, ib[k].kernel_ns / ib[k].kernel_calls)
            for k in ia.keys() & ib.keys() if ia[k].kernel_calls and ib[k].kernel_calls]
    d.kernel_times = sorted(both, key=lambda t: (-abs(t[2] - t[1]) * t[0].count, t[0].operation, _text(t[0])))
    opa: Dict[str, int] = {}
    opb: Dict[str, int] = {}
    for s in ia.values():
        opa[s.operation] = opa.get(s.operation, 0) + s.count
    for s in ib.values():
        opb[s.operation] = opb.get(s.operation, 0) + s.count
    d.ops = sorted(((op, opa.get(op, 0), opb.get(op, 0)) for op in opa.keys() | opb.keys()
                    if opa.get(op, 0) != opb.get(op, 0)), key=lambda t: (-abs(t[2] - t[1]), t[0]))
    return d

