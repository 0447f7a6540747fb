"""Load SGLang's real worker modules with every other sglang.* import stubbed,
so that the patched __init__ and forward methods can run without SGLang's
dependencies (CUDA kernels, model runners, schedulers)."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from unittest import mock


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=f"{cls.__name__}.{name}")


class Stub(metaclass=_StubMeta):
    """Any imported class: accepts any arguments; attributes are mocks."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return mock.MagicMock(name=name)


class _StubModule(types.ModuleType):
    def __init__(self, name, overrides):
        super().__init__(name)
        self.__path__ = []  # a package, so submodules import too
        self._overrides = overrides

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        key = f"{self.__name__}.{attr}"
        if key in self._overrides:
            value = self._overrides[key]
        elif attr[:1].isupper() and not attr.isupper():
            value = type(attr, (Stub,), {})
        else:
            value = mock.MagicMock(name=key)
        setattr(self, attr, value)
        return value


# SGLang's third-party dependencies that the worker files import at the top.
THIRD_PARTY = ("setproctitle",)


def _stubbed(name: str) -> bool:
    root = name.split(".")[0]
    if root == "sglang":
        return True
    return root in THIRD_PARTY and importlib.machinery.PathFinder.find_spec(root) is None


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, real: dict, overrides: dict):
        self.real, self.overrides = real, overrides

    def find_spec(self, name, path, target=None):
        if name in self.real:
            return importlib.util.spec_from_file_location(name, self.real[name])
        if _stubbed(name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name, self.overrides)

    def exec_module(self, module):
        pass


class stubbed_sglang:
    """with stubbed_sglang({"sglang.srt.managers.tp_worker": path}, overrides):
    import the real file at path; all other sglang modules are stubs."""

    def __init__(self, real: dict, overrides: dict = None):
        self.finder = _StubFinder(real, overrides or {})

    def __enter__(self):
        self.saved = {k: v for k, v in sys.modules.items() if _stubbed(k)}
        for k in self.saved:
            del sys.modules[k]
        sys.meta_path.insert(0, self.finder)
        return self

    def __exit__(self, *exc):
        sys.meta_path.remove(self.finder)
        for k in [k for k in sys.modules if _stubbed(k)]:
            del sys.modules[k]
        sys.modules.update(self.saved)
