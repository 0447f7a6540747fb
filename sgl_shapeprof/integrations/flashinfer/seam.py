"""FlashInfer's seam: what the rest of sgl_shapeprof needs to know of
FlashInfer (registry.py lists it). Standard library only, nothing imported:
the start-up hook reads it at Python start-up.

FlashInfer's kernels never reach the dispatcher (its register_custom_op
returns the function unchanged; its kernels are tvm-ffi modules and CuTe
DSL). Its public API is marked by one decorator, `flashinfer_api`, which
every module imports from api_logging: the door replaces it where it is
defined, before any other module of FlashInfer imports it.
"""
API_LOGGING = "flashinfer.api_logging"
PACKAGE = "flashinfer"

_HERE = __package__

HOOKS = {API_LOGGING: (f"{_HERE}.door", "patch_api_logging_module")}
UNARMED_HOOKS: dict = {}
