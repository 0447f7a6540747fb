"""FlashInfer's own description of its API calls' axes, as data.

FlashInfer (0.7+) describes most public functions with a
`flashinfer.trace.TraceTemplate`: the axes of the call (M, N, K,
batch_size, num_experts, num_qo_heads, ...) and, for each tensor
parameter, the axis of each dimension. Its `fi_trace` writes
flashinfer-bench definitions from them. The analyses read a call's axes
from the same templates rather than from formulas of our own.

They are read here as plain data (templates.json, made from FlashInfer
0.7.2, SGLang 0.5.23's pin), so that `gemm`, `cost` and `analyze` need
neither FlashInfer nor torch: `tests/sglang_env/flashinfer_templates.py
--write` makes it again from the installed FlashInfer, and tests/sglang/test_flashinfer_templates.py
holds the file equal to what that FlashInfer says.

The templates are found where FlashInfer registers them for its own
consistency test (`api_logging._TRACE_REGISTRY`, (function, template,
label) per template; a function dispatching between templates has one
entry each), after importing the modules in MODULES.
"""
from __future__ import annotations

import functools
import importlib
import json
import os
from typing import Dict, List

from .seam import API_LOGGING, PACKAGE

HERE = os.path.dirname(os.path.abspath(__file__))
SNAPSHOT = os.path.join(HERE, "templates.json")
# the public modules whose functions the snapshot holds (a fixed list: which
# of FlashInfer's optional back-ends import depends on the machine)
MODULES = ("activation", "cascade", "decode", "fused_moe", "gemm", "mla", "norm", "page", "prefill", "rope",
           "sampling", "topk")


def describe(template) -> dict:
    """One TraceTemplate as data: its op_type and label, its axes ("var" or
    "const"), and per input and output its parameter and dimensions'
    axes."""
    def tensor(key: str, d) -> dict:
        out: dict = {"param": d.param if d.param is not None else key, "dims": list(d.dim_names)}
        if d.tuple_idx is not None:
            out["tuple_idx"] = d.tuple_idx
        if d.optional:
            out["optional"] = True
        return out

    def scalar(key: str, d) -> dict:
        return {"param": d.param if d.param is not None else key, "scalar": True}

    def part(items: dict) -> dict:
        return {k: (tensor(k, d) if hasattr(d, "dim_names") else scalar(k, d)) for k, d in items.items()}

    axes = {}
    for name, marker in template.axes.items():
        kind = type(marker).__name__.lower()  # Var / Const
        value = getattr(marker, "value", None)
        axes[name] = kind if value is None else {"const": value}
    return {"op_type": template.op_type, "label": template.name_prefix or template.op_type, "axes": axes,
            "inputs": part(template.inputs), "outputs": part(template.outputs)}


def snapshot_of_installed() -> dict:
    """The snapshot, from the FlashInfer this Python imports."""
    api_logging = importlib.import_module(API_LOGGING)
    for m in MODULES:
        importlib.import_module(f"{PACKAGE}.{m}")
    functions: Dict[str, List[dict]] = {}
    for original, template, _label in api_logging._TRACE_REGISTRY:
        module = original.__module__
        if not module.startswith(PACKAGE + "."):
            continue
        # named as the door names its records' operations (FORMAT.md)
        name = f"{module[len(PACKAGE) + 1:]}.{original.__qualname__}"
        d = describe(template)
        if d not in functions.setdefault(name, []):
            functions[name].append(d)
    version = importlib.import_module(PACKAGE).__version__
    return {"flashinfer": version, "functions": dict(sorted(functions.items()))}


@functools.lru_cache(maxsize=1)
def snapshot() -> dict:
    """The shipped snapshot: {"flashinfer": version, "functions": {function:
    [template, ...]}}."""
    with open(SNAPSHOT, encoding="utf-8") as f:
        return json.load(f)


def templates_of(function: str) -> List[dict]:
    """The templates FlashInfer has for `function` ("gemm.gemm_base.bmm_fp8"),
    [] when none."""
    return snapshot()["functions"].get(function, [])


def snapshot_text(snap: dict) -> str:
    """The snapshot as templates.json holds it."""
    return json.dumps(snap, indent=1, sort_keys=True) + "\n"
