"""vLLM's general plugin (entry point `vllm.general_plugins`: sgl_shapeprof):
vLLM calls register() once in each of its processes (the API server,
EngineCore, every worker). With SHAPEPROF (or SGLANG_PROFILE_SHAPES) unset
or 0 it installs one import hook for one module, vLLM's profile routes,
which only the API server imports: there /start_profile and /stop_profile
then say what to set instead of a bare 404 (api_server.py); nothing else
of vLLM is patched, and the kernel libraries' doors that the package's
own import puts on are taken off again (../door_finder.py's stand_down).
Otherwise it installs an import hook that patches vLLM's model runners,
CUDA graph wrapper and worker when they are imported -- which happens only
where the model runs, the workers -- and the profile routes in the API
server (mounted when armed with SHAPEPROF=on_request). Idempotent.
"""
from __future__ import annotations

from ...on_import import PatchingFinder, install_finder
from .. import door_finder
from ...recording.switch import loads_hook
from .seam import PLUGIN_HOOKS as PATCHES
from .seam import PLUGIN_UNARMED_HOOKS as UNARMED_PATCHES


class VllmFinder(PatchingFinder):
    """vLLM's modules of PATCHES."""


class VllmUnarmedFinder(PatchingFinder):
    """UNARMED_PATCHES: a name compared per import, nothing more."""


def register() -> None:
    """The entry point: installs VllmFinder once per process when profiling
    is on, else VllmUnarmedFinder."""
    if loads_hook():
        install_finder(VllmFinder(PATCHES))
    else:
        door_finder.stand_down()  # off means off: no kernel library wrapped
        install_finder(VllmUnarmedFinder(UNARMED_PATCHES))
