"""`sgl-shapeprof analyze`: what ran, how often, with which shapes, what failed.

Everything SGLang's analyze_shapes.py (the script this project's logger came
with) shows, from a streaming scan (scan.py) with true counts.
"""
from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO, Tuple

from ..records.reader import SummaryError, open_records, read_summary, summary_path_for
from ..records.scan import Filter, Signature, Source, close_names
from ..records.values import format_inputs, format_value
from .deployment import inventory


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


@dataclass
class Analysis:
    sources: List[Source]
    flt: Filter
    ops: Dict[str, OpView]
    signatures: List[Signature]  # merged across sources

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

    def ranked(self, top: Optional[int] = None) -> List[OpView]:
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
                                          graph=sig.graph)
            m.count += sig.count
            m.records += sig.records
            o = ops.get(sig.operation)
            if o is None:
                o = ops[sig.operation] = OpView(sig.operation)
            o.calls += sig.count
            o.records += sig.records
            o.out_elements += sig.count * sig.out_elements
            o.by_source[src.label] = o.by_source.get(src.label, 0) + sig.count
            if sig.error is not None or sig.incomplete:
                o.errors += sig.count
    for m in merged.values():
        ops[m.operation].signatures.append(m)
    for o in ops.values():
        o.signatures.sort(key=lambda s: (-s.count, s.first_call))
    return Analysis(sources, flt, ops, sorted(merged.values(), key=lambda s: s.first_call))


def analyze_file(paths, flt: Optional[Filter] = None) -> Analysis:
    """Scan one file (or a list of files, a glob) and build the analysis."""
    from ..records.scan import expand_paths, scan_all
    return build(scan_all(expand_paths([paths] if isinstance(paths, str) else list(paths)), flt or Filter()))


def _n(x: int) -> str:
    return f"{x:,}"


def _source_lines(src: Source, w) -> None:
    passes = len(src.passes)
    text = f"{src.path}: {_n(src.records)} records"
    if src.deduplicated:
        text += f" standing for {_n(src.calls)} calls (deduplicated; counts from its summary)"
    s = src.summary
    if s and s.get("logged_forward_passes") is not None:
        logged, started = s["logged_forward_passes"], s.get("forward_passes")
        text += f", {logged} forward pass{'es' if logged != 1 else ''} logged"
        if started is not None and started != logged:
            text += f" of {started} started"
        if passes != logged and passes and not src.filtered:
            text += f" (records from {passes})"
        if s.get("ended_by"):
            text += f", ended by {s['ended_by']}"
    else:
        text += f", {passes} forward pass{'es' if passes != 1 else ''}"
    if src.worker is not None and src.worker.several:
        text += f", {src.worker.describe()}"
    elif src.rank is not None:
        text += f", rank {src.rank}"
    w(text + "\n")
    if src.graphs:
        captured = sorted(k for k, g in src.graphs.items() if g["captures"])
        replays = sum(g["replays"] for g in src.graphs.values())
        w(f"  graphs: {len(captured)} captured ({', '.join(map(str, captured[:12]))}"
          f"{', ...' if len(captured) > 12 else ''}), {_n(replays)} replays in logged passes; "
          f"a capture's calls count once per replay\n")
        again = sorted(k for k, g in src.graphs.items() if g["captures"] > 1)
        if again:
            w(f"  note: graphs {', '.join(map(str, again[:12]))} were captured more than once: "
              f"their calls count once per capture and replay\n")
        missing = sorted(k for k, g in src.graphs.items() if g["replays"] and not g["captures"])
        if missing:
            w(f"  note: graphs {', '.join(map(str, missing[:12]))} were replayed but their captures "
              f"are not in this file (the profiler started after them): their calls are missing\n")
    if src.truncated:
        w(f"  stopped after {_n(src.records)} records (--max-entries)\n")
    if src.summary_note and (src.deduplicated or src.summary is None):
        w(f"  note: {src.summary_note}\n")
    rep = src.report
    if rep.cut_last_line:
        w("  WARNING: the last line was cut (the process died during that call); "
          + ("its inputs were recovered and it is listed under errors as INCOMPLETE\n"
             if rep.recovered is not None else "it could not be recovered\n"))
    if rep.bad_lines:
        w(f"  WARNING: {len(rep.bad_lines)} unreadable lines (first: line {rep.bad_lines[0]})\n")


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


@dataclass
class Sections:
    summary: bool = True
    largest: bool = True
    diversity: bool = True
    show_shapes: bool = False
    by_phase: bool = False
    top: Optional[int] = None
    max_shapes: Optional[int] = None


def print_analysis(a: Analysis, out: Optional[TextIO] = None, sec: Optional[Sections] = None) -> None:
    w = (out or sys.stdout).write
    sec = sec or Sections()
    for src in a.sources:
        _source_lines(src, w)
    for line in inventory(a.sources):
        w(f"{line}\n")
    ftext = filters_text(a.flt)
    if ftext:
        w(f"filters: {ftext}\n")
    phases: Dict[str, int] = defaultdict(int)
    for src in a.sources:
        for k, v in src.phases.items():
            phases[k] += v
    if phases:
        w("phases: " + ", ".join(f"{k}={_n(v)} calls" for k, v in
                                 sorted(phases.items(), key=lambda kv: -kv[1])) + "\n")
    if not a.ops:
        _print_nothing(a, w)
        return
    errs = a.errors
    if errs:
        w(f"\nErrors ({_n(sum(s.count for s in errs))} calls, {len(errs)} distinct):\n")
        for s in errs[:50]:
            what = (f"{s.error.get('error_type')}: {s.error.get('error_message')}" if s.error
                    else "INCOMPLETE: the process died during this call")
            first = what.splitlines()[0] if what else ""
            w(f"  call {s.first_call} {s.operation}" + (f" x{s.count}" if s.count > 1 else "") + "\n")
            w(f"    {format_inputs(s.inputs)}\n    {first}\n")
    multi = len(a.sources) > 1
    labels = [s.label for s in a.sources]
    ranked = a.ranked(sec.top)
    w(f"\nMost frequent operations{f' (top {sec.top})' if sec.top else ''}:\n")
    head = f"{'calls':>12} {'shapes':>6} {'output elements':>16}  "
    if multi:
        head += "".join(f"{lab:>10} " for lab in labels)
    w(head + "operation\n")
    for o in ranked:
        row = f"{_n(o.calls):>12} {len(o.signatures):>6} {_n(o.out_elements):>16}  "
        if multi:
            row += "".join(f"{_n(o.by_source.get(lab, 0)):>10} " for lab in labels)
        w(row + o.operation + "\n")
        if sec.show_shapes:
            shown = o.signatures[:sec.max_shapes] if sec.max_shapes else o.signatures
            for s in shown:
                ph = f"[{s.phase}] " if s.phase is not None and len(phases) > 1 else ""
                w(f"{'':>12} {_n(s.count):>6}x  {ph}{s.text}\n")
            hidden = len(o.signatures) - len(shown)
            if hidden > 0:
                w(f"{'':>12} {'':>6}   ... {hidden} more (--max-shapes)\n")
    if sec.by_phase and phases:
        _print_by_phase(a, ranked, sorted(phases, key=lambda k: -phases[k]), w)
    if sec.largest:
        n = sec.top or 10
        big = sorted(a.signatures, key=lambda s: (-s.out_elements, s.first_call))[:n]
        w(f"\nLargest operations by output elements (top {n}):\n")
        w(f"{'call_id':>10} {'elements':>14} {'calls':>10}  operation -> output\n")
        for s in big:
            w(f"{s.first_call:>10} {_n(s.out_elements):>14} {_n(s.count):>10}  "
              f"{s.operation} -> {format_value(s.outputs)}\n")
    if sec.diversity:
        n = sec.top or 10
        div = sorted(a.ops.values(), key=lambda o: (-len(o.signatures), -o.calls))[:n]
        w(f"\nShape diversity (operations with the most distinct shapes, top {n}):\n")
        w(f"{'shapes':>8} {'calls':>12}  operation\n")
        for o in div:
            w(f"{len(o.signatures):>8} {_n(o.calls):>12}  {o.operation}\n")
    if sec.summary:
        total = sum(o.calls for o in a.ops.values())
        elems = sum(o.out_elements for o in a.ops.values())
        top1 = ranked[0] if ranked else None
        w("\nSummary statistics:\n")
        w(f"  total operations (calls): {_n(total)}\n")
        w(f"  records:                  {_n(a.records)}\n")
        w(f"  unique operations:        {_n(len(a.ops))}\n")
        w(f"  distinct signatures:      {_n(len(a.signatures))}\n")
        w(f"  total output elements:    {_n(elems)}\n")
        if top1:
            w(f"  most common operation:    {top1.operation} ({_n(top1.calls)} calls, "
              f"{100.0 * top1.calls / max(total, 1):.1f}%)\n")


def _print_by_phase(a: Analysis, ranked: List[OpView], phases: List[str], w) -> None:
    """Each operation's distinct shapes per phase, phases side by side."""
    w("\nBy phase (each operation's distinct shapes per phase):\n")
    w(f"{'operation':<40}" + "".join(f" {p[:24]:>24}" for p in phases) + "\n")
    for o in ranked:
        per = {p: [s for s in o.signatures if s.phase == p] for p in phases}
        w(f"{o.operation[:40]:<40}" + "".join(
            f" {f'{_n(sum(s.count for s in per[p]))} calls, {len(per[p])} shapes':>24}"
            for p in phases) + "\n")
        for p in phases:
            for s in per[p][:3]:
                w(f"    {p}: {_n(s.count)}x {format_inputs(s.inputs)}\n")
            if len(per[p]) > 3:
                w(f"    {p}: ... {len(per[p]) - 3} more\n")


def _print_nothing(a: Analysis, w) -> None:
    seen = set().union(*(s.seen_operations for s in a.sources)) if a.sources else set()
    if not seen:
        w("\nno records: the file is empty (was a forward pass logged? "
          "SGLANG_PROFILE_SHAPES_SKIP_WARMUP may skip every pass)\n")
        return
    w(f"\nno calls match the filters ({filters_text(a.flt)}); "
      f"the file has {len(seen)} operations\n")
    if a.flt.op:
        close = close_names(a.flt.op, seen)
        if close:
            w("operations that look close: " + ", ".join(close) + "\n")


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


def analysis_json(a: Analysis, top: Optional[int] = None) -> dict:
    """The analysis as data: per operation, its distinct signatures with true counts."""
    files = []
    for s in a.sources:
        logged, started, with_records, covered = passes_of(s)
        files.append({"file": s.path, "label": s.label, "rank": s.rank,
                      "worker": s.worker.as_json() if s.worker is not None else None, "records": s.records,
                      "calls": s.calls, "deduplicated": s.deduplicated,
                      "forward_passes": covered, "logged_forward_passes": logged,
                      "started_forward_passes": started, "passes_with_records": with_records,
                      "truncated": s.truncated,
                      "last_line_cut": s.report.cut_last_line,
                      "unreadable_lines": len(s.report.bad_lines),
                      "graphs": {str(k): g for k, g in s.graphs.items()}})
    # Over several files (ranks of one run number their passes alike): pass
    # numbers, not rank x pass -- the most any file logged, the distinct
    # numbers with records.
    known = [f["logged_forward_passes"] for f in files if f["logged_forward_passes"] is not None]
    total_logged = max(known) if known and len(known) == len(files) else None
    total_with_records = len(set().union(*(s.passes for s in a.sources))) if a.sources else 0
    total_covered = max([total_with_records] + [f["forward_passes"] for f in files])
    return {
        "files": files,
        "inventory": inventory(a.sources),
        "records": a.records,
        "calls": a.calls,
        "forward_passes": total_covered,
        "logged_forward_passes": total_logged,
        "passes_with_records": total_with_records,
        "errors": [sig_json(s) for s in a.errors],
        "operations": [
            {"operation": o.operation, "calls": o.calls, "records": o.records, "errors": o.errors,
             "output_elements": o.out_elements, "by_file": o.by_source,
             "signatures": [sig_json(s) for s in o.signatures]}
            for o in a.ranked(top)
        ],
    }


def sig_json(s: Signature) -> dict:
    d = {"inputs": s.inputs, "outputs": s.outputs, "count": s.count, "records": s.records,
         "first_call_id": s.first_call, "output_elements": s.out_elements}
    if s.phase is not None:
        d["phase"] = s.phase
    if s.graph is not None:
        d["graph"] = s.graph
    if s.args is not None:
        d["args"] = s.args
    if s.error is not None:
        d["error"] = s.error
    if s.incomplete:
        d["incomplete"] = True
    return d


class Timeline:
    """--timeline FILE.csv: one row per kept record, in file order."""

    COLUMNS = ["call_id", "operation", "op_count", "output_elements", "output_shape"]

    def __init__(self, f: TextIO):
        self.w = csv.writer(f, lineterminator="\n")
        self.w.writerow(self.COLUMNS)
        self.running: Dict[str, int] = {}

    def __call__(self, call_id: int, sig: Signature, n: int) -> None:
        # op_count: calls of this operation so far, this record's included
        c = self.running.get(sig.operation, 0) + n
        self.running[sig.operation] = c
        shape = (json.dumps(sig.outputs.get("shape")) if isinstance(sig.outputs, dict)
                 else format_value(sig.outputs) if sig.outputs is not None else "")
        self.w.writerow([call_id, sig.operation, c, sig.out_elements, shape])


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
