"""A timeline as a Chrome / Perfetto trace (the Trace Event Format's JSON:
ui.perfetto.dev and chrome://tracing open it): a process per records
file, a track of its passes, and its calls in lanes that nest, each call a
slice named by its operation with its shapes as arguments. Every string
from a records file goes through json.dumps: it is data in the trace, never
markup or code."""
from __future__ import annotations

import json
from typing import Dict, List, TextIO

from ..analysis.timeline import Call, FileTimeline, PassSpan

PASS_TRACK = 0  # each process's track of passes; its lanes of calls follow


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def _pass_name(p: PassSpan) -> str:
    if p.forward_pass == 0 and p.graph is not None:
        return f"capture of graph {p.graph}"
    return f"pass {p.forward_pass}" + (f" ({p.phase})" if p.phase else "")


def _call_args(c: Call) -> Dict[str, object]:
    args: Dict[str, object] = {"call_id": c.call_id, "inputs": c.inputs, "outputs": c.outputs,
                               "forward_pass": c.forward_pass}
    for k in ("phase", "graph", "within", "error"):
        v = getattr(c, k)
        if v is not None:
            args[k] = v
    return args


def trace_events(timelines: List[FileTimeline], base: int) -> List[dict]:
    """The events; times in µs after base (ns on the recording clock)."""
    ev: List[dict] = []
    for pid, tl in enumerate(timelines, 1):
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": PASS_TRACK,
                   "args": {"name": tl.label}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": PASS_TRACK,
                   "args": {"sort_index": pid}})
        names = ["passes"] + ["calls" if i == 0 else f"calls, overlapping those above ({i + 1})"
                              for i in range(len(tl.lanes))]
        for tid, name in enumerate(names):
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
        for p in tl.passes:
            span = p.end - p.start
            ev.append({"ph": "X", "cat": "pass", "name": _pass_name(p), "pid": pid, "tid": PASS_TRACK,
                       "ts": _us(p.start - base), "dur": _us(span),
                       "args": {"calls": p.calls, "in_calls_us": _us(p.busy),
                                "between_calls_us": _us(span - p.busy)}})
        for tid, lane in enumerate(tl.lanes, 1):
            for c in lane:
                ev.append({"ph": "X", "cat": "call", "name": c.operation, "pid": pid, "tid": tid,
                           "ts": _us(c.start - base), "dur": _us(c.dur), "args": _call_args(c)})
        # the GPU: a track per device and stream, after the calls' lanes
        streams = sorted({(k.device, k.stream) for k in tl.kernels})
        track = {ds: len(names) + i for i, ds in enumerate(streams)}
        for (dev, stream), tid in track.items():
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": f"GPU {dev}, stream {stream} (kernels)"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
        for k in tl.kernels:
            args: Dict[str, object] = {"grid": list(k.grid), "block": list(k.block)}
            if k.call_id is not None:
                args["call_id"] = k.call_id
            ev.append({"ph": "X", "cat": "kernel" if k.call_id is not None else "kernel, unexplained",
                       "name": k.name, "pid": pid, "tid": track[(k.device, k.stream)],
                       "ts": _us(k.start - base), "dur": _us(k.dur), "args": args})
    return ev


def write_trace(out: TextIO, timelines: List[FileTimeline], notes: List[str]) -> int:
    """Writes the trace, an event a line; the events written."""
    starts = [p.start for tl in timelines for p in tl.passes] + [k.start for tl in timelines for k in tl.kernels]
    base = min(starts) if starts else 0
    events = trace_events(timelines, base)
    out.write('{"displayTimeUnit": "ns",\n "otherData": ')
    out.write(json.dumps({"producer": "sgl_shapeprof trace", "clock": "CLOCK_MONOTONIC",
                          "clock_base_ns": base, "notes": notes}))
    out.write(',\n "traceEvents": [\n')
    for i, e in enumerate(events):
        out.write(("" if i == 0 else ",\n") + json.dumps(e))
    out.write("\n]}\n")
    return len(events)
