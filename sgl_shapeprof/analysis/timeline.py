"""A timed recording as a timeline: each call where it ran on the clock
(FORMAT.md: the summary's time_origin_ns plus a record's start_us, for
time_us), the passes around the calls, and the time in each pass that no
recorded call covers.

Records do not say their thread, so calls are laid out in lanes: a call
goes to the first lane where it nests inside, or follows, what is open
there. One thread's calls nest, so they share a lane; calls of threads that
overlap go to further lanes."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..records.filter import Filter
from ..records.kernels import join, kernels_beside
from ..records.reader import InputError, ReadReport, RecordReader, SummaryError, open_records, read_summary
from ..records.scan import ns_of_us
from ..records.signature import signature_of
from ..records.values import format_inputs, format_value
from ..records.worker import Worker


@dataclass
class Call:
    """One recorded call on the clock (CLOCK_MONOTONIC, ns)."""
    start: int
    dur: int
    operation: str
    call_id: object
    forward_pass: object
    phase: Optional[str]
    graph: object
    inputs: str
    outputs: str
    within: Optional[str] = None
    error: Optional[str] = None

    @property
    def end(self) -> int:
        return self.start + self.dur


@dataclass
class PassSpan:
    """A forward pass (or a graph capture) as its recorded calls span it:
    from its first call's start to its last call's end; busy: the time
    under at least one recorded call."""
    forward_pass: object
    graph: object
    phase: Optional[str]
    start: int
    end: int
    calls: int = 0
    busy: int = 0


@dataclass
class FileTimeline:
    path: str
    label: str
    host: Optional[str]
    lanes: List[List[Call]] = field(default_factory=list)
    passes: List[PassSpan] = field(default_factory=list)
    calls: int = 0
    deduplicated: bool = False
    stood_for: int = 0  # the calls its records stand for (more than its calls with dedupe)
    report: ReadReport = field(default_factory=ReadReport)  # what the reader could not take
    no_time: int = 0  # records with no readable start_us and time_us: left out (said)
    # a kernels-timed recording's GPU kernels (FORMAT.md "Kernels"), of the
    # calls kept and those no record explains
    kernels: List["KernelSlice"] = field(default_factory=list)
    kernels_note: Optional[str] = None  # why the kernels file beside it could not be read


@dataclass
class KernelSlice:
    """A kernel on its device and stream (CLOCK_MONOTONIC, ns), and the
    record it is under (None: unexplained)."""
    start: int
    dur: int
    name: str
    device: int
    stream: int
    grid: Tuple[int, ...]
    block: Tuple[int, ...]
    call_id: Optional[int]


def _untimed(path: str, why: str) -> InputError:
    return InputError(f"{path}: {why}: a timeline needs each call's start; record with --time "
                      "(SHAPEPROF_TIME=1)")


def read_timeline(path: str, flt: Optional[Filter] = None) -> FileTimeline:
    """The calls of one timed records file on its machine's clock.
    InputError when it was not timed or predates records' start_us."""
    flt = flt or Filter()
    open_records(path).close()  # a records file, or InputError saying what it is
    try:
        summary = read_summary(path)
    except SummaryError as e:
        raise InputError(f"{path}: {e}: its time origin (time_origin_ns) is in the summary") from None
    if summary.get("timed") is not True:
        raise _untimed(path, "not timed")
    origin = summary.get("time_origin_ns")
    if isinstance(origin, bool) or not isinstance(origin, int) or origin < 0:
        raise _untimed(path, "its summary has no time_origin_ns (recorded by sgl_shapeprof before "
                             "records had start_us)")
    worker = Worker.from_json(summary.get("worker"))
    label = worker.name if worker is not None and worker.several else os.path.basename(path)
    tl = FileTimeline(path=path, label=label, host=worker.host if worker is not None else None)
    tl.deduplicated = summary.get("dedupe_enabled") is True
    counts = summary.get("signature_counts") if tl.deduplicated else None
    counts = counts if isinstance(counts, dict) else {}  # call_id -> the calls its record stands for
    lo, hi = flt.passes or (0, 2**62)
    calls: List[Call] = []
    reader = RecordReader(path)
    tl.report = reader.report
    for rec in reader:
        start, dur = ns_of_us(rec.get("start_us")), ns_of_us(rec.get("time_us"))
        fp = rec.get("forward_pass")
        if not isinstance(fp, int) or not lo <= fp <= hi:
            continue
        if start is None or dur is None:
            tl.no_time += 1
            continue
        if not flt.keeps(signature_of(rec)):
            continue
        n = counts.get(str(rec.get("call_id")), 1)
        tl.stood_for += n if isinstance(n, int) and n > 0 else 1
        err = rec.get("error")
        calls.append(Call(
            start=origin + start, dur=dur, operation=str(rec.get("operation")), call_id=rec.get("call_id"),
            forward_pass=fp, phase=rec.get("phase"), graph=rec.get("graph"),
            inputs=format_inputs(rec.get("inputs") if isinstance(rec.get("inputs"), dict) else None),
            outputs=format_value(rec.get("outputs")), within=rec.get("within"),
            error=str(err.get("error_type")) if isinstance(err, dict) else None))
    tl.calls = len(calls)
    tl.lanes = lay_out(calls)
    tl.passes = pass_spans(calls)
    try:
        tl.kernels = _kernels(path, {c.call_id for c in calls})
    except InputError as e:
        tl.kernels_note = str(e)
    return tl


def _kernels(path: str, kept: set) -> List[KernelSlice]:
    """The kernels beside a records file: those under a kept call, and
    those no record explains (filters keep them: they are the window's)."""
    kf = kernels_beside(path)
    if kf is None:
        return []
    j = join(kf)
    out = [KernelSlice(k.start_ns, k.ns, k.name, k.device, k.stream, k.grid, k.block, cid)
           for cid, ck in j.by_call.items() if cid in kept for k in ck.kernels]
    out += [KernelSlice(k.start_ns, k.ns, k.name, k.device, k.stream, k.grid, k.block, None)
            for k in j.unexplained]
    return sorted(out, key=lambda k: (k.device, k.stream, k.start))


def lay_out(calls: List[Call]) -> List[List[Call]]:
    """Lanes in which calls nest or follow one another: each call, in order
    of start (the longer first), to the first lane whose open calls it fits
    inside or after."""
    lanes: List[List[Call]] = []
    open_: List[List[Call]] = []  # per lane: the calls still open, outermost first
    for c in sorted(calls, key=lambda c: (c.start, -c.dur)):
        for lane, stack in zip(lanes, open_):
            while stack and stack[-1].end <= c.start:
                stack.pop()
            if not stack or c.end <= stack[-1].end:
                lane.append(c)
                stack.append(c)
                break
        else:
            lanes.append([c])
            open_.append([c])
    return lanes


def pass_spans(calls: List[Call]) -> List[PassSpan]:
    """Each pass's (or capture's) span, calls and busy time, by start."""
    by_pass: Dict[Tuple[str, str], List[Call]] = {}
    for c in calls:
        by_pass.setdefault((repr(c.forward_pass), repr(c.graph)), []).append(c)
    spans = []
    for cs in by_pass.values():
        cs.sort(key=lambda c: c.start)
        busy, cur_s, cur_e = 0, cs[0].start, cs[0].end
        for c in cs[1:]:  # the union of the calls' intervals
            if c.start > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = c.start, c.end
            else:
                cur_e = max(cur_e, c.end)
        busy += cur_e - cur_s
        spans.append(PassSpan(forward_pass=cs[0].forward_pass, graph=cs[0].graph, phase=cs[0].phase,
                              start=cs[0].start, end=max(c.end for c in cs), calls=len(cs), busy=busy))
    spans.sort(key=lambda s: s.start)
    return spans
