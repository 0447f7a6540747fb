"""`sgl-shapeprof analyze`: what ran, with which shapes, and what failed.

Streams the file (memory grows with distinct signatures, not with records).
"""
from __future__ import annotations

import re
import sys
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, TextIO

from .reader import ReadReport, RecordReader


def _short_dtype(d: object) -> str:
    s = str(d)
    return s[6:] if s.startswith("torch.") else s


def format_value(v: object) -> str:
    """{"shape": [4, 8], "dtype": "torch.float32"} -> "[4, 8] float32"."""
    if v is None:
        return "None"
    if isinstance(v, dict):
        return f"{list(v.get('shape', []))} {_short_dtype(v.get('dtype'))}"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return str(v)


def format_signature(rec: dict, with_outputs: bool = True) -> str:
    inputs = rec.get("inputs") or {}
    text = ", ".join(f"{k}={format_value(v)}" for k, v in inputs.items()) or "(no tensor inputs)"
    if with_outputs:
        out = rec.get("outputs")
        text += " -> " + (format_value(out) if out is not None else "None")
    return text


@dataclass
class OpStats:
    calls: int = 0
    signatures: Counter = field(default_factory=Counter)
    examples: Dict[str, dict] = field(default_factory=dict)  # signature -> inputs/outputs
    errors: int = 0


@dataclass
class Analysis:
    report: ReadReport
    ops: Dict[str, OpStats]
    errors: List[dict]
    passes: Counter
    phases: Counter
    records: int


def analyze_file(path: str, filter_op: Optional[str] = None, max_errors: int = 50) -> Analysis:
    pattern = re.compile(filter_op) if filter_op else None
    reader = RecordReader(path)
    ops: Dict[str, OpStats] = OrderedDict()
    errors: List[dict] = []
    passes: Counter = Counter()
    phases: Counter = Counter()
    n = 0
    for rec in reader:
        op = str(rec.get("operation", "?"))
        if pattern and not pattern.search(op):
            continue
        n += 1
        st = ops.get(op)
        if st is None:
            st = ops[op] = OpStats()
        st.calls += 1
        sig = format_signature(rec)
        st.signatures[sig] += 1
        if sig not in st.examples:
            st.examples[sig] = {"inputs": rec.get("inputs") or {}, "outputs": rec.get("outputs")}
        passes[rec.get("forward_pass")] += 1
        if rec.get("phase"):
            phases[rec["phase"]] += 1
        if rec.get("error") is not None or rec.get("incomplete"):
            st.errors += 1
            if len(errors) < max_errors:
                errors.append(rec)
    return Analysis(reader.report, ops, errors, passes, phases, n)


def _ranked(a: Analysis, top: Optional[int]) -> list:
    """(operation, OpStats), most called first; the first `top` if given."""
    ranked = sorted(a.ops.items(), key=lambda kv: -kv[1].calls)
    return ranked[:top] if top else ranked


def print_analysis(a: Analysis, path: str, out: Optional[TextIO] = None, show_shapes: bool = False,
                   top: Optional[int] = None, max_shapes: Optional[int] = None) -> None:
    w = (out or sys.stdout).write
    rep = a.report
    w(f"{path}: {a.records} records, {len(a.ops)} operations, "
      f"{len(a.passes)} forward passes\n")
    if rep.cut_last_line:
        if rep.recovered is not None:
            w("WARNING: the last line was cut (the process died during that call); "
              "its inputs were recovered and it is listed under errors as INCOMPLETE\n")
        else:
            w("WARNING: the last line was cut (the process died while writing it) "
              "and could not be recovered\n")
    if rep.bad_lines:
        w(f"WARNING: {len(rep.bad_lines)} unreadable lines (first: line {rep.bad_lines[0]})\n")
    if a.phases:
        w("phases: " + ", ".join(f"{k}={v}" for k, v in a.phases.most_common()) + "\n")
    if a.errors:
        w(f"\nErrors ({sum(s.errors for s in a.ops.values())}):\n")
        for rec in a.errors:
            err = rec.get("error")
            what = (f"{err.get('error_type')}: {err.get('error_message')}" if err
                    else "INCOMPLETE: the process died during this call")
            first = what.splitlines()[0] if what else ""
            w(f"  call {rec.get('call_id')} (pass {rec.get('forward_pass')}) {rec.get('operation')}\n")
            w(f"    {format_signature(rec, with_outputs=False)}\n")
            w(f"    {first}\n")
    ranked = _ranked(a, top)
    w(f"\n{'calls':>8} {'shapes':>6}  operation\n")
    for op, st in ranked:
        w(f"{st.calls:>8} {len(st.signatures):>6}  {op}\n")
        if show_shapes:
            for sig, count in st.signatures.most_common(max_shapes):
                w(f"{'':>8} {count:>6}x   {sig}\n")
            hidden = len(st.signatures) - (max_shapes or len(st.signatures))
            if hidden > 0:
                w(f"{'':>8} {'':>6}    ... {hidden} more (sgl-shapeprof analyze --show-shapes)\n")


def analysis_json(a: Analysis, path: str, top: Optional[int] = None) -> dict:
    """The analysis as data: per operation, its distinct signatures (inputs
    and outputs as in the records) with counts, most frequent first."""
    ranked = _ranked(a, top)
    rep = a.report
    return {
        "file": path,
        "records": a.records,
        "forward_passes": len(a.passes),
        "last_line_cut": rep.cut_last_line,
        "unreadable_lines": len(rep.bad_lines),
        "errors": a.errors,
        "operations": [
            {"operation": op, "calls": st.calls, "errors": st.errors,
             "signatures": [dict(st.examples[sig], count=count) for sig, count in st.signatures.most_common()]}
            for op, st in ranked
        ],
    }
