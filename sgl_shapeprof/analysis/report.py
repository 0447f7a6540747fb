"""`sgl-shapeprof report`'s data: what failed, what ran how often, with how
many shapes, where a roofline puts the GPU time, prefill vs decode, the
GEMMs. render/html.py draws it as one self-contained HTML page."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .analyze import Analysis, OpView, filters_text, passes_of
from .cost import Cost, Device, costs
from .deployment import inventory
from .gemm import Gemm, gemms
from .tune.result import TuneResult
from ..records.scan import Source
from ..records.signature import Signature

TOP = 30
NO_PHASE = "(no phase)"


@dataclass
class FileRow:
    """A records file, as the page's header lists it."""
    source: Source
    passes: int        # forward passes it stands for (a deduplicated file: those it logged)
    notes: List[str]


@dataclass
class OpTime:
    """One operator's estimated GPU time, over its signatures."""
    operation: str
    seconds: float
    calls: int
    bound: str  # where most of its time goes: memory or compute


@dataclass
class Times:
    """Operators by estimated time: those shown, and the rest summed up."""
    shown: List[OpTime]
    hidden: int            # operators not shown
    hidden_seconds: float
    total: float


@dataclass
class PhaseCalls:
    phases: List[str]                   # the busiest first, NO_PHASE last
    operations: List[str]               # each phase's most called, taken in turn
    counts: Dict[str, Dict[str, int]]   # phase -> operation -> calls


@dataclass
class Report:
    """What the page shows, section by section."""
    analysis: Analysis
    device: Device
    filters: str
    files: List[FileRow]
    inventory: List[str]
    errors: List[Signature]          # in call order
    calls: List[OpView]              # operators by call count
    labels: List[str]                # the files' labels when there are several: calls stack per file
    times: Times
    shapes: List[Tuple[OpView, int]]  # operators by distinct shapes, with their number
    phases: Optional[PhaseCalls]     # None: no pass was labelled with a phase
    gemms: List[Gemm]
    tune: Optional[TuneResult]
    costly: List[Cost]               # signatures by estimated time
    cost_total: float                # every signature's estimated time: costly's shares are of it
    phased: bool                     # some signature has a phase


def report(a: Analysis, dev: Device, tune: Optional[TuneResult] = None) -> Report:
    """The page's data, times estimated on dev; with tune, its tuned-config coverage."""
    # a call that raised did no work: no time for it
    cs = costs([s for s in a.signatures if s.error is None and not s.incomplete], dev)
    ranks = len({s.rank for s in a.sources}) > 1  # a lone "rank 0" says nothing
    return Report(
        analysis=a, device=dev, filters=filters_text(a.flt, limit=True),
        files=[FileRow(s, passes_of(s)[3], _source_notes(s, ranks)) for s in a.sources],
        inventory=inventory(a.sources), errors=sorted(a.errors, key=lambda s: s.first_call),
        calls=a.ranked(TOP), labels=[s.label for s in a.sources] if len(a.sources) > 1 else [],
        times=_times(cs), shapes=_shapes(a), phases=_phases(a), gemms=gemms(a.signatures), tune=tune,
        costly=sorted(cs, key=lambda c: (-c.total_seconds, c.sig.first_call))[:50],
        cost_total=sum(c.total_seconds for c in cs),
        phased=any(s.phase is not None for s in a.signatures))


def _source_notes(s: Source, ranks: bool) -> List[str]:
    """What to know about one file; ranks: whether the files are of several ranks."""
    notes = []
    if s.deduplicated:
        notes.append("deduplicated (counts from its summary)")
    if s.worker is not None and s.worker.several:
        notes.append(f"worker {s.worker.describe()}")
    elif ranks and s.rank is not None:
        notes.append(f"rank {s.rank}")
    if s.truncated:
        notes.append("stopped at --max-entries")
    if s.report.cut_last_line:
        notes.append("last line cut (the process died during that call)")
    if s.report.bad_lines:
        notes.append(f"{len(s.report.bad_lines)} unreadable lines")
    if s.summary_note and (s.deduplicated or s.summary is None):
        notes.append(s.summary_note)
    return notes


def _times(cs: List[Cost]) -> Times:
    total: Dict[str, float] = defaultdict(float)
    by_bound: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
    calls: Dict[str, int] = defaultdict(int)
    for c in cs:
        total[c.sig.operation] += c.total_seconds
        by_bound[c.sig.operation][c.bound] += c.total_seconds
        calls[c.sig.operation] += c.sig.count
    grand = sum(total.values())
    # bars under 0.1% would be invisible: the page sums them up instead
    ranked = sorted(total, key=lambda op: (-total[op], op))
    shown = [op for op in ranked[:TOP] if total[op] >= grand / 1000]
    return Times([OpTime(op, total[op], calls[op], max(by_bound[op], key=by_bound[op].get)) for op in shown],
                 len(ranked) - len(shown), sum(total[op] for op in ranked[len(shown):]), grand)


def _shapes(a: Analysis) -> List[Tuple[OpView, int]]:
    n = {op: len({s.key for s in o.signatures}) for op, o in a.ops.items()}  # phase aside
    ops = sorted(a.ops.values(), key=lambda o: (-n[o.operation], -o.calls, o.operation))[:TOP]
    return [(o, n[o.operation]) for o in ops]


def _phases(a: Analysis) -> Optional[PhaseCalls]:
    counts: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in a.signatures:
        counts[s.phase if s.phase is not None else NO_PHASE][s.operation] += s.count
    if set(counts) <= {NO_PHASE}:
        return None
    phases = sorted(counts, key=lambda p: (p == NO_PHASE, -sum(counts[p].values())))
    # Each phase's own top operators, taken in turn: one busy phase (a diffusion
    # loop) would otherwise crowd the others (a short prefill) out.
    ranked = [sorted(counts[p], key=lambda op: -counts[p][op]) for p in phases]
    ops: List[str] = []
    for i in range(max(map(len, ranked))):
        for r in ranked:
            if i < len(r) and r[i] not in ops and len(ops) < 20:
                ops.append(r[i])
    return PhaseCalls(phases, ops, counts)
