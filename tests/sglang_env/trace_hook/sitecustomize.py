"""Diagnostic only: put this folder on PYTHONPATH together with ../stubs and
set SGLENV_TRACE=/some/file. Every process (engine, scheduler, TP ranks,
detokenizer) appends one line per first call of the watched methods, written
and flushed at once (SGLang ends its children with SIGKILL, so atexit is not
an option).

The tests' oracle for which worker a process is: with SGLENV_PARALLEL=DIR,
each TpModelWorker writes DIR/<pid>.json after its __init__, holding what
SGLang's own get_parallel() says there (no code of sgl_shapeprof's runs)."""
import importlib.abc
import importlib.util
import os
import sys

_OUT = os.environ.get("SGLENV_TRACE")
_PARALLEL = os.environ.get("SGLENV_PARALLEL")
PARALLEL_FIELDS = ("tp_rank", "tp_size", "pp_rank", "pp_size", "dp_rank", "num_dp_ranks", "moe_ep_rank",
                   "moe_ep_size", "attn_dp_rank", "attn_dp_size")
WATCH = {
    "sglang.srt.managers.tp_worker": [("TpModelWorker", "__init__"),
                                      ("TpModelWorker", "forward_batch_generation")],
    "sglang.srt.model_executor.model_runner": [("ModelRunner", "__init__"),
                                               ("ModelRunner", "forward")],
    "sglang.srt.managers.scheduler": [("Scheduler", "__init__"),
                                      ("Scheduler", "run_batch")],
    "sglang.multimodal_gen.runtime.managers.gpu_worker": [("GPUWorker", "__init__"),
                                                          ("GPUWorker", "execute_forward")],
}


def _log(msg):
    if not _OUT:
        return
    import multiprocessing as mp
    with open(_OUT, "a") as f:
        f.write(f"pid={os.getpid()} ppid={os.getppid()} proc={mp.current_process().name} {msg}\n")


def _wrap(mod, cls, meth):
    c = getattr(mod, cls, None)
    if c is None or not hasattr(c, meth):
        _log(f"MISSING {mod.__name__}.{cls}.{meth}")
        return
    orig = getattr(c, meth)
    state = {"n": 0}

    def w(self, *a, **k):
        state["n"] += 1
        if state["n"] <= 2:
            _log(f"call#{state['n']} {mod.__name__}.{cls}.{meth} self={type(self).__module__}.{type(self).__qualname__}")
        out = orig(self, *a, **k)
        if _PARALLEL and (cls, meth) == ("TpModelWorker", "__init__"):
            _write_parallel()
        return out

    w.__wrapped__ = orig
    setattr(c, meth, w)


def _write_parallel():
    import json
    from sglang.srt.runtime_context import get_parallel
    par, seen = get_parallel(), {}
    for name in PARALLEL_FIELDS:
        try:
            seen[name] = getattr(par, name)
        except Exception as e:  # unpublished: said, not guessed
            seen[name] = f"unset: {type(e).__name__}"
    with open(os.path.join(_PARALLEL, f"{os.getpid()}.json"), "w") as f:
        json.dump(seen, f)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in WATCH:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        orig_exec = spec.loader.exec_module

        def exec_module(module):
            orig_exec(module)
            for cls, meth in WATCH[name]:
                _wrap(module, cls, meth)

        spec.loader.exec_module = exec_module
        return spec


if _OUT or _PARALLEL:
    sys.meta_path.insert(0, _Finder())
