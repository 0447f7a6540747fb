"""DeepEP's seam: what the rest of sgl_shapeprof needs to know of DeepEP
(registry.py lists it). Standard library only, nothing imported: the
start-up hook reads it at Python start-up.

DeepEP's expert-parallel all-to-all (dispatch and combine: a large share of
DeepSeek decode time with EP) is a pybind11 extension driven by its
`Buffer` class: its calls never reach the dispatcher. The door wraps
Buffer's dispatch and combine methods where the class is defined
(sgl-deep-ep 0.1.2.post1, SGLang 0.5.23's pin: deep_ep/buffers/legacy.py;
`from deep_ep import Buffer` is that class).
"""
from ..registry import KERNEL_LIBRARY, Seam

MODULE = "deep_ep.buffers.legacy"
PACKAGE = "deep_ep"
# its records' operations: "deep_ep:buffers.legacy.Buffer.<method>" (FORMAT.md)
PREFIX = "deep_ep"
# Buffer's methods that move tokens between ranks (its layout query, buffer
# management and hooks are not calls of the model's)
METHODS = ("dispatch", "combine", "internode_dispatch", "internode_combine", "low_latency_dispatch",
           "low_latency_combine")

_HERE = __package__

# module -> (our module, its patch function): a door (inert outside logged
# passes), patched where it is imported in any process that imported
# sgl_shapeprof first, and by the start-up hook (registry.py). A class's
# methods are patched: instances made before are covered, so nothing is
# missed when DeepEP was imported first.
DOORS = {MODULE: (f"{_HERE}.door", "patch_buffer_module")}

SEAM = Seam(KERNEL_LIBRARY, "deep_ep", doors=DOORS, door_prefixes=(PREFIX,))
