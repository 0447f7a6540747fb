"""Pausing the calling thread's logging (torch.compile's compiling, SGLang's
eager breaks inside a graph capture): what is run while paused is not
recorded. No-ops before any profiler loaded the native module."""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator


def _native():
    return sys.modules.get("sgl_shapeprof._C")


def pause_thread() -> bool:
    """Stops logging on this thread; True if it was logging (then
    resume_thread() must follow)."""
    native = _native()
    return bool(native is not None and native.pause_thread())


def resume_thread() -> None:
    native = _native()
    if native is not None:
        native.resume_thread()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Nothing logged on this thread inside (a no-op outside logged passes)."""
    was = pause_thread()
    try:
        yield
    finally:
        if was:
            resume_thread()
