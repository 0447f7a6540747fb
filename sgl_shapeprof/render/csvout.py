"""CSV: the one place the package writes it. Rows are lists in the order of
their header; a list-valued or dict-valued cell is the caller's to turn into
text first (the JSON of it, say)."""
from __future__ import annotations

import csv
import json
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, TextIO

from ..analysis.gemm import FIELDS as GEMM_FIELDS
from ..analysis.gemm import Gemm
from ..analysis.tune.coverage import CSV_FIELDS as TUNE_FIELDS
from ..analysis.tune.coverage import csv_rows
from ..analysis.tune.result import TuneResult
from ..records.signature import Signature
from ..records.values import format_value
from .jsonout import COST_FIELDS, cost_row_json

if TYPE_CHECKING:
    from ..replay.calls import Replayed


def writer(out: TextIO, header: Sequence[str]) -> Callable[[Sequence[Any]], Any]:
    """Writes the header now; returns the function that writes one row."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    return w.writerow


def write_csv(out: TextIO, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """header, then rows, "\\n"-terminated."""
    row = writer(out, header)
    for r in rows:
        row(r)


def tune_csv(r: TuneResult, out: TextIO) -> None:
    """`tune --csv`: one row per fused-MoE key, phase and M."""
    write_csv(out, TUNE_FIELDS, csv_rows(r.moe, r.device, r.triton))


def gemm_csv(shown: List[Gemm], out: TextIO) -> None:
    write_csv(out, GEMM_FIELDS, ([getattr(g, f) for f in GEMM_FIELDS] for g in shown))


def cost_csv(rows: list, out: TextIO) -> None:
    """`cost --csv`: the JSON's rows, inputs and outputs as their JSON."""
    def flat(r: tuple) -> list:
        d: Dict[str, Any] = cost_row_json(r)
        d["inputs"] = json.dumps(d["inputs"])
        d["outputs"] = json.dumps(d["outputs"])
        return [d[f] for f in COST_FIELDS]
    write_csv(out, COST_FIELDS, (flat(r) for r in rows))


REPLAY_FIELDS = ["operation", "inputs", "args", "count", "median_us", "p10_us", "p90_us", "total_us",
                 "iterations", "device", "output_check", "synthesised", "reason", "timing_doubts",
                 "others_runnable", "threads"]


def _us(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.3f}"


def replay_csv(results: List[Replayed], out: TextIO) -> None:
    """`replay --csv`: one row per distinct call, its inputs without devices
    (two devices' replays of one file match up in --compare)."""
    from ..replay.calls import inputs_key  # here: the other commands' CSV need no replay package

    def row(r: Replayed) -> list:
        check_text = ("" if r.reason else
                      "ok" if r.output_mismatch is None else "mismatch: " + r.output_mismatch)
        return [r.call.operation, inputs_key(r.call),
                json.dumps(r.call.args) if r.call.args is not None else "", r.call.count,
                _us(r.median_us), _us(r.p10_us), _us(r.p90_us), _us(r.total_us), r.iterations,
                r.device, check_text, "; ".join(f"{k}: {v}" for k, v in r.synthesised.items()),
                r.reason or "", "; ".join(r.timing_doubts),
                "" if r.others_runnable is None else r.others_runnable, r.threads or ""]
    write_csv(out, REPLAY_FIELDS, (row(r) for r in results))


class Timeline:
    """`analyze --timeline FILE.csv`: one row per kept record, in file order
    (the scan's on_record callback)."""

    COLUMNS = ["call_id", "operation", "op_count", "output_elements", "output_shape"]

    def __init__(self, f: TextIO):
        self.row = writer(f, self.COLUMNS)
        self.running: Dict[str, int] = {}

    def __call__(self, call_id: int, sig: Signature, n: int) -> None:
        # op_count: calls of this operation so far, this record's included
        c = self.running.get(sig.operation, 0) + n
        self.running[sig.operation] = c
        shape: Optional[str] = (json.dumps(sig.outputs.get("shape")) if isinstance(sig.outputs, dict)
                                else format_value(sig.outputs) if sig.outputs is not None else "")
        self.row([call_id, sig.operation, c, sig.out_elements, shape])

