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

from ...recording.switch import loads_hook
from .. import (SGLANG_BREAKABLE_GRAPH_BACKEND, SGLANG_DIFFUSION_WORKER, SGLANG_FP8_UTILS,
                SGLANG_FULL_GRAPH_BACKEND, SGLANG_HTTP_SERVER, SGLANG_INT8_UTILS, SGLANG_LLM_WORKER,
                SGLANG_PROFILER_MANAGER, SGLANG_TOKENIZER_CONTROL, VLLM_PARALLEL_CONFIG)
from ...on_import import PatchingFinder, install_finder, patch_now, patching_spec

# Not armed: only where /start_profile requests enter (the .pth names it too)
UNARMED_TARGETS = (SGLANG_TOKENIZER_CONTROL,)


# module -> (our module, its patch function), imported when the module is
PATCHES = {
    SGLANG_LLM_WORKER: (f"{__package__}.workers", "patch_llm_module"),
    SGLANG_DIFFUSION_WORKER: (f"{__package__}.workers", "patch_diffusion_module"),
    SGLANG_PROFILER_MANAGER: (f"{__package__}.start_profile", "patch_profiler_manager_module"),
    SGLANG_TOKENIZER_CONTROL: (f"{__package__}.start_profile", "patch_tokenizer_control_module"),
    SGLANG_HTTP_SERVER: (f"{__package__}.start_profile", "patch_http_server_module"),
    SGLANG_FULL_GRAPH_BACKEND: (f"{__package__}.cuda_graphs", "patch_full_graph_backend_module"),
    SGLANG_BREAKABLE_GRAPH_BACKEND: (f"{__package__}.cuda_graphs", "patch_breakable_graph_backend_module"),
    SGLANG_FP8_UTILS: (f"{__package__}.block_gemm", "patch_quantization_module"),
    SGLANG_INT8_UTILS: (f"{__package__}.block_gemm", "patch_quantization_module"),
    # vLLM's EngineCore discards a dense model's DP size before it loads
    # vLLM's plugins (ours among them): only this hook is early enough
    VLLM_PARALLEL_CONFIG: ("sgl_shapeprof.integrations.vllm.workers", "patch_parallel_config_module"),
}


# What to patch; the patch functions load only when one of these modules is
# imported (the hook runs in every Python process of the server).
TARGETS = tuple(PATCHES)


def _patch(module) -> None:
    patch_now(PATCHES, module)


def unarmed_spec(name, path):
    """For the .pth's finder (SGLANG_PROFILE_SHAPES unset): a spec that
    patches the module, for UNARMED_TARGETS."""
    return patching_spec(name, path, _patch) if name in UNARMED_TARGETS else None


class _WorkerFinder(PatchingFinder):
    """SGLang's modules of PATCHES."""


def install_worker_patcher() -> None:
    install_finder(_WorkerFinder(PATCHES))


# the .pth's test (it imports this module only then); else unarmed_spec() is asked
if loads_hook():
    install_worker_patcher()
