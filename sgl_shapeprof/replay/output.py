"""Two replays compared (--compare): their CSVs read back, per call the
speed-up of one over the other. The table, CSV and JSON of one replay are
render/'s (text/replay.py, csvout.py, jsonout.py)."""
from __future__ import annotations

import csv
import json
from typing import Dict, Optional, Tuple

from ..records import untrusted
from .calls import Call, signature_text


def read_csv(path: str) -> Dict[Tuple[str, str, str], dict]:
    """A replay CSV's rows by (operation, inputs, args); ValueError when it is not one."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise ValueError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    if not rows or not {"operation", "inputs", "args", "median_us", "count"} <= set(rows[0]):
        raise ValueError(f"{path} is not a replay CSV (sgl-shapeprof replay FILE --csv {path})")
    try:
        for r in rows:
            untrusted.loads(r["inputs"])
            untrusted.loads(r["args"] or "null")
    except ValueError:
        raise ValueError(f"{path} is not a replay CSV: its inputs/args are not JSON") from None
    return {(r["operation"], r["inputs"], r["args"]): r for r in rows}


def compare(a_path: str, b_path: str, out, top: Optional[int] = None) -> None:
    """Per-signature speed-up of B over A (A's median / B's), A's costliest first."""
    a, b = read_csv(a_path), read_csv(b_path)
    w = out.write

    def dev(rows: Dict) -> str:
        return ", ".join(sorted({r["device"] for r in rows.values() if r.get("device")})) or "-"
    w(f"A: {a_path} ({dev(a)})\nB: {b_path} ({dev(b)})\n")
    both = [(k, ra, b[k]) for k, ra in a.items() if k in b and ra["median_us"] and b[k]["median_us"]]
    both.sort(key=lambda x: -float(x[1]["total_us"] or 0))
    ta = sum(float(ra["total_us"]) for _, ra, _ in both)
    tb = sum(float(rb["median_us"]) * int(ra["count"]) for _, ra, rb in both)
    if both:
        w(f"\n{'A us':>10} {'B us':>10} {'speed-up':>9} {'count':>9} {'A total ms':>11} {'B total ms':>11}"
          "  operation  inputs  [args]\n")
        for (op, inputs, args), ra, rb in both[:top or None]:
            ma, mb, n = float(ra["median_us"]), float(rb["median_us"]), int(ra["count"])
            call = Call(op, json.loads(inputs), json.loads(args) if args else None, None, None, n)
            w(f"{ma:>10.2f} {mb:>10.2f} {ma / mb:>8.2f}x {n:>9,} {ma * n / 1000:>11.3f} "
              f"{mb * n / 1000:>11.3f}  {signature_text(call)}\n")
        if top and len(both) > top:
            w(f"... {len(both) - top} more (--top)\n")
    w(f"\n{len(both)} calls replayed in both: A {ta / 1000:.3f} ms, B {tb / 1000:.3f} ms"
      + (f", speed-up {ta / tb:.2f}x\n" if tb else "\n"))
    only_a, only_b = sum(k not in b for k in a), sum(k not in a for k in b)
    unreplayed = sum(k in b and not (a[k]["median_us"] and b[k]["median_us"]) for k in a)
    if only_a or only_b or unreplayed:
        w(f"only in A: {only_a}, only in B: {only_b}, not replayed in A or B: {unreplayed}\n")
