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
from typing import Deque, Dict, List, Optional, Tuple

from ..records.reader import RecordReader
from ..records.scan import Source

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

