"""SGLang's block-quantized GEMMs made visible (patched by startup_hook.py
when SGLang imports the modules that call them).

`w8a8_block_fp8_matmul_triton` and `w8a8_block_int8_matmul` are Triton
kernels launched from Python: no operator the dispatcher sees carries their
N and K, so a logged pass would not see them, nor could `tune` say which of
their tuned configs (one file per N, K and block shape) the run needed.
Where SGLang's quantization modules import them by name
(`srt/layers/quantization/fp8_utils.py`, `int8_utils.py`), each is wrapped:
inside a logged pass of this thread (thread_logging(): a function call, no
import) the wrapper first calls a marker operator through the dispatcher,
`sgl_shapeprof.sglang_w8a8_block_fp8_matmul(A, B, As, Bs, block_size)` (or
`..._int8_...`), which records the call's shapes and does nothing else
(no kernel: nothing is launched, nothing is captured into a CUDA graph);
then the kernel runs as before. Outside logged passes the wrapper only
calls the kernel.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict

from ... import thread_logging

# the marker operators (namespace sgl_shapeprof), by the SGLang function they stand for
MARKERS = {"w8a8_block_fp8_matmul_triton": "sglang_w8a8_block_fp8_matmul",
           "w8a8_block_int8_matmul": "sglang_w8a8_block_int8_matmul"}
_LIB: Dict[str, Any] = {}


def _markers() -> Any:
    """The marker operators, defined once per process (torch imported here:
    SGLang has imported it already)."""
    import torch
    if "lib" not in _LIB:
        lib = torch.library.Library("sgl_shapeprof", "FRAGMENT")
        for name in MARKERS.values():
            lib.define(f"{name}(Tensor A, Tensor B, Tensor As, Tensor Bs, SymInt[] block_size) -> ()")
            lib.impl(name, lambda *a, **k: None, "CompositeExplicitAutograd")
        _LIB["lib"] = lib
    return torch.ops.sgl_shapeprof


def wrap(function: Callable, marker: str) -> Callable:
    """function, preceded in logged passes by a record of its shapes."""
    if getattr(function, "_sgl_shapeprof_marker", None):
        return function  # patched already
    ops = _markers()
    mark = getattr(ops, marker)

    @functools.wraps(function)
    def recorded(A, B, As, Bs, block_size, *args, **kwargs):
        if thread_logging():
            mark(A, B, As, Bs, list(block_size))
        return function(A, B, As, Bs, block_size, *args, **kwargs)
    recorded._sgl_shapeprof_marker = marker  # type: ignore[attr-defined]
    return recorded


def patch_quantization_module(module: Any) -> None:
    """Wrap the block GEMMs the module imported by name."""
    for name, marker in MARKERS.items():
        f = getattr(module, name, None)
        if callable(f):
            setattr(module, name, wrap(f, marker))
