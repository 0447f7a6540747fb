"""The start-up hook: SGLang profiled unedited. Imported at interpreter
start-up by its .pth line (sgl_shapeprof_autohook.pth; `sgl-shapeprof hook
install` puts it in place, install.py) only when SGLANG_PROFILE_SHAPES is set
and not 0 (recording.switch.loads_hook: a bad value too, and the worker's
from_env() then says which). It wraps SGLang's worker classes when (and
if) their modules are imported; nothing else is touched and torch is not
imported here.

With the variable unset (or 0) the .pth imports nothing: its own finder asks
unarmed_spec() for SGLang's tokenizer module only, so that a /start_profile
request for SHAPES gets an error naming the variable instead of SGLang's
"Start profiling." with nothing recorded.
"""
from __future__ import annotations

import importlib.machinery
import sys

from ...recording.switch import loads_hook
from .. import (SGLANG_BREAKABLE_GRAPH_BACKEND, SGLANG_DIFFUSION_WORKER, SGLANG_FP8_UTILS,
                           SGLANG_FULL_GRAPH_BACKEND, SGLANG_HTTP_SERVER, SGLANG_INT8_UTILS, SGLANG_LLM_WORKER,
                           SGLANG_PROFILER_MANAGER, SGLANG_TOKENIZER_CONTROL)

# Not armed: only where /start_profile requests enter (the .pth names it too)
UNARMED_TARGETS = (SGLANG_TOKENIZER_CONTROL,)


# module -> (our module, its patch function), imported when the module is
PATCHES = {
    SGLANG_LLM_WORKER: ("workers", "patch_llm_module"),
    SGLANG_DIFFUSION_WORKER: ("workers", "patch_diffusion_module"),
    SGLANG_PROFILER_MANAGER: ("start_profile", "patch_profiler_manager_module"),
    SGLANG_TOKENIZER_CONTROL: ("start_profile", "patch_tokenizer_control_module"),
    SGLANG_HTTP_SERVER: ("start_profile", "patch_http_server_module"),
    SGLANG_FULL_GRAPH_BACKEND: ("cuda_graphs", "patch_full_graph_backend_module"),
    SGLANG_BREAKABLE_GRAPH_BACKEND: ("cuda_graphs", "patch_breakable_graph_backend_module"),
    SGLANG_FP8_UTILS: ("block_gemm", "patch_quantization_module"),
    SGLANG_INT8_UTILS: ("block_gemm", "patch_quantization_module"),
}


# What to patch; the patch functions load only when one of these modules is
# imported (the hook runs in every Python process of the server).
TARGETS = tuple(PATCHES)


def _patch(module) -> None:
    import importlib
    ours, function = PATCHES[module.__name__]
    getattr(importlib.import_module(f"{__package__}.{ours}"), function)(module)


class _PatchingLoader:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            _patch(module)
        except Exception as e:  # never break the import
            sys.stderr.write(f"sgl_shapeprof: cannot patch {module.__name__}: {e}\n")

    def __getattr__(self, name):  # get_source, get_code, ... for tools
        return getattr(self._loader, name)


def _patching_spec(name, path):
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        return None
    spec.loader = _PatchingLoader(spec.loader)
    return spec


def unarmed_spec(name, path):
    """For the .pth's finder (SGLANG_PROFILE_SHAPES unset): a spec that
    patches the module, for UNARMED_TARGETS."""
    return _patching_spec(name, path) if name in UNARMED_TARGETS else None


class _WorkerFinder:
    """A meta path finder (the protocol only: importlib.abc costs 12 ms)."""

    def find_spec(self, name, path, target=None):
        if name not in TARGETS:
            return None
        return _patching_spec(name, path)

    def invalidate_caches(self):
        pass


def install_worker_patcher() -> None:
    if any(isinstance(f, _WorkerFinder) for f in sys.meta_path):
        return
    for name in TARGETS:
        if name in sys.modules:  # imported before us: patch in place
            _patch(sys.modules[name])
    sys.meta_path.insert(0, _WorkerFinder())


# the .pth's test (it imports this module only then); else unarmed_spec() is asked
if loads_hook():
    install_worker_patcher()
