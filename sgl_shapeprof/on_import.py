"""A server's modules patched where they are imported: a meta path finder
whose loader runs the module, then our patch of it. Shared by the SGLang
start-up hook, the vLLM plugin and the kernel libraries' doors (put on by
the package's import: integrations/door_finder.py; Triton's among them):
below both recording/ and integrations/, it imports
nothing of the package. Imports nothing heavy (both run in every
process of a server): a patch function loads only when its module is
imported, and any failure of a patch leaves the module as it is (said on
stderr), never a failed import.

A module imported before its finder is patched in place when the finder is
installed, which may be too late to be whole (a decorator replaced after it
was applied); what the finder says of it then waits here for a profiler to
say it (imported_before()).
"""
from __future__ import annotations

import importlib.machinery
import sys

_patched: set = set()  # modules a loader of ours patched as they were imported
_late: dict = {}  # a module imported before its finder -> what that finder said of it


def patch_now(patches: dict, module) -> None:
    """patches: {module name: (our module, its function)}; runs the one for module."""
    import importlib
    ours, function = patches[module.__name__]
    getattr(importlib.import_module(ours), function)(module)


class PatchingLoader:
    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as e:  # never break the import
            sys.stderr.write(f"sgl_shapeprof: cannot patch {module.__name__}: {e}\n")
        else:
            _patched.add(module.__name__)

    def __getattr__(self, name):  # get_source, get_code, ... for tools
        return getattr(self._loader, name)


def patching_spec(name, path, patch):
    """The module's spec, with a loader that runs patch(module) after it."""
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        return None
    spec.loader = PatchingLoader(spec.loader, patch)
    return spec


class PatchingFinder:
    """A meta path finder (the protocol only: importlib.abc costs 12 ms) for
    the modules of `patches` ({module name: (our module, its function)})."""

    def __init__(self, patches: dict):
        self.patches = patches

    def patch(self, module) -> None:
        patch_now(self.patches, module)

    def imported_before(self, name: str) -> "str | None":
        """What to say of module `name` of patches, imported before this
        finder and patched by none of ours as it was: what its patch, made
        in place now, misses. Said once when a profiler is made; None:
        nothing to say."""
        return None

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        return patching_spec(name, path, self.patch)

    def invalidate_caches(self):
        pass


# Our wrappers, one marker: every function we put in a library's or a
# server's place carries the function it wraps under this attribute, so that
# a wrapper is never wrapped again (a module patched twice, a plugin loaded
# twice, a door and the start-up hook both) and is taken off by original_of.
WRAPPED = "__sgl_shapeprof_wrapped__"


def mark(wrapper, original):
    """wrapper, marked as ours, wrapping original."""
    setattr(wrapper, WRAPPED, original)
    return wrapper


def original_of(fn):
    """What our wrapper fn wraps; None when fn is not ours."""
    return getattr(fn, WRAPPED, None)


def is_ours(fn) -> bool:
    return original_of(fn) is not None


def install_finder(finder: PatchingFinder) -> bool:
    """Patches the modules already imported, and the others when they are;
    once per finder class. True if installed now."""
    if any(isinstance(f, type(finder)) for f in sys.meta_path):
        return False
    for name in finder.patches:
        if name in sys.modules:  # imported before us: patch in place
            line = finder.imported_before(name) if name not in _patched else None
            if line:
                _late.setdefault(name, line)
            try:
                finder.patch(sys.modules[name])
            except Exception as e:
                sys.stderr.write(f"sgl_shapeprof: cannot patch {name}: {e}\n")
    sys.meta_path.insert(0, finder)
    return True


def imported_before() -> list:
    """What the finders said of the modules imported before them, each line
    once (a library's modules say one line): for a profiler to say."""
    return list(dict.fromkeys(_late.values()))
