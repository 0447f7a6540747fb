"""Inductor's seam: what the rest of sgl_shapeprof needs to know of
torch.compile's Triton kernels (registry.py lists it). Standard library
only, nothing imported: the start-up hook reads it at Python start-up.

The kernels Inductor generates do not launch through Triton's
JITFunction.run: the wrapper code it writes calls each kernel's
CachingAutotuner.run(*args, stream=...), which autotunes once and calls the
chosen config's launcher (torch 2.11 to 2.15). The door patches that method
where it is defined, torch._inductor.runtime.triton_heuristics.
"""
HEURISTICS = "torch._inductor.runtime.triton_heuristics"

_HERE = __package__

HOOKS = {HEURISTICS: (f"{_HERE}.door", "patch_triton_heuristics")}
UNARMED_HOOKS: dict = {}
