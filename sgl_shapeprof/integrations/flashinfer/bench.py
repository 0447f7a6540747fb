"""flashinfer-bench definitions of recorded FlashInfer calls, written by
FlashInfer's own `fi_trace` (each decorated function's `.fi_trace`: the
definition JSON flashinfer-bench reads, one per function and constant
axes). The record's tensors become meta tensors of its shapes and dtypes
(fi_trace reads only shapes and dtypes: the definition is the one real
tensors give), its other values the arguments they were.

Needs FlashInfer importable (0.7+: its flashinfer.trace) and torch. Only
functions in the shipped snapshot of FlashInfer's templates
(templates.json) are looked up: a records file is untrusted, and the
modules imported are FlashInfer's own known ones, never what a record
names.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import tempfile
from typing import Any, Dict, Optional, Tuple

from .seam import PACKAGE
from .templates import templates_of


class NotTraceable(Exception):
    """The call cannot be written as a definition (the message says why)."""


def _function(function: str):
    """FlashInfer's function "gemm.gemm_base.bmm_fp8" (or a class's method
    "decode.BatchDecodeWithPagedKVCacheWrapper.run"), imported."""
    try:
        return pkgutil.resolve_name(f"{PACKAGE}.{function}")
    except (ImportError, AttributeError, ValueError):
        raise NotTraceable(f"{PACKAGE}.{function} is not in the installed FlashInfer") from None


def _value(v: Any, torch) -> Any:
    """A recorded value as the call had it: a tensor as a meta tensor of its
    shape and dtype, a list of tensors as a tuple, a dtype's name as the
    dtype."""
    if isinstance(v, dict) and isinstance(v.get("shape"), list):
        dtype = getattr(torch, str(v.get("dtype", "")).replace("torch.", "", 1), None)
        if not isinstance(dtype, torch.dtype):
            raise NotTraceable(f"a tensor of dtype {v.get('dtype')!r}")
        return torch.empty(v["shape"], dtype=dtype, device="meta")
    if isinstance(v, list):
        return tuple(_value(x, torch) for x in v)
    if isinstance(v, str) and v.startswith("torch."):
        dtype = getattr(torch, v[len("torch."):], None)
        return dtype if isinstance(dtype, torch.dtype) else v
    return v


def definition(function: str, inputs: Dict[str, Any], args: Optional[Dict[str, Any]]) -> Tuple[dict, str]:
    """FlashInfer's definition of one recorded call (a function of the
    snapshot): the dict, and the file fi_trace writes of it (written into a
    private folder and read back). Raises NotTraceable with the reason."""
    if not templates_of(function):
        raise NotTraceable(f"FlashInfer has no template for {function}")
    try:
        import torch
        importlib.import_module(PACKAGE)
    except ImportError as e:
        raise NotTraceable(f"FlashInfer cannot be imported here ({e}): its fi_trace writes the definitions") from None
    tracer = getattr(_function(function), "fi_trace", None)
    if tracer is None:
        raise NotTraceable(f"{PACKAGE}.{function} has no fi_trace in the installed FlashInfer")
    try:
        # (save_dir and name are fi_trace's own)
        kwargs = {k: _value(v, torch) for k, v in {**(args or {}), **inputs}.items() if k not in ("save_dir", "name")}
        with tempfile.TemporaryDirectory(prefix="shapeprof-fi-trace-") as save_dir:
            defn = tracer(save_dir=save_dir, **kwargs)
            with open(os.path.join(save_dir, f"{defn['name']}.json"), encoding="utf-8") as f:
                return defn, f.read()
    except Exception as e:  # FlashInfer's own code on our values: its message, in one line
        raise NotTraceable(f"fi_trace of {function} failed: {type(e).__name__}: {e}") from None
