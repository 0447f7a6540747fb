"""The vLLM integration: vLLM's modules patched where they are imported,
from vLLM's own plugin entry point (zero-edit: pip install, one variable).

- plugin.py: register(), the `vllm.general_plugins` entry point;
- workers.py: each model runner step one pass (execute_model, and the
  sample_tokens that follows), its phase from the SchedulerOutput; the
  worker's shutdown closes its profiler first;
- cuda_graphs.py: CUDAGraphWrapper's captures recorded, replays counted;
- start_profile.py: /start_profile and /stop_profile record shapes in the
  workers of a server armed with SHAPEPROF=on_request (all of them, or
  none: the executor takes back a request another worker refused);
- api_server.py: the two routes in the API server, armed or not (not
  armed: an answer naming what to set).

Imports nothing here (vLLM loads the plugin in every process): the names
below load on first use.
"""
_LAZY = {
    "register": "plugin",
    "step_phase": "workers", "runner_rank": "workers", "attach_model_runner": "workers",
    "patch_model_runner_module": "workers", "patch_worker_module": "workers",
    "patch_cuda_graph_module": "cuda_graphs",
    "shapes_output": "start_profile", "patch_executor_module": "start_profile",
    "patch_profile_router_module": "api_server",
}
__all__ = sorted(_LAZY)


from ...lazy import lazy_attributes  # noqa: E402

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
