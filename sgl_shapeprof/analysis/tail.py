"""The calls before a crash: when a records file says its process died, the
last calls of each pass that was running then, the call in flight first.

Records do not name threads, but a pass belongs to the thread that began it
(docs/FORMAT.md): the passes open at the end are the threads that were
logging. The summary names them (`open_passes`: exact when a fatal signal's
handler wrote it, as of the last snapshot after a SIGKILL); the pass of a
cut last record was open too. A file without that field (an older one, or
one without a summary) falls back on the passes with a record among its
last n.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, TextIO, Tuple

from ..records.reader import RecordReader
from ..records.scan import Source
from ..records.values import format_inputs, format_value

DEFAULT_TAIL = 20
KEEP_PASSES = 4096  # passes followed at once while reading (the oldest idle one is let go)


def died(src: Source) -> Optional[str]:
    """How the file says its process died, or None if it closed (or cannot tell)."""
    if src.report.cut_last_line:
        return "its last record was cut: the process died in that call"
    ended = (src.summary or {}).get("ended_by")
    if ended == "running":
        return ("its summary says it did not close (ended_by: running): the process was killed "
                "(SIGKILL), or is still running")
    if ended and ended != "close":
        return f"its summary says the process ended by {ended}"
    return None


@dataclass
class PassTail:
    """One pass's last calls, latest first."""
    forward_pass: int
    graph: Optional[int]
    phase: Optional[str]
    records: List[dict]
    after: int          # records of other passes written after its last one
    in_flight: bool     # its latest record is the call the process died in


@dataclass
class Tail:
    path: str
    how: str
    passes: List[PassTail] = field(default_factory=list)
    deduplicated: bool = False


def crash_tail(src: Source, n: int = DEFAULT_TAIL) -> Optional[Tail]:
    """The last n calls of each pass open at the end, when the file says its
    process died; None otherwise."""
    how = died(src)
    if how is None or n <= 0:
        return None
    named = (src.summary or {}).get("open_passes")
    open_passes = {(fp, None) for fp in named if isinstance(fp, int)} if isinstance(named, list) else None
    lasts: Deque[Tuple[int, Optional[int]]] = deque(maxlen=n)  # the file's last n records' passes
    per: Dict[Tuple[int, Optional[int]], Deque[Tuple[int, dict]]] = {}
    total = 0
    for i, rec in enumerate(RecordReader(src.path)):
        total = i + 1
        fp = rec.get("forward_pass")
        g = rec.get("graph")
        key = (fp if isinstance(fp, int) else 0, g if isinstance(g, int) else None)
        q = per.pop(key, None) or deque(maxlen=n)
        q.append((i, rec))
        per[key] = q  # most recently written last
        if len(per) > KEEP_PASSES:
            del per[next(iter(per))]
        lasts.append(key)
    tail = Tail(src.path, how, deduplicated=src.deduplicated)
    shown = set(lasts) if open_passes is None else set(open_passes)
    shown |= {k for k in list(lasts)[-1:] if per[k][-1][1].get("incomplete")}  # the call in flight
    for key in shown:
        q = per.get(key)
        if not q:  # open, and nothing written in it (or long before: let go while reading)
            tail.passes.append(PassTail(key[0], key[1], None, [], total, False))
            continue
        recs = [r for _, r in reversed(q)]
        tail.passes.append(PassTail(key[0], key[1], recs[0].get("phase"), recs,
                                    total - 1 - q[-1][0], bool(recs[0].get("incomplete"))))
    tail.passes.sort(key=lambda p: (not p.in_flight, p.after))
    return tail


def _line(rec: dict) -> str:
    cid = rec.get("call_id")
    text = f"call {cid if cid is not None else '?'}  {rec.get('operation')}  {format_inputs(rec.get('inputs') or {})}"
    if rec.get("incomplete"):
        return text + "  <- in flight: the process died in this call"
    err = rec.get("error")
    if isinstance(err, dict):
        msg = str(err.get("error_message", "")).strip().split("\n", 1)[0]
        return text + f"  raised {err.get('error_type')}: {msg}"
    return text + " -> " + format_value(rec.get("outputs"))


def write_tail(tail: Tail, out: TextIO) -> None:
    """The tail as text, for people."""
    w = out.write
    if not tail.passes:  # killed between passes: nothing was cut short
        w(f"\n{tail.path}: {tail.how}; no pass was open at its last snapshot, so no call was cut short\n")
        return
    n = max((len(p.records) for p in tail.passes), default=0)
    w(f"\nLast calls before the end of {tail.path} ({tail.how}); per pass (a pass is one thread's), "
      f"latest first, at most {n}:\n")
    if tail.deduplicated:
        w("  deduplicated file: a call that repeated a written signature is not in it, so these are the last "
          "calls written, and a repeat in flight at the end left no record\n")
    for p in tail.passes:
        what = f"graph {p.graph} capture" if p.graph is not None else f"forward pass {p.forward_pass}"
        if p.phase:
            what += f" ({p.phase})"
        where = ("its last call was in flight" if p.in_flight else
                 "open, with no record in the file" if not p.records else
                 "its last call is the file's last record" if p.after == 0 else
                 f"{p.after} records of other passes follow its last call")
        w(f"  {what}: {where}\n")
        for rec in p.records:
            w(f"    {_line(rec)}\n")


def tail_json(tail: Tail) -> dict:
    return {"how": tail.how, "deduplicated": tail.deduplicated,
            "passes": [{"forward_pass": p.forward_pass, "graph": p.graph, "phase": p.phase,
                        "in_flight": p.in_flight, "records_after": p.after, "records": p.records}
                       for p in tail.passes]}
