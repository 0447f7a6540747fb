"""FlashInfer's seam: what the rest of sgl_shapeprof needs to know of
FlashInfer (registry.py lists it). Standard library only, nothing imported:
the start-up hook reads it at Python start-up.

FlashInfer's kernels never reach the dispatcher (its register_custom_op
returns the function unchanged; its kernels are tvm-ffi modules and CuTe
DSL). Its public API is marked by one decorator, `flashinfer_api`, which
every module imports from api_logging: the door replaces it where it is
defined, before any other module of FlashInfer imports it; and
`backend_requirement` (utils), whose checks wrap many of those functions
from outside: the door is moved above them.
"""
from ..registry import KERNEL_LIBRARY, Seam

API_LOGGING = "flashinfer.api_logging"
UTILS = "flashinfer.utils"  # backend_requirement: checks that raise before a call
PACKAGE = "flashinfer"
# its records' operations: "flashinfer:<module>.<qualname>" (FORMAT.md)
PREFIX = "flashinfer"

_HERE = __package__

# module -> (our module, its patch function): a door (inert outside logged
# passes), patched where it is imported in any process that imported
# sgl_shapeprof first, and by the start-up hook (registry.py)
DOORS = {API_LOGGING: (f"{_HERE}.door", "patch_api_logging_module"),
         UTILS: (f"{_HERE}.door", "patch_utils_module")}
UNARMED_HOOKS: dict = {}
# FlashInfer imported before the door: its decorator is replaced then, after
# FlashInfer's modules applied it (said when a profiler is made)
IMPORTED_BEFORE = "the API functions it had defined by then are not wrapped: their calls are not recorded"

SEAM = Seam(KERNEL_LIBRARY, "flashinfer", doors=DOORS, unarmed_hooks=UNARMED_HOOKS, imported_before=IMPORTED_BEFORE,
            door_prefixes=(PREFIX,))
