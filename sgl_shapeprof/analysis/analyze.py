"""`sgl-shapeprof analyze`: what ran, how often, with which shapes, what failed.

Everything SGLang's analyze_shapes.py (the script this project's logger came
with) shows, from a streaming scan (scan.py) with true counts; the text and
JSON of it are render/'s (text/analyze.py, jsonout.py).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..records.ledger import CUSTOM_OPS, DISPATCHER, door_of
from ..records.reader import SummaryError, open_records, read_summary, summary_path_for
from ..records.filter import Filter
from ..records.scan import Source
from ..records.signature import Signature


@dataclass
class OpView:
    """One operation over the signatures kept."""
    operation: str
    calls: int = 0
    records: int = 0
    out_elements: int = 0  # summed over calls
    errors: int = 0
    signatures: List[Signature] = field(default_factory=list)
    by_source: Dict[str, int] = field(default_factory=dict)
    time_ns: int = 0  # measured time of `timed` of its calls (a timed recording)
    timed: int = 0


@dataclass
class Analysis:
    sources: List[Source]
    flt: Filter
    ops: Dict[str, OpView]
    signatures: List[Signature]  # merged across sources
    # per file recorded with time="kernels": its GPU kernels' ledger (kernel_time.py)
    kernel_ledgers: list = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.sources)

    @property
    def records(self) -> int:
        """Records kept by the filters."""
        return sum(s.records for s in self.signatures)

    @property
    def errors(self) -> List[Signature]:
        return [s for s in self.signatures if s.error is not None or s.incomplete]

    @property
    def timed(self) -> bool:
        """Some file was recorded with time (its records' time_us)."""
        return any(s.timed for s in self.sources)

    def ranked(self, top: Optional[int] = None, by: str = "calls") -> List[OpView]:
        """Operations, most calls first, or with by="time" most measured time."""
        if by == "time":
            r = sorted(self.ops.values(), key=lambda o: (-o.time_ns, -o.calls, o.operation))
        else:
            r = sorted(self.ops.values(), key=lambda o: (-o.calls, o.operation))
        return r[:top] if top else r


def build(sources: List[Source]) -> Analysis:
    """The sources merged (they were filtered when scanned: Source.flt)."""
    flt = next((s.flt for s in sources if s.flt is not None), None) or Filter()
    merged: Dict[Tuple, Signature] = {}
    ops: Dict[str, OpView] = {}
    for src in sources:
        for sig in src.signatures.values():
            k = (sig.key, sig.phase)
            m = merged.get(k)
            if m is None:
                m = merged[k] = Signature(sig.operation, sig.inputs, sig.outputs, sig.error,
                                          sig.phase, sig.incomplete, first_call=sig.first_call,
                                          out_elements=sig.out_elements, args=sig.args,
                                          graph=sig.graph, within=sig.within)
            m.count += sig.count
            m.records += sig.records
            if sig.timed:
                m.add_time(sig.timed, sig.time_ns, sig.time_min, sig.time_max)
            if sig.kernel_calls:
                m.add_kernel_time(sig.kernel_calls, sig.kernel_ns, sig.kernel_min, sig.kernel_max)
            o = ops.get(sig.operation)
            if o is None:
                o = ops[sig.operation] = OpView(sig.operation)
            o.calls += sig.count
            o.records += sig.records
            o.time_ns += sig.time_ns
            o.timed += sig.timed
            o.out_elements += sig.count * sig.out_elements
            o.by_source[src.label] = o.by_source.get(src.label, 0) + sig.count
            if sig.error is not None or sig.incomplete:
                o.errors += sig.count
    for m in merged.values():
        ops[m.operation].signatures.append(m)
    for o in ops.values():
        o.signatures.sort(key=lambda s: (-s.count, s.first_call))
    return Analysis(sources, flt, ops, sorted(merged.values(), key=lambda s: s.first_call))


def doors(src: Source) -> Dict[str, int]:
    """The coverage ledger of one file: its calls by the door they came
    through (records/ledger.py), the dispatcher's first, then by calls."""
    out: Dict[str, int] = {}
    for sig in src.signatures.values():
        d = door_of(sig.operation)
        out[d] = out.get(d, 0) + sig.count
    first = [d for d in (DISPATCHER, CUSTOM_OPS) if d in out]
    rest = sorted((d for d in out if d not in first), key=lambda d: (-out[d], d))
    return {d: out[d] for d in first + rest}


def doors_within(src: Source) -> Dict[str, int]:
    """Of the ledger's calls, those that ran inside another call's record
    (a custom op's kernel launching Triton, calling FlashInfer: "within"),
    by door: they are that call's work, counted once by readers of cost."""
    out: Dict[str, int] = {}
    for sig in src.signatures.values():
        if sig.within:
            d = door_of(sig.operation)
            out[d] = out.get(d, 0) + sig.count
    return dict(sorted(out.items(), key=lambda x: (-x[1], x[0])))


def analyze_file(paths, flt: Optional[Filter] = None) -> Analysis:
    """Scan one file (or a list of files, a glob) and build the analysis."""
    from ..records.paths import expand_paths
    from ..records.scan import scan_all
    return build(scan_all(expand_paths([paths] if isinstance(paths, str) else list(paths)), flt or Filter()))


def filters_text(flt: Filter, limit: bool = False) -> str:
    """The filter as the options that gave it ("--phase decode, ..."); with
    limit, --max-entries too."""
    parts = []
    if flt.op:
        parts.append(f"--filter-op {flt.op}")
    if flt.phase is not None:
        parts.append(f"--phase {flt.phase}")
    if flt.passes:
        a, b = flt.passes
        parts.append(f"--passes {a}-{b if b < 2**62 else ''}")
    if flt.min_elements:
        parts.append(f"--min-elements {flt.min_elements}")
    if limit and flt.max_entries:
        parts.append(f"--max-entries {flt.max_entries}")
    return ", ".join(parts)


def _summary_int(src: Source, key: str) -> Optional[int]:
    v = (src.summary or {}).get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def passes_of(src: Source) -> Tuple[Optional[int], Optional[int], int, int]:
    """(logged, started, with records, forward_passes) of one file.

    logged and started are the summary's (None without one); with records:
    distinct forward passes among the records the filters kept (a
    deduplicated file's passes of repeats only have none); forward_passes:
    the passes the analysis stands for -- the logged ones when the summary
    says and no filter is on, else those with records (what the text says)."""
    logged = _summary_int(src, "logged_forward_passes")
    started = _summary_int(src, "forward_passes")
    with_records = len(src.passes)
    covered = logged if logged is not None and not src.filtered else with_records
    return logged, started, with_records, covered


def quick_counts(path: str) -> Tuple[Dict[str, int], str]:
    """--quick: operation counts without reading signatures -- the summary's
    when it is there (true counts), else one pass over the operation names."""
    try:
        s: Optional[dict] = read_summary(summary_path_for(path))
    except SummaryError:
        s = None
    if s and isinstance(s.get("operation_counts"), dict):
        return dict(s["operation_counts"]), f"from {summary_path_for(path)}"
    counts: Dict[str, int] = defaultdict(int)
    f = open_records(path)
    try:
        for line in f:
            i = line.find(b'"operation": "')
            if i < 0:
                continue
            j = line.find(b'"', i + 14)
            counts[line[i + 14:j].decode("utf-8", "replace")] += 1
    finally:
        f.close()
    return dict(counts), "records counted by name (no summary beside the file)"
