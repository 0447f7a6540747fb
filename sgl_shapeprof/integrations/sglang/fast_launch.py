"""SGLang diffusion's replay_launches (seam.FAST_LAUNCH): a decorated
Triton wrapper runs normally the first time it sees an operand signature,
then relaunches the compiled kernels it recorded on new tensors, past
Triton's run -- past Triton's door, so those launches would not be
recorded.

While a logged pass is open, SGLang's own switch (seam.FAST_LAUNCH_SWITCH,
what SGLANG_DIFFUSION_TRITON_FAST_LAUNCH=0 sets, read at each call) is
off: each decorated call runs its wrapper, whose launches reach Triton's
door as every launch does, each once. By SGLang's contract for the
decorator the replay launches the same kernels with the same grids and
arguments as the wrapper, so the records are those of the replayed calls;
only their host time is the wrapper's (SGLang measured ~28 us against
~9 us a call), which a timed recording then shows. Outside logged passes
SGLang's replay is untouched.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from ...recording.doors import pass_door
from ...recording.messages import say_once
from .seam import FAST_LAUNCH_SWITCH


def patch_fast_launch_module(module: Any) -> None:
    """fast_launch was just imported: its switch is off in logged passes."""
    if not isinstance(getattr(module, FAST_LAUNCH_SWITCH, None), bool):
        say_once("sglang-fast-launch", f"{module.__name__} has no {FAST_LAUNCH_SWITCH} switch: Triton launches "
                                       f"its replay_launches relaunches are not recorded")
        return
    lock = threading.Lock()
    kept: list = []  # SGLang's setting while a logged pass holds it off

    def enter() -> None:
        with lock:
            if not kept:
                kept.append(getattr(module, FAST_LAUNCH_SWITCH))
                setattr(module, FAST_LAUNCH_SWITCH, False)

    def leave(logging: Callable[[], bool]) -> None:
        with lock:
            if kept and not logging():
                setattr(module, FAST_LAUNCH_SWITCH, kept.pop())
    pass_door(enter, leave)
