"""Which door a call came through, read from its operation's name
(docs/FORMAT.md): an operator passed the dispatcher ("aten.mm.default"; a
custom op's namespace is its library's, "sglang.fused_moe.default"); a call
that did not is named "<door>:..." ("triton:<kernel>" for a Triton launch,
"flashinfer:<module>.<function>" for a kernel library's API call). The
coverage ledger (analyze) counts calls by door, each named by its
integration (the registry's seams say which prefixes each door writes:
"cute:..." is the cute_dsl door's)."""
from __future__ import annotations

from ..integrations.registry import door_names, launch_prefixes

DISPATCHER = "dispatcher"
CUSTOM_OPS = "custom_ops"  # dispatcher operators outside torch's own namespaces
# torch's own operator namespaces, the one list (replay and repro take theirs
# from here): those `import torch` registers (a repro script imports nothing
# else for them), the collectives' (replayed only with a process group), and
# the rest; any other namespace is a custom op's library
REGISTERED_BY_TORCH = frozenset(("aten", "prims", "quantized", "_quantized", "profiler", "c10d", "_c10d_functional"))
COLLECTIVE_NAMESPACES = frozenset(("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd",
                                   "symm_mem"))
TORCH_NAMESPACES = REGISTERED_BY_TORCH | COLLECTIVE_NAMESPACES | frozenset((
    "rngprims", "mkldnn", "_dtensor", "inductor", "_test"))


_names: "dict[str, str] | None" = None  # an operation's prefix -> its door's integration


def door_of(operation: str) -> str:
    """"dispatcher", "custom_ops", or the integration whose door wrote a call
    that did not pass the dispatcher ("flashinfer", "cute_dsl"); a prefix no
    seam claims (a door since removed), as it is."""
    global _names
    head, colon, _ = operation.partition(":")
    if colon:
        if _names is None:
            _names = door_names()
        return _names.get(head, head)
    return DISPATCHER if operation.partition(".")[0] in TORCH_NAMESPACES else CUSTOM_OPS


_launches: "tuple[str, ...] | None" = None


def is_launch(operation: str) -> bool:
    """A kernel launch's record (FORMAT.md, "Kernel launches": the kernel's
    parameters by name, its grid and launch options), by the seams that say
    their door writes launches."""
    global _launches
    if _launches is None:
        _launches = launch_prefixes()
    return operation.startswith(_launches)
