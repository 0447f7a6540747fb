"""CUDA graph keys, as the records' "graph" and the summary's "graphs" hold
them (docs/FORMAT.md): family * GRAPH_FAMILY + size. Family 0 is the decode
graphs of the default variant, so a decode graph's key is its batch size;
the servers' graph integrations number the others (integrations/graphs.py).
A capture's record counts its graph's replays (graph_replays)."""
from typing import Dict, Optional

GRAPH_FAMILY = 1_000_000


def graph_replays(summary: Optional[dict]) -> Dict[int, dict]:
    """The summary's "graphs" by integer key ({} when there are none), with
    "real_sizes" by integer size where the summary has them."""
    out: Dict[int, dict] = {}
    graphs = summary.get("graphs") if summary else None
    if isinstance(graphs, dict):
        for k, v in graphs.items():
            try:
                g = out[int(k)] = {"captures": int(v.get("captures", 0)), "replays": int(v.get("replays", 0))}
                if v.get("real_sizes"):
                    g["real_sizes"] = {int(r): int(n) for r, n in v["real_sizes"].items()}
            except (TypeError, ValueError, AttributeError):
                continue
    return out


def eager_sizes(summary: Optional[dict]) -> Dict[str, Dict[int, int]]:
    """The summary's "eager_sizes" (docs/FORMAT.md): phase -> the server's
    batch size -> logged passes of that size that replayed no graph; {}
    when it has none (an older file, or a server that gives no size)."""
    out: Dict[str, Dict[int, int]] = {}
    sizes = summary.get("eager_sizes") if summary else None
    if isinstance(sizes, dict):
        for phase, by_size in sizes.items():
            try:
                out[str(phase)] = {int(b): int(n) for b, n in by_size.items() if int(n) > 0}
            except (TypeError, ValueError, AttributeError):
                continue
    return out
