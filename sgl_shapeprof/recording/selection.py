"""Which workers a setting selects (SGLANG_PROFILE_SHAPES_WORKERS) and the
placeholders of a records path; the worker itself, and how its files are
named, is the format's (records/worker.py).
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, Optional

from ..records.worker import DIMENSIONS, Worker


def placeholders(path: str, worker: Worker, rank: Optional[int] = None) -> str:
    """{rank} (rank, by default the TP rank, as before), {tp}, {pp}, {dp},
    {ep}, {worker} (the SGLang-style name) and {host} in a records path,
    filled in."""
    values = {"rank": worker.tp_rank if rank is None else rank, "worker": worker.name, "host": worker.host}
    values.update({d: worker.rank(d) for d in DIMENSIONS})
    return re.sub(r"\{(rank|tp|pp|dp|ep|worker|host)\}", lambda m: str(values[m.group(1)]), path)


def has_placeholder(path: str) -> bool:
    return re.search(r"\{(rank|tp|pp|dp|ep|worker|host)\}", path) is not None


class SelectionError(ValueError):
    """A bad worker selection; str() is one line naming it."""


def parse_selection(value: str, name: str) -> Dict[str, Optional[FrozenSet[int]]]:
    """"pp=*,dp=0", "tp=0-3,ep=1": per dimension the ranks it selects (None:
    all). Dimensions not named are not restricted here."""
    out: Dict[str, Optional[FrozenSet[int]]] = {}
    text = value.strip()
    if not text:
        raise SelectionError(f"{name}={value!r} is empty (say, pp=*,dp=0)")
    for item in text.split(","):
        dim, eq, ranks = item.strip().partition("=")
        dim = dim.strip().lower()
        if not eq or dim not in DIMENSIONS:
            raise SelectionError(f"{name}={value!r}: {item.strip()!r} must be DIM=RANKS with DIM one of "
                                 f"{', '.join(DIMENSIONS)} (say, pp=*,dp=0)")
        ranks = ranks.strip()
        if ranks == "*":
            out[dim] = None
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", ranks)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise SelectionError(f"{name}={value!r}: {dim}={ranks!r} must be *, a rank or a range A-B")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if dim in out and out[dim] is None:
            continue
        out[dim] = frozenset(range(lo, hi + 1)) | (out.get(dim) or frozenset())
    return out


def selects(selection: Dict[str, Optional[FrozenSet[int]]], worker: Worker) -> bool:
    return all(ranks is None or worker.rank(d) in ranks for d, ranks in selection.items())
