"""Replay's results: table, CSV, JSON, and two replays compared."""
from __future__ import annotations

import csv
import json
from typing import Dict, List, Optional, Tuple
from ..render.csvout import write_csv as render_csv
from .calls import (MAX_COPIES, MAX_ITERATIONS, MIN_ITERATIONS, TARGET_NS, WARMUP, Call, Replayed, args_text,
                    inputs_key, inputs_text)
from .timing import rotation_bytes



FIELDS = ["operation", "inputs", "args", "count", "median_us", "p10_us", "p90_us", "total_us",
          "iterations", "device", "output_check", "synthesised", "reason"]


def _notes(r: Replayed) -> str:
    notes = [f"{k}: {v}" for k, v in r.synthesised.items()]
    if r.output_mismatch:
        notes.append("OUTPUT MISMATCH: " + r.output_mismatch)
    return "; ".join(notes)


def as_json(r: Replayed) -> dict:
    d = {"operation": r.call.operation, "inputs": r.call.inputs, "args": r.call.args,
         "count": r.call.count, "median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
         "total_us": r.total_us, "iterations": r.iterations, "input_copies": r.copies,
         "device": r.device or None,
         "outputs_match": None if r.reason else r.output_mismatch is None,
         "output_mismatch": r.output_mismatch, "synthesised": r.synthesised}
    if r.reason is not None:
        d["reason"] = r.reason
    return d


def _us(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.3f}"


def csv_row(r: Replayed) -> list:
    """One result as FIELDS' values."""
    check_text = ("" if r.reason else
                  "ok" if r.output_mismatch is None else "mismatch: " + r.output_mismatch)
    return [r.call.operation, inputs_key(r.call),
            json.dumps(r.call.args) if r.call.args is not None else "", r.call.count,
            _us(r.median_us), _us(r.p10_us), _us(r.p90_us), _us(r.total_us), r.iterations,
            r.device, check_text, "; ".join(f"{k}: {v}" for k, v in r.synthesised.items()),
            r.reason or ""]


def write_csv(results: List[Replayed], f) -> None:
    """--csv: one row per distinct call (render/csvout.py writes it)."""
    render_csv(f, FIELDS, (csv_row(r) for r in results))


def _signature_text(call: Call) -> str:
    a = args_text(call)
    return f"{call.operation}  {inputs_text(call)}" + (f"  [{a}]" if a else "")


def header(paths: List[str], results: List[Replayed], warmup: int, iterations: Optional[int],
           warm_cache: bool = False) -> str:
    import torch
    done = [r for r in results if r.reason is None]
    devices = sorted({r.device for r in done})
    its = (f"{iterations} timed iterations" if iterations else
           f"{MIN_ITERATIONS}-{MAX_ITERATIONS} timed iterations (~{TARGET_NS / 1e6:g} ms) per call")
    caches = ("one set of inputs per call, cached from run to run (--warm-cache)" if warm_cache else
              "each call's runs rotate among copies of its inputs, together 2x L2 (" + ", ".join(
                  f"{rotation_bytes(d) >> 20} MiB on {d}" for d in devices)
              + f") or {MAX_COPIES} copies")
    n_calls = sum(r.call.count for r in results)
    total = sum(r.total_us or 0 for r in done)
    threads = torch.get_num_threads()
    how = (f"on {', '.join(devices)}: torch {torch.__version__}, {threads} thread{'s' if threads != 1 else ''}, "
           f"{warmup} warm-up then {its}; {caches}; floats ~ N(0,1)" if done else
           f"(torch {torch.__version__}): nothing could be replayed")
    return (f"replay of {', '.join(paths)} {how}\n"
            f"{len(results)} distinct calls standing for {n_calls:,} calls: {len(done)} replayed "
            f"({sum(r.call.count for r in done):,} calls), {len(results) - len(done)} not\n"
            f"operator time of the replayed calls: {total / 1000:.3f} ms (median per call x count)\n")


def print_table(paths: List[str], results: List[Replayed], out, warmup: int = WARMUP,
                iterations: Optional[int] = None, warm_cache: bool = False) -> None:
    w = out.write
    w(header(paths, results, warmup, iterations, warm_cache))
    done = [r for r in results if r.reason is None]
    total = sum(r.total_us or 0 for r in done) or 1.0
    if done:
        w(f"\n{'total ms':>10} {'share':>6} {'count':>9} {'median us':>10} {'p10-p90 us':>19}  "
          "operation  inputs  [args]  -- how inputs were made\n")
        for r in done:
            notes = _notes(r)
            spread = f"{r.p10_us:.2f}-{r.p90_us:.2f}"
            w(f"{r.total_us / 1000:>10.3f} {100 * r.total_us / total:>5.1f}% {r.call.count:>9,} "
              f"{r.median_us:>10.2f} {spread:>19}  {_signature_text(r.call)}"
              + (f"  -- {notes}" if notes else "") + "\n")
    missing = [r for r in results if r.reason is not None]
    if missing:
        w(f"\nNot replayed ({len(missing)} distinct calls, {sum(r.call.count for r in missing):,} calls):\n")
        for r in missing:
            w(f"{r.call.count:>9,}  {_signature_text(r.call)}  -- {r.reason}\n")
    mism = sum(r.output_mismatch is not None for r in done)
    if mism:
        w(f"\n{mism} replayed calls gave outputs of other shapes or dtypes than recorded "
          "(OUTPUT MISMATCH above): their work differs from the recorded calls'\n")


# ---------------------------------------------------------------- --compare

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
            json.loads(r["inputs"])
            json.loads(r["args"] or "null")
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
              f"{mb * n / 1000:>11.3f}  {_signature_text(call)}\n")
        if top and len(both) > top:
            w(f"... {len(both) - top} more (--top)\n")
    w(f"\n{len(both)} calls replayed in both: A {ta / 1000:.3f} ms, B {tb / 1000:.3f} ms"
      + (f", speed-up {ta / tb:.2f}x\n" if tb else "\n"))
    only_a, only_b = sum(k not in b for k in a), sum(k not in a for k in b)
    unreplayed = sum(k in b and not (a[k]["median_us"] and b[k]["median_us"]) for k in a)
    if only_a or only_b or unreplayed:
        w(f"only in A: {only_a}, only in B: {only_b}, not replayed in A or B: {unreplayed}\n")


# ---------------------------------------------------------------- the command
