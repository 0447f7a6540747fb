"""vLLM's general plugin (entry point `vllm.general_plugins`: sgl_shapeprof):
vLLM calls register() once in each of its processes (the API server,
EngineCore, every worker). With SHAPEPROF (or SGLANG_PROFILE_SHAPES) unset
or 0 it installs one import hook for one module, vLLM's profile routes,
which only the API server imports: there /start_profile and /stop_profile
then say what to set instead of a bare 404 (api_server.py); nothing else
is imported, nothing is patched elsewhere. Otherwise it installs an import
hook that patches vLLM's model runners, CUDA graph wrapper and worker when
they are imported -- which happens only where the model runs, the workers
-- and the profile routes in the API server (mounted when armed with
SHAPEPROF=on_request). Idempotent.
"""
from __future__ import annotations

from ...recording.switch import loads_hook
from .. import (VLLM_CUDA_GRAPH, VLLM_EXECUTOR, VLLM_MODEL_RUNNER, VLLM_MODEL_RUNNER_V2, VLLM_PROFILE_ROUTER,
                VLLM_WORKER)
from ...on_import import PatchingFinder, install_finder

# vLLM's module -> (our module, its patch function), imported when vLLM's is
PATCHES = {module: (f"{__package__}.{ours}", function) for module, ours, function in (
    (VLLM_MODEL_RUNNER, "workers", "patch_model_runner_module"),
    (VLLM_MODEL_RUNNER_V2, "workers", "patch_model_runner_module"),
    (VLLM_CUDA_GRAPH, "cuda_graphs", "patch_cuda_graph_module"),
    (VLLM_WORKER, "workers", "patch_worker_module"),
    (VLLM_EXECUTOR, "start_profile", "patch_executor_module"),
    (VLLM_PROFILE_ROUTER, "api_server", "patch_profile_router_module"))}
# profiling off: the API server's profile routes only
UNARMED_PATCHES = {VLLM_PROFILE_ROUTER: PATCHES[VLLM_PROFILE_ROUTER]}


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
        install_finder(VllmUnarmedFinder(UNARMED_PATCHES))
