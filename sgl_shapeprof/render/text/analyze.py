"""`sgl-shapeprof analyze` as text: the files, the errors, the most frequent
operations and their shapes, the largest operations, shape diversity, the
summary statistics; and --quick's counts."""
from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, TextIO

from ...analysis.analyze import Analysis, OpView, doors, doors_within, filters_text
from ...analysis.kernel_calls import attention_calls, reading_of
from ...analysis.tune.moe import moe_op_reading
from ...analysis.deployment import inventory
from ...records.ledger import DISPATCHER
from ...records.reader import ReadReport
from ...records.filter import close_names
from ...records.scan import Source
from ...records.signature import Signature, tell_apart
from ...records.values import format_inputs, format_value


# the first route's key (docs/how-it-works.md#the-mechanisms): said only when another ran
FIRST_ROUTE = "Fake"


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
            text += f" (records from {passes} of them: " + (
                "the other passes' calls repeat signatures written before)" if src.deduplicated
                else "the others recorded no call)")
        if s.get("ended_by"):
            text += f", ended by {s['ended_by']}"
    else:
        text += f", {passes} forward pass{'es' if passes != 1 else ''}"
    if src.worker is not None and src.worker.several:
        text += f", {src.worker.describe()}"
    elif src.rank is not None:
        text += f", rank {src.rank}"
    w(text + "\n")
    if src.dispatch_key is not None and src.dispatch_key != FIRST_ROUTE:
        w(f"  recorded through DispatchKey::{src.dispatch_key}, the second route: this torch has "
          f"its own fallback on DispatchKey::{FIRST_ROUTE} (docs/how-it-works.md#the-mechanisms)\n")
    ledger = doors(src)
    if set(ledger) - {DISPATCHER}:  # a call came through another door: say how many through each
        inside = doors_within(src)
        w("  doors: " + ", ".join(f"{d.replace('_', ' ')} {_n(n)}" for d, n in ledger.items()) +
          ("; within other calls: " + ", ".join(f"{d.replace('_', ' ')} {_n(n)}" for d, n in inside.items())
           if inside else "") + "\n")
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
              f"are not in this file (captured before the profiler was armed, or not kept: its log says "
              f"why): their calls are missing\n")
    if s and s.get("stopped_at_cap"):
        cap = s.get("max_records_bytes")
        w(f"  WARNING: recording stopped at the records file's cap"
          f"{f' of {cap / 2 ** 20:.1f} MiB' if isinstance(cap, (int, float)) else ''} (SHAPEPROF_MAX_MB): "
          f"the calls after its last record were not written\n")
    elif s and s.get("profiler_failed"):
        w("  WARNING: the profiler failed while recording (its log says why): "
          "the calls after its last record were not written\n")
    if src.records_after_summary:
        n = src.records_after_summary
        w(f"  note: {_n(n)} record{'s' if n != 1 else ''} written after its summary (the process was killed "
          f"within milliseconds of a pass end, before the summary caught up): the summary's counts stop "
          f"before {'them' if n != 1 else 'it'}"
          + ("; repeats of deduplicated calls after it are not counted\n" if src.deduplicated else "\n"))
    if src.truncated:
        w(f"  stopped after {_n(src.records)} records (--max-entries)\n")
    if src.summary_note and (src.deduplicated or src.summary is None):
        w(f"  note: {src.summary_note}\n")
    for line in read_warnings(src):
        w(f"  {line}\n")


def read_warnings(src: Source) -> List[str]:
    """What the reader could not take from a file (a cut last line, lines
    no parser takes): every command says it, in these words."""
    return report_warnings(src.report)


def report_warnings(rep: ReadReport) -> List[str]:
    """read_warnings, from a reader's report."""
    out = []
    if rep.cut_last_line:
        out.append("WARNING: the last line was cut (the process died during that call); "
                   + ("its inputs were recovered and it is listed under errors as INCOMPLETE"
                      if rep.recovered is not None else "it could not be recovered"))
    if rep.bad_lines:
        n = len(rep.bad_lines)
        out.append(f"WARNING: {_n(n)} unreadable line{'s' if n != 1 else ''} (first: line {rep.bad_lines[0]}): "
                   "not JSON, not a record, or nested too deep; the counts leave "
                   f"{'them' if n != 1 else 'it'} out")
    return out


@dataclass
class Sections:
    summary: bool = True
    largest: bool = True
    diversity: bool = True
    show_shapes: bool = False
    by_phase: bool = False
    top: Optional[int] = None
    max_shapes: Optional[int] = None
    sort: str = "calls"  # or "time": most measured time first


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _us(ns: int) -> str:
    return f"{ns / 1e3:,.3f}"


def _print_kernels(led, top: int, w) -> None:
    """A file's GPU kernels (time="kernels"): time per operation, the
    share of kernel time under records by door, and what no record explains."""
    w(f"\nGPU kernels of {led.label} (CUPTI, {led.path}): {_n(led.kernels)} kernels, "
      f"{_us(led.total_ns)} us, {100 * led.explained_share:.1f}% under records\n")
    if led.by_door:
        w("  by door: " + ", ".join(f"{d} {_us(ns)} us" for d, ns in led.by_door.items()) + "\n")
    ops = sorted(led.operations.values(), key=lambda o: (-o.ns, o.operation))[:top]
    if ops:
        w(f"{'kernel us':>14} {'calls':>10} {'kernels':>8} {'mean us':>10}  operation\n")
        for o in ops:
            w(f"{_us(o.ns):>14} {_n(o.calls):>10} {_n(o.kernels):>8} {o.ns / max(o.calls, 1) / 1e3:>10.3f}  "
              f"{o.operation}\n")
    if led.unexplained:
        w(f"  unexplained (launched in a logged pass, under no record): {_us(led.unexplained_ns)} us\n")
        for name, n, ns in led.unexplained[:top]:
            w(f"{_us(ns):>14} {_n(n):>10}x  {name}\n")
    notes = []
    if led.unknown_records:
        notes.append(f"{_n(led.unknown_records)} kernels under a call_id with no record line (a cut file)")
    if led.dropped:
        notes.append(f"CUPTI dropped {_n(led.dropped)} activity records (its buffers were full)")
    if led.incomplete:
        notes.append(f"{_n(led.incomplete)} activity records were unfinished when CUPTI returned them "
                     "(left out)")
    if led.bad_lines:
        notes.append(f"{_n(led.bad_lines)} unreadable lines")
    if not led.ended:
        notes.append("the process ended before the collector stopped: the kernels still in CUPTI's buffers "
                     "are not here")
    for n in notes:
        w(f"  note: {n}\n")


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
    ranked = a.ranked(sec.top, sec.sort)
    timed = a.timed
    by_time = sec.sort == "time"
    w(f"\n{'Operations by measured time' if by_time else 'Most frequent operations'}"
      f"{f' (top {sec.top})' if sec.top else ''}:\n")
    if timed:
        w("(time: wall time on the calling thread, from each call's start to its return, calls recorded "
          "within it included; on a GPU its launch, not its kernels, unless recorded with sync)\n")
    head = f"{'calls':>12} {'shapes':>6} {'output elements':>16}  "
    if timed:
        head += f"{'time ms':>12} {'mean us':>10}  "
    if multi:
        head += "".join(f"{lab:>10} " for lab in labels)
    w(head + "operation\n")
    for o in ranked:
        row = f"{_n(o.calls):>12} {len(o.signatures):>6} {_n(o.out_elements):>16}  "
        if timed:
            row += (f"{_ms(o.time_ns):>12} {o.time_ns / o.timed / 1000:>10.3f}  " if o.timed
                    else f"{'-':>12} {'-':>10}  ")
        if multi:
            row += "".join(f"{_n(o.by_source.get(lab, 0)):>10} " for lab in labels)
        w(row + o.operation + "\n")
        if sec.show_shapes:
            sigs = sorted(o.signatures, key=lambda s: (-s.time_ns, -s.count)) if by_time else o.signatures
            shown = sigs[:sec.max_shapes] if sec.max_shapes else sigs
            for s, apart in zip(shown, tell_apart(shown, o.signatures)):
                ph = f"[{s.phase}] " if s.phase is not None and len(phases) > 1 else ""
                w(f"{'':>12} {_n(s.count):>6}x  {ph}{s.text}{f'  ({apart})' if apart else ''}\n")
                if s.timed:
                    w(f"{'':>12} {'':>6}   time {_ms(s.time_ns)} ms over {_n(s.timed)} "
                      f"call{'s' if s.timed != 1 else ''}: mean "
                      f"{s.time_ns / s.timed / 1000:.3f} us, min {s.time_min / 1000:.3f}, "
                      f"max {s.time_max / 1000:.3f}\n")
                op_moe = moe_op_reading(s)
                reading = reading_of(s) or (op_moe.text if op_moe else None)
                if reading:
                    w(f"{'':>12} {'':>6}   = {reading}\n")
            hidden = len(o.signatures) - len(shown)
            if hidden > 0:
                w(f"{'':>12} {'':>6}   ... {hidden} more (--max-shapes)\n")
    for led in a.kernel_ledgers:
        _print_kernels(led, sec.top or 10, w)
    attention = attention_calls(a.signatures)
    if attention:
        _print_attention(attention, w)
    if sec.by_phase and phases:
        _print_by_phase(a, ranked, sorted(phases, key=lambda k: -phases[k]), by_time, w)
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


def _print_attention(calls, w) -> None:
    """Kernel libraries' attention calls: what their shapes say (KV length:
    at most the length the caller gave, or the ragged total)."""
    def v(x):
        return "-" if x is None else str(x)
    w("\nAttention calls (kernel libraries and SDPA; kv len: exact (SDPA), <= the bound the call was given, "
      "or the ragged total):\n")
    w(f"{'calls':>10} {'batch':>6} {'q heads':>7} {'kv heads':>8} {'head dim':>8} {'q tokens':>8} "
      f"{'q len':>6} {'kv len':>12}  operation\n")
    for s, c in calls:
        kv = str(c.kv_len) if c.kv_len is not None else f"{c.kv_tokens} total" if c.kv_tokens is not None else (
            f"<={c.kv_len_max}" if c.kv_len_max is not None else "-")
        ph = f" [{s.phase}]" if s.phase else ""
        w(f"{_n(s.count):>10} {v(c.batch):>6} {c.q_heads:>7} {v(c.kv_heads):>8} {c.head_dim:>8} "
          f"{c.q_tokens:>8} {v(c.q_len):>6} {kv:>12}  {s.operation}{ph}\n")


def _print_by_phase(a: Analysis, ranked: List[OpView], phases: List[str], by_time: bool, w) -> None:
    """Each operation's distinct shapes per phase, phases side by side; a
    timed recording's time per phase and shape (by_time: most time first)."""
    timed = a.timed
    w("\nBy phase (each operation's distinct shapes per phase" + (", and their measured time" if timed else "")
      + "):\n")
    width = 34 if timed else 24
    w(f"{'operation':<40}" + "".join(f" {p[:width]:>{width}}" for p in phases) + "\n")

    def took(sigs: List[Signature]) -> str:
        return f", {_ms(sum(s.time_ns for s in sigs))} ms" if timed and any(s.timed for s in sigs) else ""
    for o in ranked:
        per = {p: [s for s in o.signatures if s.phase == p] for p in phases}
        if by_time:
            per = {p: sorted(ss, key=lambda s: -s.time_ns) for p, ss in per.items()}
        w(f"{o.operation[:40]:<40}" + "".join(
            f" {f'{_n(sum(s.count for s in per[p]))} calls, {len(per[p])} shapes{took(per[p])}':>{width}}"
            for p in phases) + "\n")
        for p in phases:
            for s in per[p][:3]:
                w(f"    {p}: {_n(s.count)}x {format_inputs(s.inputs)}{took([s])}\n")
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


def print_quick(path: str, counts: Dict[str, int], how: str, top: Optional[int] = None,
                out: Optional[TextIO] = None) -> None:
    """--quick: one file's operation counts (analysis.analyze.quick_counts), most called first."""
    w = (out or sys.stdout).write
    w(f"{path}: {sum(counts.values()):,} calls, {len(counts)} operations ({how})\n")
    for op, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top or None]:
        w(f"{n:>12,}  {op}\n")
