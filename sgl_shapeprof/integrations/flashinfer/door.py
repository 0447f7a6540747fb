"""FlashInfer's public API as records: its `flashinfer_api` decorator is
replaced, where it is defined, by one that wraps what FlashInfer's own
returns (its logging, FLASHINFER_LOGLEVEL, is kept) in a door
(recording/doors.py): each call in a logged pass is one record,
"flashinfer:<module>.<qualname>" (FORMAT.md, "Kernel library calls")."""
from __future__ import annotations

import functools

from ...on_import import is_ours, mark
from ...recording.doors import api_door, operation_name
from .seam import PACKAGE
from .seam import PREFIX as LIBRARY



def patch_api_logging_module(module) -> None:
    """flashinfer.api_logging was just imported: its decorator becomes ours
    before FlashInfer's modules apply it."""
    original = getattr(module, "flashinfer_api", None)
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def flashinfer_api(func=None, *args, **kwargs):
        if func is None:  # @flashinfer_api(trace=...)
            return lambda f: flashinfer_api(f, *args, **kwargs)
        wrapped = original(func, *args, **kwargs)
        return api_door(wrapped, operation_name(LIBRARY, func, PACKAGE), func)

    mark(flashinfer_api, original)
    module.flashinfer_api = flashinfer_api
