"""DeepEP's dispatch and combine as records: each of Buffer's methods in
seam.METHODS is wrapped in a door (recording/doors.py): a call in a logged
pass is one record "deep_ep:buffers.legacy.Buffer.<method>", its values by
the method's own parameter names (`self` left out): the tokens it sends
(`x`: [tokens, hidden], or an FP8 pair), `topk_idx` [tokens, top-k], the
experts, and what it returns (the received tokens per local expert).
Outside logged passes a call costs one lookup and one native call more."""
from __future__ import annotations

from ..passes import wrap_method
from ...recording.doors import api_door, operation_name
from .seam import METHODS, PACKAGE, PREFIX


def patch_buffer_module(module) -> None:
    """deep_ep.buffers.legacy was just imported: Buffer's token-moving
    methods become doors (each once)."""
    cls = getattr(module, "Buffer", None)
    if not isinstance(cls, type):
        return
    for name in METHODS:
        if callable(getattr(cls, name, None)):
            wrap_method(cls, name, lambda real: api_door(real, operation_name(PREFIX, real, PACKAGE), real))
