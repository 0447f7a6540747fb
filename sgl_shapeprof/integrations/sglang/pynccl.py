"""SGLang's PyNCCL communicator as records. PyNcclCommunicator calls NCCL
through ctypes (pynccl_wrapper.py): its all-reduce (in CUDA graphs, and
with symmetric memory), all-gather(v), reduce-scatter(v), all-to-all,
broadcast and the pipeline stages' send/recv never reach the dispatcher.
Each of its methods in seam.PYNCCL_METHODS becomes a door
(recording/doors.py): a call in a logged pass is one record
"pynccl:sglang.srt.distributed.device_communicators.pynccl.PyNcclCommunicator.<method>",
its tensors by the method's own parameter names (tokens: a tensor's first
dimension; bytes: its elements times its dtype's size) and, with arguments
recorded, dst, src, op and sizes. A disabled communicator's method returns
at once and runs nothing (SGLang turns PyNCCL off where another path takes
the collective): its calls are not recorded. Outside logged passes a call
costs an attribute test and a lookup more."""
from __future__ import annotations

from typing import Callable

from ..passes import wrap_method
from ...recording.doors import OPERATION_ATTR, api_door, operation_name
from .seam import PYNCCL_METHODS, PYNCCL_PREFIX


def patch_pynccl_module(module) -> None:
    """SGLang's pynccl module was just imported: PyNcclCommunicator's
    tensor-moving methods become doors (each once)."""
    cls = getattr(module, "PyNcclCommunicator", None)
    if not isinstance(cls, type):
        return
    for name in PYNCCL_METHODS:
        if callable(getattr(cls, name, None)):
            wrap_method(cls, name, _enabled_door)


def _enabled_door(real: Callable) -> Callable:
    """real as a door, for an enabled communicator only: a disabled one's
    call runs nothing, so nothing is written for it."""
    door = api_door(real, operation_name(PYNCCL_PREFIX, real), real)

    def method(self, *args, **kwargs):
        if getattr(self, "disabled", False):
            return real(self, *args, **kwargs)
        return door(self, *args, **kwargs)
    setattr(method, OPERATION_ATTR, getattr(door, OPERATION_ATTR))
    return method
