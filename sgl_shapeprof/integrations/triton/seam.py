"""Triton's seam: what the rest of sgl_shapeprof needs to know of Triton's
kernel launches (registry.py lists it). Standard library only, nothing
imported: the start-up hook reads it at Python start-up.

Every launch from Python, plain, autotuned or interpreted, ends in the
innermost kernel object's run() (JITFunction's, or InterpretedFunction's
under TRITON_INTERPRET=1): the door replaces it only while a logged pass is
open (door.py). Importing Triton wraps nothing: the runtime modules' patch
registers the door with recording's passes, so Triton imported before
sgl_shapeprof misses nothing (no IMPORTED_BEFORE), and a server with
profiling off may take the finder off although Triton was imported
(wraps_at_import False: door_finder.stand_down).
"""
from ..registry import KERNEL_LIBRARY, Seam

PACKAGE = "triton"
JIT = "triton.runtime.jit"
INTERPRETER = "triton.runtime.interpreter"
AUTOTUNER = "triton.runtime.autotuner"
# a launch's operation: "triton:<module>.<qualname>" (FORMAT.md, "Kernel launches")
PREFIX = "triton"

_HERE = __package__

# module -> (our module, its patch function): the door registered where
# Triton's runtime is imported (its interpreter may load after its JIT)
DOORS = {JIT: (f"{_HERE}.door", "patch_runtime_module"),
         INTERPRETER: (f"{_HERE}.door", "patch_runtime_module")}

SEAM = Seam(KERNEL_LIBRARY, "triton", doors=DOORS, door_prefixes=(PREFIX,), launches=True,
            wraps_at_import=False)
