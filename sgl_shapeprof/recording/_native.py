"""Loads the native module sgl_shapeprof._C, once it is known to fit.

A C++ extension loads only into the torch it was built against; another one
fails with an undefined-symbol ImportError, or worse. setup.py writes the
torch it built for into _build.py; we compare before loading.
"""
from __future__ import annotations

REINSTALL = ("reinstall it against this torch: pip install --no-build-isolation "
             "--force-reinstall --no-deps sgl_shapeprof (or . in its source folder)")


class NativeModuleError(ImportError):
    """The native module does not fit the running torch; str() is one line."""


def release(version: str) -> str:
    """'2.14.1' of '2.14.1+cu128': builds of one release share their C++ ABI."""
    return version.split("+", 1)[0]


def load():
    """sgl_shapeprof._C, or NativeModuleError saying what to do."""
    import torch  # loads libc10/libtorch, which the module links against

    try:
        from .._build import TORCH_VERSION as built
    except ImportError:  # a build without the file (older setup.py)
        built = None
    running = torch.__version__
    if built is not None and release(built) != release(running):
        raise NativeModuleError(
            f"sgl_shapeprof was built for torch {built}, running torch {running}: {REINSTALL}")
    try:
        from .. import _C
    except ImportError as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NativeModuleError(f"cannot load sgl_shapeprof's native module ({detail}): {REINSTALL}") from None
    return _C
