"""CUDA-graph batch sizes (`sgl-shapeprof tune --cuda-graph-bs`): the
captured decode sizes, their replays and the real batch sizes they served,
and the fewest sizes that cover a share of the decode work."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ...records import phases
from ...records.graphs import GRAPH_FAMILY
from ...records.scan import Source
from .moe import MoeUse, moe_key_of


@dataclass
class GraphSize:
    """One captured decode size: its replays and the real batch sizes they
    served (where the integration knew them: summaries' "real_sizes")."""
    size: int
    replays: int = 0
    served: Dict[int, int] = field(default_factory=dict)  # real batch size -> replays

    @property
    def known(self) -> int:
        return sum(self.served.values())

    @property
    def mean_real(self) -> Optional[float]:
        return sum(r * n for r, n in self.served.items()) / self.known if self.known else None

    @property
    def padding(self) -> Optional[float]:
        """The share of this graph's rows that were padding, over the
        replays whose real size is known."""
        return None if not self.known or not self.size else 1.0 - self.mean_real / self.size  # type: ignore[operator]


@dataclass
class GraphSizes:
    """What the decode passes' batch sizes say about SGLang's --cuda-graph-bs."""
    share: float                               # the share of calls the suggested list covers
    graphs: Dict[int, GraphSize] = field(default_factory=dict)  # captured decode size -> its replays
    eager: Dict[int, int] = field(default_factory=dict)     # real batch size (eager decode) -> calls
    per_replay: Dict[int, float] = field(default_factory=dict)  # captured size -> fused-MoE calls per replay
    unit: str = "replays"                     # what `batches` counts
    unweighed: List[int] = field(default_factory=list)  # sizes whose replays could not be weighed (left out)
    batches: Dict[int, float] = field(default_factory=dict)  # real batch size -> decode work (unit)
    suggested: List[int] = field(default_factory=list)
    waste_now: Optional[float] = None         # padded share of the real sizes on the captured sizes
    waste_suggested: Optional[float] = None   # ... on the suggested list

    def above(self, sizes: List[int]) -> float:
        """The share of `batches` larger than every size: they run without a graph."""
        total = sum(self.batches.values())
        top = max(sizes, default=0)
        return sum(c for b, c in self.batches.items() if b > top) / total if total else 0.0

    @property
    def replays(self) -> Dict[int, int]:
        return {b: g.replays for b, g in self.graphs.items()}

    @property
    def unused(self) -> List[int]:
        return sorted(b for b, g in self.graphs.items() if not g.replays)

    @property
    def unknown(self) -> int:
        """Replays whose real batch size is not in the summaries."""
        return sum(g.replays - g.known for g in self.graphs.values())


def padding_waste(real: Dict[int, float], sizes: List[int]) -> Optional[float]:
    """The share of the padded rows that are padding, over the batches that
    fit a size (the next size up, as SGLang pads); None: none fits."""
    rows = padded = 0.0
    for bs, c in real.items():
        up = min((s for s in sizes if s >= bs), default=None)
        if up is not None:
            rows += c * bs
            padded += c * up
    return None if not padded else 1.0 - rows / padded




def graph_sizes(sources: List[Source], uses: List[MoeUse], share: float) -> GraphSizes:
    """The captured decode graph sizes, their replays and the real batch
    sizes those served (the summaries); the real batch sizes of decode
    passes that ran eagerly; the fewest sizes that cover `share` percent of
    all of them, and the padding each list costs.

    The eager decode passes are the summaries' "eager_sizes" where the
    server gave each pass's batch size: then the unit is passes (a replay
    is one pass). Files without them (older ones) fall back to the
    fused-MoE calls' M outside graphs (one token per request): a replay
    then weighs its graph's fused-MoE calls (what the capture recorded), so
    replays and eager calls add up. Neither: the unit is replays."""
    out = GraphSizes(share)
    if any(phases.DECODE in src.eager_sizes for src in sources):
        return _by_passes(out, sources)
    moe_in_graph: Dict[int, int] = {}
    _replays(out, sources)
    for src in sources:
        for sig in src.signatures.values():
            if sig.graph is not None and 0 <= sig.graph < GRAPH_FAMILY and moe_key_of(sig) is not None:
                moe_in_graph[sig.graph] = moe_in_graph.get(sig.graph, 0) + sig.count
    for u in uses:
        for m, c in u.eager.get(phases.DECODE, {}).items():
            out.eager[m] = out.eager.get(m, 0) + c
    if out.eager or moe_in_graph:
        out.unit = "fused-MoE calls"
        out.per_replay = {k: c / out.graphs[k].replays for k, c in moe_in_graph.items()
                          if k in out.graphs and out.graphs[k].replays}
    typical = sum(out.per_replay.values()) / len(out.per_replay) if out.per_replay else None
    for k, g in sorted(out.graphs.items()):
        # a graph whose capture was not recorded (on request, say) weighs
        # what the others do: one model, the same layers in every graph
        w = 1.0 if out.unit == "replays" else out.per_replay.get(k, typical)
        if w is None:
            if g.served:
                out.unweighed.append(k)
            continue
        for r, n in g.served.items():
            out.batches[r] = out.batches.get(r, 0.0) + w * n
    for m, c in out.eager.items():
        out.batches[m] = out.batches.get(m, 0.0) + c
    return _suggest(out)


def _replays(out: GraphSizes, sources: List[Source]) -> None:
    """The decode graphs' replays and real sizes, from the summaries."""
    for src in sources:
        for key, g in src.graphs.items():
            if 0 <= key < GRAPH_FAMILY:
                gs = out.graphs.setdefault(key, GraphSize(key))
                gs.replays += int(g.get("replays", 0) or 0)
                for r, n in (g.get("real_sizes") or {}).items():
                    gs.served[int(r)] = gs.served.get(int(r), 0) + int(n)


def _by_passes(out: GraphSizes, sources: List[Source]) -> GraphSizes:
    """Replays and eager decode passes, one pass each."""
    _replays(out, sources)
    out.unit = "passes"
    for src in sources:
        for b, n in src.eager_sizes.get(phases.DECODE, {}).items():
            out.eager[b] = out.eager.get(b, 0) + n
    for g in out.graphs.values():
        for r, n in g.served.items():
            out.batches[r] = out.batches.get(r, 0.0) + n
    for b, n in out.eager.items():
        out.batches[b] = out.batches.get(b, 0.0) + n
    return _suggest(out)


def _suggest(out: GraphSizes) -> GraphSizes:
    """The fewest sizes that cover out.share percent of out.batches, and
    the padding of the captured sizes and of that list."""
    out.batches = {b: c for b, c in out.batches.items() if c}
    total = sum(out.batches.values())
    covered = 0.0
    for bs, c in sorted(out.batches.items(), key=lambda x: (-x[1], x[0])):
        if total and 100.0 * covered / total >= out.share:
            break
        out.suggested.append(bs)
        covered += c
    out.suggested.sort()
    out.waste_now = padding_waste(out.batches, sorted(out.graphs))
    out.waste_suggested = padding_waste(out.batches, out.suggested)
    return out
