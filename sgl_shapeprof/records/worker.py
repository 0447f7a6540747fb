"""Which worker of a deployment wrote a file: its tensor, pipeline, data
and expert parallel ranks (as the server itself sees them), its host and
pid (the summary's "worker", docs/FORMAT.md), and how its files are named
and told apart: part of the format, so written and read by this one module.

A deployment is TP x PP x DP (x EP) processes, often over several nodes.
The names follow SGLang's own profiler: `TP-{tp}[-DP-{dp}][-PP-{pp}][-EP-{ep}]`,
naming only the dimensions whose size is over 1, so that the files of one
deployment never share a name and gathering every node's folder into one
overwrites nothing. In disaggregated serving (prefill and decode workers
apart) the role goes first: `prefill-TP-0`, `decode-TP-1`.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import asdict, dataclass, field
from typing import Optional, Tuple

DIMENSIONS = ("tp", "dp", "pp", "ep")  # SGLang's order in its file names
# disaggregated serving's workers (SGLang's disaggregation_mode): what a whole
# worker serves, not what a pass does (a phase: records/phases.py)
PREFILL_ROLE, DECODE_ROLE = "prefill", "decode"
ROLES = (PREFILL_ROLE, DECODE_ROLE)


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
    role: Optional[str] = None  # "prefill" or "decode" in disaggregated serving, else None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    source: str = "rank"  # where the ranks were read: the server's state, or the rank given

    def rank(self, dim: str) -> int:
        return getattr(self, f"{dim}_rank")

    def size(self, dim: str) -> int:
        return getattr(self, f"{dim}_size")

    @property
    def name(self) -> str:
        """TP-0, TP-1-PP-1, TP-0-DP-1-PP-0-EP-0: SGLang's spelling; prefill-TP-0
        for a disaggregated deployment's worker."""
        ranks = "-".join(f"{d.upper()}-{self.rank(d)}" for d in DIMENSIONS if d == "tp" or self.size(d) > 1)
        return f"{self.role}-{ranks}" if self.role else ranks

    @property
    def several(self) -> bool:
        """Whether it is one of several workers along a dimension beyond TP,
        or a disaggregated deployment's (its prefill and decode workers
        share TP ranks)."""
        return self.role is not None or any(self.size(d) > 1 for d in DIMENSIONS[1:])

    def describe(self) -> str:
        """'TP 0/2, PP 1/2 on node-a (pid 41)': for headers and messages."""
        parts = [f"{d.upper()} {self.rank(d)}/{self.size(d)}" for d in DIMENSIONS
                 if d == "tp" or self.size(d) > 1]
        if self.attn_dp_size and self.attn_dp_size > 1:
            parts.append(f"attention DP {self.attn_dp_rank}/{self.attn_dp_size}")
        role = f"{self.role} worker, " if self.role else ""
        return f"{role}{', '.join(parts)} on {self.host} (pid {self.pid})"

    def as_json(self) -> dict:
        """The summary's "worker" (FORMAT.md): every field, None ones left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, obj: object) -> Optional["Worker"]:
        """A summary's "worker", or None when it has none or not this shape."""
        if not isinstance(obj, dict):
            return None
        known = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        ints = [k for k in known if k not in ("host", "source", "role")]
        if known.get("role") is not None and known["role"] not in ROLES:
            known["role"] = None  # a role this reader does not know: the worker without it
        if any(not isinstance(known[k], int) or isinstance(known[k], bool) for k in ints if known[k] is not None):
            return None
        try:
            return cls(**known)
        except TypeError:
            return None

    def label(self, rank: Optional[int] = None) -> str:
        """What tells this worker's files apart: SGLang's name where the
        deployment has PP, DP or EP workers or is disaggregated, else
        rank<N> (N: rank, by default the TP rank). label_order() reads it
        back."""
        return self.name if self.several else f"rank{self.tp_rank if rank is None else rank}"


_RANK_IN_NAME = re.compile(r"rank(\d+)")
_WORKER_IN_NAME = re.compile(r"(TP|DP|PP|EP)-(\d+)")
_ROLE_IN_NAME = re.compile(r"(?:^|[.\-_/])(prefill|decode)-TP-")


def label_order(name: str) -> Tuple[int, ...]:
    """A file name's worker, as a sort key: shapes.rank3.jsonl -> (3,);
    x-TP-1-PP-0.shapes.jsonl -> (role, pp, dp, tp, ep) = (0, 0, 0, 1, 0):
    prefill workers, then decode ones, then pipeline stages, replicas, TP
    ranks; (-1,) for neither."""
    found = dict(_WORKER_IN_NAME.findall(name))
    if found:
        role = _ROLE_IN_NAME.search(name)
        return (ROLES.index(role.group(1)) if role else 0,) + \
            tuple(int(found.get(d, 0)) for d in ("PP", "DP", "TP", "EP"))
    m = _RANK_IN_NAME.search(name)
    return (int(m.group(1)),) if m else (-1,)


def rank_in_name(name: str) -> Optional[int]:
    """N of a rank<N> label in a file name, or None."""
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None
