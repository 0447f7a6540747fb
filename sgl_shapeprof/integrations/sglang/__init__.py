"""The SGLang integration: SGLang's modules patched where they are imported.

- workers.py: each worker forward call one pass (attach_llm_worker,
  attach_diffusion_worker), SGLang's custom ops routed through the
  dispatcher while a pass is logged (custom_ops_recorded);
- start_profile.py: /start_profile with "SHAPES" records on request;
- cuda_graphs.py: graph captures recorded, replays counted;
- seam.py: SGLang's modules and which of ours patches each; the start-up
  hook (../startup_hook.py: its .pth line is installed by ../install.py,
  `sgl-shapeprof hook install`) patches them when SGLang imports them; the
  patches in patches/ call the same functions instead;
- engine.py: SGLang's offline engine for `sgl-shapeprof run`.

Imports nothing here (the start-up hook imports this package at Python
start-up): the names below load on first use.
"""
_LAZY = {
    "llm_phase": "workers", "llm_tp_rank": "workers", "custom_ops_recorded": "workers",
    "profile_calls": "workers", "profile_yields": "workers", "is_warmup_request": "workers",
    "attach_llm_worker": "workers", "attach_diffusion_worker": "workers",
    "patch_llm_module": "workers", "patch_diffusion_module": "workers",
    "SHAPES": "start_profile", "NOT_ARMED": "start_profile", "shapes_request": "start_profile",
    "patch_profiler_manager_module": "start_profile", "patch_tokenizer_control_module": "start_profile",
    "patch_http_server_module": "start_profile",
    "GRAPH_FAMILY": "cuda_graphs", "graph_phase": "cuda_graphs", "graph_key": "cuda_graphs",
    "patch_full_graph_backend_module": "cuda_graphs", "patch_breakable_graph_backend_module": "cuda_graphs",
}
__all__ = sorted(_LAZY)


from ...lazy import lazy_attributes  # noqa: E402

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
