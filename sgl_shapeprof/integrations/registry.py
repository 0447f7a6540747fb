"""The integrations, one line each: a server's or a kernel library's folder
under integrations/, whose seam.py says what the rest of the package needs
to know of it (the modules it patches and where, the engine `run` starts).
The start-up hook, `run` and its engine child loop over this list; no
server or library is named outside its own folder and this list (but by
the analyses that read a server's own files, as `tune` reads SGLang's
config naming). Adding one is a new folder, a line here, docs and tests
(docs/how-it-works.md#adding-a-server-or-a-kernel-library).
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict, List, Tuple

INTEGRATIONS = ("sglang", "vllm", "flashinfer", "tvm_ffi", "cute_dsl", "inductor")


def seam(name: str) -> ModuleType:
    """The seam.py of integration `name` (standard library only: cheap)."""
    return importlib.import_module(f"{__package__}.{name}.seam")


def servers() -> List[str]:
    """The integrations `sgl-shapeprof run --server` starts (an ENGINE)."""
    return [n for n in INTEGRATIONS if getattr(seam(n), "ENGINE", None)]


def hooks(unarmed: bool = False) -> Dict[str, Tuple[str, str]]:
    """Every integration's modules the start-up hook patches where they are
    imported, with profiling on (or off): module -> (ours, its function)."""
    out: Dict[str, Tuple[str, str]] = {}
    for name in INTEGRATIONS:
        out.update(getattr(seam(name), "UNARMED_HOOKS" if unarmed else "HOOKS", {}))
    return out
