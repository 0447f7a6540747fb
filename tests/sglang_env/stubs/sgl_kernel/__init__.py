"""Placeholder for SGLang's `sgl_kernel` (PyPI: sglang-kernel), which is CUDA-only.

Put tests/sglang_env/stubs on PYTHONPATH. Any name or submodule imports;
calling any of them raises NotImplementedError naming the function. On an x86
CPU without Intel AMX, SGLang's CPU path imports these names but never calls
them. STUB_SGL_KERNEL_LOG=1 prints the names looked up at exit (processes
that SGLang SIGKILLs never get there); STUB_SGL_KERNEL_LOG=/path appends
"<pid> <name>" lines to that file as they happen, and "CALLED <name>" lines
when a placeholder is called.
"""
import os as _os

from . import _stub

__version__ = "0.0.0+placeholder"
__sgl_kernel_placeholder__ = True

_stub.install_finder()
__getattr__ = _stub.make_getattr(__name__)

if _os.environ.get("STUB_SGL_KERNEL_LOG") == "1":
    import atexit as _atexit
    import sys as _sys

    @_atexit.register
    def _report():
        _sys.stderr.write(
            "[sgl_kernel placeholder] looked up (pid %d): %s\n"
            % (_os.getpid(), ", ".join(_stub.LOOKED_UP) or "-")
        )
