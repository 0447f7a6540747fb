"""Which door a call came through, read from its operation's name
(docs/FORMAT.md): an operator passed the dispatcher ("aten.mm.default"; a
custom op's namespace is its library's, "sglang.fused_moe.default"); a call
that did not is named "<door>:..." ("triton:<kernel>" for a Triton launch,
"flashinfer:<module>.<function>" for a kernel library's API call). The
coverage ledger (analyze) counts calls by door."""
from __future__ import annotations

DISPATCHER = "dispatcher"
CUSTOM_OPS = "custom_ops"  # dispatcher operators outside torch's own namespaces
# torch's own operator namespaces; any other is a custom op's library
TORCH_NAMESPACES = frozenset((
    "aten", "prims", "rngprims", "quantized", "_quantized", "mkldnn", "c10d", "_c10d_functional",
    "_c10d_functional_autograd", "_dtensor", "profiler", "inductor", "_test"))


def door_of(operation: str) -> str:
    """"dispatcher", "custom_ops", or the door's own name ("triton",
    "flashinfer") for a call that did not pass the dispatcher."""
    head, colon, _ = operation.partition(":")
    if colon:
        return head
    return DISPATCHER if operation.partition(".")[0] in TORCH_NAMESPACES else CUSTOM_OPS
