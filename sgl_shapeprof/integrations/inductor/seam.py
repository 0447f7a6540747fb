"""Inductor's seam: what the rest of sgl_shapeprof needs to know of
torch.compile's Triton kernels (registry.py lists it). Standard library
only, nothing imported: the start-up hook reads it at Python start-up.

The kernels Inductor generates do not launch through Triton's
JITFunction.run: the wrapper code it writes calls each kernel's
CachingAutotuner.run(*args, stream=...), which autotunes once and calls the
chosen config's launcher (torch 2.11 to 2.15). The door patches that method
where it is defined, torch._inductor.runtime.triton_heuristics.
"""
from ..registry import KERNEL_LIBRARY, Seam

HEURISTICS = "torch._inductor.runtime.triton_heuristics"
# its records' operations: "inductor:<kernel name>" (FORMAT.md)
PREFIX = "inductor"

_HERE = __package__

# module -> (our module, its patch function): a door (inert outside logged
# passes), patched where it is imported in any process that imported
# sgl_shapeprof first, and by the start-up hook (registry.py). Imported
# before it (torch.compile run first), the method is patched on its class
# then, which every launch after goes through: nothing is missed, nothing
# to say (no IMPORTED_BEFORE).
DOORS = {HEURISTICS: (f"{_HERE}.door", "patch_triton_heuristics")}
UNARMED_HOOKS: dict = {}

SEAM = Seam(KERNEL_LIBRARY, "inductor", doors=DOORS, unarmed_hooks=UNARMED_HOOKS, door_prefixes=(PREFIX,))
