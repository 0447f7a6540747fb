"""The floor: what any dispatch-key hook pays per operator call, measured
beside sgl_shapeprof. forward_only.cpp is a boxed fallback on the same key
(DispatchKey::Fake) that records nothing and only forwards; build() compiles
it against this interpreter's torch, ForwardOnly is a marker whose passes put
the key in the thread's included set, as sgl_shapeprof's passes do.

Used by run.py (a row of the timing table and a callgrind segment, each in a
process of its own: sgl_shapeprof's fallback cannot be installed beside it)
and by server.py's `floor` engine (forward_only_site/sitecustomize.py).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "forward_only.cpp")
ENV = "SHAPEPROF_BENCH_FORWARD_ONLY"  # the built library, for child processes
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "sgl_shapeprof-bench")


def build() -> str | None:
    """The library built from forward_only.cpp for this torch (cached per
    torch version and source), or None, said on stderr, when it cannot be."""
    import torch
    from torch.utils import cpp_extension
    text = open(SOURCE, "rb").read()
    tag = hashlib.sha1(text + torch.__version__.encode()).hexdigest()[:12]
    lib = os.path.join(CACHE, f"forward_only-{tag}.so")
    if os.path.exists(lib):
        return lib
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if cxx is None:
        print("forward-only fallback: no C++ compiler; the floor is left out", file=sys.stderr)
        return None
    os.makedirs(CACHE, exist_ok=True)
    tmp = f"{lib}.{os.getpid()}.tmp"
    # the C++ standard torch builds its extensions with (cpp_extension)
    cmd = [cxx, "-O2", "-std=c++20", "-shared", "-fPIC",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           *[f"-I{d}" for d in cpp_extension.include_paths()],
           *[f"-L{d}" for d in cpp_extension.library_paths()], "-o", tmp, SOURCE, "-lc10", "-ltorch_cpu"]
    print(f"building {os.path.basename(SOURCE)} for torch {torch.__version__} (once) ...",
          file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"forward-only fallback: build failed, the floor is left out:\n{r.stderr[-2000:]}",
              file=sys.stderr)
        return None
    os.replace(tmp, lib)
    return lib


class ForwardOnly:
    """Passes with the key on and the forward-only fallback behind it. Loading
    the library registers the fallback (torch must be imported first)."""

    def __init__(self, lib: str):
        self._lib = ctypes.CDLL(lib)
        self._lib.forward_only_key.argtypes = [ctypes.c_int]
        self._lib.forward_only_key.restype = ctypes.c_int
        self._depth = threading.local()

    def _enter(self) -> None:
        d = getattr(self._depth, "n", 0)
        if d == 0:
            self._lib.forward_only_key(1)
        self._depth.n = d + 1

    def start_forward_pass(self, phase=None) -> bool:
        self._enter()
        return True

    reopen_forward_pass = start_forward_pass

    def end_forward_pass(self) -> None:
        d = getattr(self._depth, "n", 0)
        if d == 1:
            self._lib.forward_only_key(0)
        self._depth.n = max(d - 1, 0)

    @contextlib.contextmanager
    def forward_pass(self, phase=None):
        """A pass that nests, as ShapeProfiler.forward_pass does."""
        self._enter()
        try:
            yield True
        finally:
            self.end_forward_pass()
