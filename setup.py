"""Builds sgl_shapeprof._C against the torch that is already installed.

    pip install --no-build-isolation .

(An isolated build would make pip fetch its own torch: gigabytes, and an ABI
that may not match the torch you run.)
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:
    import torch
    from torch.utils import cpp_extension
except ImportError:  # pragma: no cover - build-time message
    sys.exit("sgl_shapeprof: building needs torch installed first "
             "(pip install torch, then pip install --no-build-isolation .)")

WARNINGS = ["-Wall", "-Wextra", "-Werror"]
TORCH_LIB = cpp_extension.library_paths()[0]


class BuildExt(build_ext):
    """C11 for .c, C++17 for .cpp, from one extension."""

    def build_extensions(self):
        compiler = self.compiler
        original = compiler._compile

        def compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts):
            std = ["-std=c++17"] if src.endswith(".cpp") else ["-std=c11"]
            return original(obj, src, ext, cc_args, extra_postargs + std, pp_opts)

        compiler._compile = compile_one
        super().build_extensions()


class BuildPy(build_py):
    """Puts the zero-edit start-up hook at the top of the wheel, so that it
    lands in site-packages/ (it does nothing unless SGLANG_PROFILE_SHAPES=1)."""

    PTH = os.path.join("sgl_shapeprof", "sgl_shapeprof_autohook.pth")

    def run(self):
        super().run()
        self.copy_file(self.PTH, os.path.join(self.build_lib, os.path.basename(self.PTH)))


abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", 1))
system_includes = []
for path in cpp_extension.include_paths():
    system_includes += ["-isystem", path]

extension = Extension(
    "sgl_shapeprof._C",
    sources=["csrc/sp_core.c", "csrc/sp_fallback.cpp", "csrc/sp_module.c"],
    include_dirs=["csrc"],
    language="c++",
    extra_compile_args=WARNINGS + system_includes + [
        "-O2", "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"],
    library_dirs=[TORCH_LIB],
    libraries=["c10", "torch_cpu"],
    extra_link_args=[f"-Wl,-rpath,{TORCH_LIB}"],
)

setup(ext_modules=[extension], cmdclass={"build_ext": BuildExt, "build_py": BuildPy})
