"""Shared machinery for the sgl_kernel placeholder.

Every attribute looked up on a placeholder module is a callable that raises
NotImplementedError naming itself. Importing works; calling does not.
"""
import importlib.abc
import importlib.machinery
import os
import sys
import types


class _Missing:
    """Stands in for any sgl_kernel name. Calling it raises."""

    def __init__(self, qualname):
        self._qualname = qualname
        self.__name__ = qualname.rsplit(".", 1)[-1]
        self.__qualname__ = self.__name__
        self.__module__ = qualname.rsplit(".", 1)[0]
        self.__doc__ = "placeholder for " + qualname

    def __call__(self, *args, **kwargs):
        _record("CALLED " + self._qualname)
        raise NotImplementedError(
            f"{self._qualname} is a placeholder (tests/sglang_env/stubs/sgl_kernel): "
            "the real sglang-kernel is CUDA-only and is not installed here"
        )

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Missing(self._qualname + "." + name)

    def __repr__(self):
        return f"<sgl_kernel placeholder {self._qualname}>"


def make_getattr(modname):
    def __getattr__(name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        _record(modname + "." + name)
        return _Missing(modname + "." + name)

    return __getattr__


# Names looked up so far (module.attr), for discovering what SGLang imports.
LOOKED_UP = []
# STUB_SGL_KERNEL_LOG=/some/file: append each new name at once, with the pid
# (SGLang SIGKILLs its worker processes, so an exit hook would miss them).
_LOG = os.environ.get("STUB_SGL_KERNEL_LOG", "")
_LOG_FILE = _LOG if _LOG not in ("", "0", "1") else None


def _record(qualname):
    if qualname not in LOOKED_UP:
        LOOKED_UP.append(qualname)
        if _LOG_FILE:
            with open(_LOG_FILE, "a") as f:
                f.write(f"{os.getpid()} {qualname}\n")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes any sgl_kernel.<a>.<b> submodule importable as a placeholder."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("sgl_kernel."):
            # let real files in this package win
            return None if _real_spec(fullname) else importlib.machinery.ModuleSpec(
                fullname, self, is_package=True
            )
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = make_getattr(spec.name)
        mod.__sgl_kernel_placeholder__ = True
        return mod

    def exec_module(self, module):
        _record("<module> " + module.__name__)


def _real_spec(fullname):
    parent, _, leaf = fullname.rpartition(".")
    pmod = sys.modules.get(parent)
    ppath = getattr(pmod, "__path__", None)
    if not ppath:
        return None
    return importlib.machinery.PathFinder.find_spec(fullname, ppath)


def install_finder():
    for f in sys.meta_path:
        if isinstance(f, _Finder):
            return
    sys.meta_path.append(_Finder())
