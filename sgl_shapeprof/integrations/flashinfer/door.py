"""FlashInfer's public API as records: its `flashinfer_api` decorator is
replaced, where it is defined, by one that wraps what FlashInfer's own
returns (its logging, FLASHINFER_LOGLEVEL, is kept) in a door
(recording/doors.py): each call in a logged pass is one record,
"flashinfer:<module>.<qualname>" (FORMAT.md, "Kernel library calls").

Most of its GEMMs and some attention calls are also under its
`backend_requirement` decorator, applied above `flashinfer_api`: it checks
the device, the backend and the problem size, and raises before the
function runs. That decorator is replaced too, so that the door goes
outside the checks: a call they refuse is recorded with their exception,
as any call that raised."""
from __future__ import annotations

import functools
import inspect

from ...on_import import is_ours, mark
from ...recording.doors import OPERATION_ATTR, api_door, operation_name
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


def patch_utils_module(module) -> None:
    """flashinfer.utils was just imported: its backend_requirement becomes
    one that, over a door, takes the door off, checks what was under it
    and puts the door back over the checks (one door, outermost)."""
    original = getattr(module, "backend_requirement", None)
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def backend_requirement(*args, **kwargs):
        decorate = original(*args, **kwargs)

        def door_outside(func):
            operation = getattr(func, OPERATION_ATTR, None)
            under = getattr(func, "__wrapped__", None)
            if operation is None or under is None:
                return decorate(func)
            checked = decorate(under)
            door = api_door(checked, operation, inspect.unwrap(func))
            # FlashInfer keeps state on the checked function, set while it
            # runs and read through its module's name, now the door's
            # (`bmm_fp8.suitable_auto_backends`): the two share one set of
            # attributes, live, never a copy
            door.__dict__ = checked.__dict__
            setattr(door, OPERATION_ATTR, operation)
            return door
        return door_outside

    mark(backend_requirement, original)
    module.backend_requirement = backend_requirement
