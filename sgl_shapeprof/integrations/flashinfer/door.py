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
import types
import weakref
from typing import Callable

from ...on_import import is_ours, mark
from ...recording.doors import OPERATION_ATTR, api_door, operation_name
from .seam import PACKAGE
from .seam import PREFIX as LIBRARY



# The doors flashinfer_api made, each with what it calls (FlashInfer's own
# decorator's result) and the function it describes: backend_requirement
# moves only these above its checks, never a wrapper that copied a door's
# attributes (functools.wraps copies OPERATION_ATTR and __wrapped__ too).
_DOORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _door(fn: Callable, operation: str, described: Callable) -> Callable:
    """A door over fn, recorded as operation. When fn is a wrapper of
    FlashInfer's (its logging, its checks), FlashInfer may keep state on it
    while a call runs and read it back through the function's module name,
    which now holds the door (`bmm_fp8.suitable_auto_backends`): the door and
    fn then share one set of attributes, live, never a copy. A plain
    function's are copied (sharing would make its __wrapped__ itself)."""
    door = api_door(fn, operation, described)
    if "__wrapped__" in getattr(fn, "__dict__", {}):
        door.__dict__ = fn.__dict__
        setattr(door, OPERATION_ATTR, operation)
    _DOORS[door] = (fn, described)
    return door


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
        return _door(wrapped, operation_name(LIBRARY, func, PACKAGE), func)

    mark(flashinfer_api, original)
    module.flashinfer_api = flashinfer_api


def patch_utils_module(module) -> None:
    """flashinfer.utils was just imported: its backend_requirement becomes
    one that, over one of flashinfer_api's doors, checks what the door
    called and puts a door over the checks (one door, outermost)."""
    original = getattr(module, "backend_requirement", None)
    if original is None or is_ours(original):
        return

    @functools.wraps(original)
    def backend_requirement(*args, **kwargs):
        decorate = original(*args, **kwargs)

        def door_outside(func):
            made = _DOORS.get(func) if isinstance(func, types.FunctionType) else None  # doors are functions
            if made is None:
                return decorate(func)
            under, described = made
            return _door(decorate(under), getattr(func, OPERATION_ATTR), described)
        return door_outside

    mark(backend_requirement, original)
    module.backend_requirement = backend_requirement
