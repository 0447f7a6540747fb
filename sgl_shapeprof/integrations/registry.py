"""The integrations, one line each: a server's or a kernel library's folder
under integrations/, whose seam.py says what the rest of the package needs
to know of it (the modules it patches and where, the engine `run` starts).
The start-up hook, `run` and its engine child loop over this list; no
server or library is named outside its own folder and this list (but by
the analyses that read a server's own files, as `tune` reads SGLang's
config naming). Adding one is a new folder, a line here, docs and tests
(docs/how-it-works.md#adding-a-server-or-a-kernel-library).

A seam's HOOKS wait for the variable (the start-up hook); a kernel
library's DOORS are doors (recording/doors.py: inert outside logged
passes), put on by `import sgl_shapeprof` itself (door_finder.py) and by the
start-up hook. Imports nothing but the seams (standard library only):
the package's import reads it.
"""
from __future__ import annotations

import importlib
from types import ModuleType

INTEGRATIONS = ("sglang", "vllm", "flashinfer", "tvm_ffi", "cute_dsl", "inductor")


def seam(name: str) -> ModuleType:
    """The seam.py of integration `name` (standard library only: cheap)."""
    return importlib.import_module(f"{__package__}.{name}.seam")


def servers() -> list[str]:
    """The integrations `sgl-shapeprof run --server` starts (an ENGINE)."""
    return [n for n in INTEGRATIONS if getattr(seam(n), "ENGINE", None)]


def hooks(unarmed: bool = False) -> dict[str, tuple[str, str]]:
    """Every integration's modules the start-up hook patches where they are
    imported, with profiling on (HOOKS and DOORS) or off (UNARMED_HOOKS):
    module -> (ours, its function)."""
    out: dict[str, tuple[str, str]] = {}
    for name in INTEGRATIONS:
        s = seam(name)
        if unarmed:
            out.update(getattr(s, "UNARMED_HOOKS", {}))
        else:
            out.update(getattr(s, "HOOKS", {}))
            out.update(getattr(s, "DOORS", {}))
    return out


def doors() -> dict[str, tuple[str, str]]:
    """The kernel libraries' doors, patched where their modules are imported
    by any process that imports sgl_shapeprof: module -> (ours, its function)."""
    out: dict[str, tuple[str, str]] = {}
    for name in INTEGRATIONS:
        out.update(getattr(seam(name), "DOORS", {}))
    return out


def door_misses() -> dict[str, str]:
    """module of doors() -> what its door misses when its library was
    imported before it (the seam's IMPORTED_BEFORE); absent: nothing."""
    out: dict[str, str] = {}
    for name in INTEGRATIONS:
        s = seam(name)
        miss = getattr(s, "IMPORTED_BEFORE", None)
        if miss:
            out.update(dict.fromkeys(getattr(s, "DOORS", {}), miss))
    return out
