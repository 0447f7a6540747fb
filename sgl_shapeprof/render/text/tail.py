"""The calls before a crash (analysis/tail.py) as text, after `analyze`'s."""
from __future__ import annotations

from typing import TextIO

from ...analysis.tail import Tail
from ...records.values import format_inputs, format_value


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
