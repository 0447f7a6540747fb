"""Pausing the calling thread's logging: what runs while paused is not
recorded. The one place for pausing and for the hooks that pause on their
own: torch.compile's compiling (dynamo's callbacks) and printing a tensor
(torch._tensor_str._str). Others pause through pause_thread()/paused():
SGLang's eager breaks inside a graph capture, Triton's autotuner
(integrations/triton/door.py). No-ops before any profiler loaded the native module."""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from .messages import say


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


def _pause_for_compiler(_args=None) -> None:
    pause_thread()


def _resume_after_compiler(_args=None) -> None:
    resume_thread()


_compile_callbacks_failed = False


def pause_while_compiling() -> None:
    """Ops that torch.compile runs while compiling (tracing, benchmarking
    kernels) are not the model's: pause logging on the compiling thread from
    dynamo's compile-start to compile-end callbacks. Called at every pass
    start, because torch._dynamo.reset() clears the callbacks; skipped until
    dynamo is loaded (importing it ourselves would cost a second)."""
    global _compile_callbacks_failed
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None or _compile_callbacks_failed:
        return
    try:
        handler = dynamo.callback_handler
        if _pause_for_compiler not in handler.start_callbacks:
            handler.register_start_callback(_pause_for_compiler)
            handler.register_end_callback(_resume_after_compiler)
    except Exception as e:  # another torch: compile-time ops may be logged
        _compile_callbacks_failed = True
        say(f"cannot register with torch.compile's callbacks ({e}); ops it runs while compiling may be logged")


_printing_wrapped = False


def pause_while_printing() -> None:
    """Printing a tensor (repr, str, format) runs dozens of operators (item,
    select, is_nonzero, ...) that are not the model's; PyTorch turns dispatch
    modes off around it, so a TorchDispatchMode logs none of them. Pause
    this thread's logging the same way (torch._tensor_str._str is what
    Tensor.__repr__ calls). Once per process, when the first profiler opens."""
    global _printing_wrapped
    if _printing_wrapped:
        return
    _printing_wrapped = True
    try:
        import functools

        import torch._tensor_str as tensor_str
        from .. import _C
        original = tensor_str._str

        @functools.wraps(original)
        def _str(self, *args, **kwargs):
            was = _C.pause_thread()
            try:
                return original(self, *args, **kwargs)
            finally:
                if was:
                    _C.resume_thread()
        tensor_str._str = _str
    except Exception as e:  # another torch: printing inside a pass is logged
        say(f"cannot wrap tensor printing ({e}); a tensor printed inside a logged pass logs its ops")
