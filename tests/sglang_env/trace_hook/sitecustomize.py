"""Diagnostic only: put this folder on PYTHONPATH together with ../stubs and
set SGLENV_TRACE=/some/file. Every process (engine, scheduler, TP ranks,
detokenizer) appends one line per first call of the watched methods, written
and flushed at once (SGLang ends its children with SIGKILL, so atexit is not
an option)."""
import importlib.abc
import importlib.util
import os
import sys

_OUT = os.environ.get("SGLENV_TRACE")
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
        return orig(self, *a, **k)

    w.__wrapped__ = orig
    setattr(c, meth, w)


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


if _OUT:
    sys.meta_path.insert(0, _Finder())
