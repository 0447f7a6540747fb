"""Zero-edit mode: imported at interpreter start-up by sgl_shapeprof_autohook.pth
only when SGLANG_PROFILE_SHAPES=1. It wraps SGLang's worker classes when (and
if) their modules are imported; nothing else is touched and torch is not
imported here.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as e:  # never break the import
            sys.stderr.write(f"sgl_shapeprof: cannot hook {module.__name__}: {e}\n")

    def __getattr__(self, name):  # get_source, get_code, ... for tools
        return getattr(self._loader, name)


class _WorkerFinder(importlib.abc.MetaPathFinder):
    def __init__(self, targets):
        self._targets = targets

    def find_spec(self, name, path, target=None):
        patch = self._targets.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install_import_hooks() -> None:
    from .integrations.sglang import TARGETS
    if any(isinstance(f, _WorkerFinder) for f in sys.meta_path):
        return
    for name, patch in TARGETS.items():
        if name in sys.modules:  # imported before us: patch in place
            patch(sys.modules[name])
    sys.meta_path.insert(0, _WorkerFinder(TARGETS))


install_import_hooks()
