"""Which worker of a deployment this process is: its tensor, pipeline, data
and expert parallel ranks (as the server itself sees them), its host and
pid; how it names its files; which workers a setting selects.

A deployment is TP x PP x DP (x EP) processes, often over several nodes.
The names follow SGLang's own profiler: `TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-{ep}]`,
naming only the dimensions whose size is over 1, so that the files of one
deployment never share a name and gathering every node's folder into one
overwrites nothing.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import asdict, dataclass, field
from typing import Dict, FrozenSet, Optional

DIMENSIONS = ("tp", "dp", "pp", "ep")  # SGLang's order in its file names


@dataclass(frozen=True)
class Worker:
    """One worker's place in the deployment (ranks count from 0)."""
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    dp_rank: int = 0
    dp_size: int = 1
    ep_rank: int = 0
    ep_size: int = 1
    attn_dp_rank: Optional[int] = None  # SGLang's DP attention, when on
    attn_dp_size: Optional[int] = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    source: str = "rank"  # where the ranks were read: the server's state, or the rank given

    def rank(self, dim: str) -> int:
        return getattr(self, f"{dim}_rank")

    def size(self, dim: str) -> int:
        return getattr(self, f"{dim}_size")

    @property
    def name(self) -> str:
        """TP-0, TP-1-PP-1, TP-0-DP-1-PP-0-EP-0: SGLang's spelling."""
        return "-".join(f"{d.upper()}-{self.rank(d)}" for d in DIMENSIONS
                        if d == "tp" or self.size(d) > 1)

    @property
    def several(self) -> bool:
        """Whether it is one of several workers along a dimension beyond TP."""
        return any(self.size(d) > 1 for d in DIMENSIONS[1:])

    def describe(self) -> str:
        """'TP 0/2, PP 1/2 on node-a (pid 41)': for headers and messages."""
        parts = [f"{d.upper()} {self.rank(d)}/{self.size(d)}" for d in DIMENSIONS
                 if d == "tp" or self.size(d) > 1]
        if self.attn_dp_size and self.attn_dp_size > 1:
            parts.append(f"attention DP {self.attn_dp_rank}/{self.attn_dp_size}")
        return f"{', '.join(parts)} on {self.host} (pid {self.pid})"

    def as_json(self) -> dict:
        """The summary's "worker" (FORMAT.md): every field, None ones left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, obj: object) -> Optional["Worker"]:
        """A summary's "worker", or None when it has none or not this shape."""
        if not isinstance(obj, dict):
            return None
        known = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        ints = [k for k in known if k not in ("host", "source")]
        if any(not isinstance(known[k], int) or isinstance(known[k], bool) for k in ints if known[k] is not None):
            return None
        try:
            return cls(**known)
        except TypeError:
            return None


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
