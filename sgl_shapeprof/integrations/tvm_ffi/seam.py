"""tvm-ffi's seam: what the rest of sgl_shapeprof needs to know of tvm-ffi
(registry.py lists it). Standard library only, nothing imported: the
start-up hook reads it at Python start-up.

Kernels compiled as tvm-ffi modules (SGLang's JIT kernels, loaded with
tvm_ffi.load_module; FlashInfer's, behind its own API door) never reach the
dispatcher. Every function of such a module is fetched through one method,
Module.get_function (attribute and item access go through it), defined in
tvm_ffi.module with load_module: the door patches both there, before
tvm_ffi's package binds them.
"""
from ..registry import KERNEL_LIBRARY, Seam

MODULE = "tvm_ffi.module"
# its records' operations: "tvm_ffi:<module file>.<function>" (FORMAT.md)
PREFIX = "tvm_ffi"

_HERE = __package__

# module -> (our module, its patch function): a door (inert outside logged
# passes), patched where it is imported in any process that imported
# sgl_shapeprof first, and by the start-up hook (registry.py)
DOORS = {MODULE: (f"{_HERE}.door", "patch_module_module")}
UNARMED_HOOKS: dict = {}
# tvm-ffi imported before the door: patched then, after its package bound
# load_module and its callers fetched functions (said when a profiler is made)
IMPORTED_BEFORE = ("the functions fetched from its modules by then are not wrapped (their calls are not "
                   "recorded), and a module loaded through tvm_ffi.load_module is named tvm_ffi:module, "
                   "not by its file")

SEAM = Seam(KERNEL_LIBRARY, "tvm_ffi", doors=DOORS, unarmed_hooks=UNARMED_HOOKS, imported_before=IMPORTED_BEFORE,
            door_prefixes=(PREFIX,))
