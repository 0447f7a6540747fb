"""How much of a run's calls ran on tuned configs (`sgl-shapeprof tune`):
per phase, the calls on a tuned file, on one tuned for their own M, and how
far the others fall back; and the per-(key, phase, M) table --csv writes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from .moe import MoeUse


@dataclass
class PhaseCoverage:
    phase: str
    calls: int = 0
    tuned: int = 0        # calls whose key has a tuned file
    exact: int = 0        # ... tuned for their own M
    distance: int = 0     # sum over calls of |M - tuned M| (tuned calls)

    @property
    def other_m(self) -> int:
        return self.tuned - self.exact

    def pct(self, n: int) -> float:
        return 100.0 * n / self.calls if self.calls else 0.0


def coverage(uses: List[MoeUse]) -> Dict[str, PhaseCoverage]:
    """Per phase, and "all": calls on a tuned file, on a config tuned for
    their own M, and how far the others fall back."""
    out: Dict[str, PhaseCoverage] = {}
    for u in uses:
        for phase, ms in u.calls.items():
            for pc in (out.setdefault(phase, PhaseCoverage(phase)), out.setdefault("all", PhaseCoverage("all"))):
                for m, c in ms.items():
                    pc.calls += c
                    t = u.nearest(m)
                    if t is not None:
                        pc.tuned += c
                        pc.exact += c if t == m else 0
                        pc.distance += c * abs(t - m)
    return out


CSV_FIELDS = ["E", "N", "dtype", "block_shape", "per_channel_quant", "device", "triton", "phase",
              "m", "calls", "file", "tuned_m", "distance"]


def csv_rows(uses: List[MoeUse], device: str, triton: Optional[str]) -> List[list]:
    rows = []
    for u in uses:
        for p, ms in sorted(u.calls.items()):
            for m, c in sorted(ms.items()):
                t = u.nearest(m)
                rows.append([u.key.e, u.key.n, u.key.dtype or "",
                             "" if not u.key.block_shape else f"{u.key.block_shape[0]}x{u.key.block_shape[1]}",
                             u.key.per_channel_quant, device, triton or "", p, m, c,
                             (u.lookup.path if u.lookup else None) or "",
                             "" if t is None else t, "" if t is None else abs(t - m)])
    return rows
