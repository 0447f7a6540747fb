"""CuTe DSL's seam (nvidia-cutlass-dsl): what the rest of sgl_shapeprof
needs to know of it (registry.py lists it). Standard library only, nothing
imported: the start-up hook reads it at Python start-up.

`cute.compile` hands back a compiled function whose class says how it is
called: JitCompiledFunction (and its subclasses; JitExecutor for one bound
to a device), or with tvm-ffi (`--enable-tvm-ffi`: FlashInfer's norms,
SGLang's FA4) TVMFFIJitCompiledFunctionWithKwargs and
TVMFFIJitCompiledFunction. Each class's own __call__ is where every call of
every compiled kernel passes; the door patches them where they are defined,
names them at compile (CompileCallable._compile), and wraps the plain
tvm-ffi functions that a module loaded ahead of time hands back
(ExternalBinaryModule.__getattr__: SGLang's on-disk cache of FA4).
"""
from ..registry import KERNEL_LIBRARY, Seam

COMPILER = "cutlass.base_dsl.compiler"
JIT_EXECUTOR = "cutlass.base_dsl.jit_executor"
TVM_FFI_PROVIDER = "cutlass.cutlass_dsl.tvm_ffi_provider"
BINARY_MODULE = "cutlass.base_dsl.export.external_binary_module"
RUNTIME = "cutlass.cute.runtime"  # from_dlpack: a CuTe tensor made from a torch one
# its records' operations: "cute:<module>.<qualname>" (FORMAT.md)
PREFIX = "cute"

_HERE = __package__

# module -> (our module, its patch function): doors (inert outside logged
# passes), patched where they are imported in any process that imported
# sgl_shapeprof first, and by the start-up hook (registry.py)
DOORS = {COMPILER: (f"{_HERE}.door", "patch_compiler"),
         JIT_EXECUTOR: (f"{_HERE}.door", "patch_jit_executor"),
         TVM_FFI_PROVIDER: (f"{_HERE}.door", "patch_tvm_ffi_provider"),
         BINARY_MODULE: (f"{_HERE}.door", "patch_binary_module"),
         RUNTIME: (f"{_HERE}.door", "patch_runtime")}
UNARMED_HOOKS: dict = {}
# CuTe DSL imported before the doors: its classes are patched then, so every
# compiled function's call is seen, but what was compiled or loaded before
# was not named (said when a profiler is made)
IMPORTED_BEFORE = ("what it had compiled by then is recorded under its symbol (cute:<symbol>), a module it "
                   "had loaded ahead of time as cute:module, the functions fetched from such a module "
                   "by then are not wrapped (their calls are not recorded), and a tensor made by a "
                   "from_dlpack imported by then is written by its type's name, without its shape")

SEAM = Seam(KERNEL_LIBRARY, "cute_dsl", doors=DOORS, unarmed_hooks=UNARMED_HOOKS, imported_before=IMPORTED_BEFORE,
            door_prefixes=(PREFIX,))
