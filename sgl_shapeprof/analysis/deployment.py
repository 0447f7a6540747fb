"""A deployment's files, told apart: which workers (pipeline stages, data
parallel replicas, TP and EP ranks) the files gathered are, which of a
deployment's stages and replicas have no file, and which files claim the
same worker."""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List

from ..records.scan import Source
from ..records.worker import ROLES

# Stages and replicas: each runs its own part or its own batches, so a
# missing one is worth saying. TP ranks are often chosen (the default
# records TP rank 0 alone), so their absence is not.
_EXPECTED = (("pp", "PP stage"), ("dp", "DP replica"))


def inventory(sources: List[Source]) -> List[str]:
    """Lines saying what the files cover: empty when none names a worker
    of a deployment beyond TP ranks. A disaggregated deployment's prefill
    and decode workers are two deployments, said apart."""
    workers = [(s, s.worker) for s in sources if s.worker is not None]
    if not any(w.several for _, w in workers):
        return []
    lines: List[str] = []
    roles = sorted({w.role for _, w in workers}, key=lambda r: ROLES.index(r) if r in ROLES else len(ROLES))
    for role in roles:
        lines += _deployment([(s, w) for s, w in workers if w.role == role], role)
    claimed: Dict[str, List[Source]] = defaultdict(list)
    for s, w in workers:
        claimed[w.name].append(s)
    for name, srcs in claimed.items():
        if len(srcs) > 1:
            who = ", ".join(f"{s.path} ({s.worker.host}, pid {s.worker.pid})" for s in srcs)
            lines.append(f"WARNING: {len(srcs)} files claim to be {name}: {who}")
    return lines


def _deployment(workers: list, role) -> List[str]:
    """The lines of one deployment's files (of one role, in disaggregated serving)."""
    lines: List[str] = []
    sizes = {d: sorted({w.size(d) for _, w in workers}) for d in ("tp", "pp", "dp", "ep")}
    mixed = [f"{d.upper()} {' and '.join(map(str, v))}" for d, v in sizes.items() if len(v) > 1]
    which = f"{role} " if role else ""
    if mixed:
        lines.append(f"the {which}files are of different deployments (sizes {'; '.join(mixed)})")
    shape = ", ".join(f"{d.upper()}={v[-1]}" for d, v in sizes.items() if v[-1] > 1) or "TP=1"
    lines.append(f"{which}deployment {shape}: {len(workers)} worker file{'s' if len(workers) != 1 else ''} "
                 f"({', '.join(w.name for _, w in workers)})")
    for dim, what in _EXPECTED:
        size = sizes[dim][-1]
        present = {w.rank(dim) for _, w in workers}
        lines += [f"{which}{what} {r} of {size}: no file" for r in range(size) if r not in present]
    return lines
