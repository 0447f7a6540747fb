"""server.py's `floor` engine: SGLang's forward passes run with the key on
and benchmarks/forward_only.cpp's fallback behind it (it records nothing,
only forwards: what any dispatch-key hook pays), opened and closed by
sgl_shapeprof's own SGLang wrappers with a ForwardOnly marker in place of
the profiler, so that the same calls go through the fallback. On PYTHONPATH
in that engine's processes only (server.py sets it, with the library in
SHAPEPROF_BENCH_FORWARD_ONLY)."""
import os
import sys

_LIB = os.environ.get("SHAPEPROF_BENCH_FORWARD_ONLY")
_marker = None


def _attach(worker):
    global _marker
    from sgl_shapeprof.integrations.sglang.workers import LLM_FORWARDS
    if _marker is None:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from forward_only import ForwardOnly
        _marker = ForwardOnly(_LIB)
    for name, wrap in LLM_FORWARDS.items():
        bound = getattr(worker, name, None)
        if callable(bound):
            setattr(worker, name, wrap(bound, _marker, lambda *a, **k: None))


def patch_llm_module(module):
    from sgl_shapeprof.integrations.passes import wrap_init
    wrap_init(module.TpModelWorker, _attach)


if _LIB:
    from sgl_shapeprof.integrations.sglang.seam import LLM_WORKER as SGLANG_LLM_WORKER
    from sgl_shapeprof.on_import import PatchingFinder, install_finder

    class _FloorFinder(PatchingFinder):
        pass

    install_finder(_FloorFinder({SGLANG_LLM_WORKER: ("sitecustomize", "patch_llm_module")}))
