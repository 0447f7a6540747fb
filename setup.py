"""Builds sgl_shapeprof._C against the torch that is already installed.

    pip install --no-build-isolation .

torch's own extension machinery (torch.utils.cpp_extension) picks the C++
standard, ABI flag, include and library paths of the torch it runs under; the
C core is compiled as C11 beside it. The wheel requires the torch release it
was built for: a C++ extension only loads into that one.

SHAPEPROF_WERROR=1 (set by the Makefile and CI) turns our warnings into
errors; a user's install must not fail because a newer compiler warns.
"""
import os
import platform
import sys

import setuptools
from setuptools import setup
from setuptools.command.build_py import build_py

ISOLATED_HINT = ("sgl_shapeprof builds against the torch you run, and pip's isolated build "
                 "environment has none: pip install --no-build-isolation . "
                 "(or sgl_shapeprof; with torch installed first)")


def _torch_or_exit():
    """torch, or one line saying how to build. An isolated build environment
    (plain `pip install .`) has no torch of its own: we refuse to fetch one,
    since the extension would be built against a torch the user does not run."""
    if "pip-build-env-" in (os.environ.get("PYTHONPATH", "") + sys.prefix):
        sys.exit(f"error: {ISOLATED_HINT}")
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        sys.exit(f"error: {ISOLATED_HINT}")
    if "pip-build-env-" in (torch.__file__ or ""):
        sys.exit(f"error: {ISOLATED_HINT}")
    return torch, cpp_extension


def _setuptools_or_exit():
    """One line saying what to install when this setuptools cannot build
    us: editable installs need 64, and before 70.1 a wheel needs the
    `wheel` package (pip installs neither without build isolation)."""
    version = tuple(int(x) for x in setuptools.__version__.split(".")[:2] if x.isdigit())
    if version < (64,):
        sys.exit(f"error: sgl_shapeprof needs setuptools >= 64 (this environment has "
                 f"{setuptools.__version__}): pip install 'setuptools>=64' wheel")
    if version < (70, 1):
        try:
            import wheel  # noqa: F401  (bdist_wheel's home before setuptools 70.1)
        except ImportError:
            sys.exit(f"error: setuptools {setuptools.__version__} builds wheels with the wheel "
                     f"package, which is not installed: pip install wheel")


_setuptools_or_exit()
torch, cpp_extension = _torch_or_exit()

TORCH_VERSION = torch.__version__.split("+")[0]  # "2.14.1" of "2.14.1+cu128"
SUPPORTED = ((2, 11), (2, 15))  # tested: 2.11.0, 2.13.0, 2.14.1, 2.15.0 (README)
_release = tuple(int(x) for x in TORCH_VERSION.split(".")[:2] if x.isdigit())
if not SUPPORTED[0] <= _release <= SUPPORTED[1]:
    print(f"warning: sgl_shapeprof is tested with torch 2.11 to 2.15; building against "
          f"{torch.__version__}", file=sys.stderr)
STRICT = os.environ.get("SHAPEPROF_WERROR") == "1"
WARNINGS = ["-Wall", "-Wextra"] + (["-Werror"] if STRICT else [])


class BuildExt(cpp_extension.BuildExtension):
    """torch's build_ext, with .c sources compiled as C11 (torch adds its C++
    standard to every source), objects kept per torch version, and the torch
    it was built for written beside the module (checked before loading it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("use_ninja", False)  # ninja would bypass compile_one below
        super().__init__(*args, **kwargs)

    def finalize_options(self):
        super().finalize_options()
        # Objects built against one torch must never be linked for another.
        self.build_temp = os.path.join(self.build_temp, f"torch-{torch.__version__}")
        self.force = True

    def build_extensions(self):
        compile_cxx = self.compiler._compile

        def compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts):
            if src.endswith(".c"):
                extra_postargs = [a for a in extra_postargs if not a.startswith("-std=")]
                extra_postargs.append("-std=c11")
            return compile_cxx(obj, src, ext, cc_args, extra_postargs, pp_opts)

        self.compiler._compile = compile_one  # torch's wrapper calls this
        super().build_extensions()

    def run(self):
        super().run()
        target = os.path.dirname(self.get_ext_fullpath("sgl_shapeprof._C"))
        with open(os.path.join(target, "_build.py"), "w") as f:
            f.write('"""Written by setup.py: the torch this build of sgl_shapeprof._C is for, and\n'
                    'the CUPTI headers it reads kernels with (None: none), for the tests\' stand-in."""\n'
                    f"TORCH_VERSION = {torch.__version__!r}\n"
                    f"CUPTI_INCLUDE = {CUPTI_INCLUDE!r}\nCUPTI_CRT = {CUPTI_CRT!r}\n")


class BuildPy(build_py):
    """Puts the zero-edit start-up hook's .pth line at the top of the wheel,
    so that it lands in site-packages/ beside the module it imports
    (sgl_shapeprof_autohook.py, a py-module: it does nothing unless
    SGLANG_PROFILE_SHAPES is set): the line `sgl-shapeprof hook install`
    writes, with the switch's names and targets from their owners."""

    def run(self):
        super().run()
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # this checkout's, not an installed one
        from sgl_shapeprof.integrations import install
        install.write_pth(os.path.join(self.build_lib, install.PTH_NAME))


# Torch's headers are system headers to us: our warning flags are for our code.
system_includes = []
for path in cpp_extension.include_paths():
    system_includes += ["-isystem", path]
torch_lib = cpp_extension.library_paths()[0]

# csrc/ by layer: core/ (plain C, no Python, no torch; sp_core.c is its
# amalgamation, which #includes the parts), torch/ (the c10 fallback, its
# encoder and sync mode; sp_torch.cpp #includes them likewise), python/
# (the C-API module, Python errors and tensors, and the calls that do not pass
# the dispatcher: launches, API calls and what they share). Sources name a header by its layer,
# "core/sp_core.h": csrc is a quote-only include path (-iquote), so that
# torch's own <torch/...> headers never look in csrc/torch.
# Thread-local state is read on every recorded call: TLS descriptors make
# that a short call instead of __tls_get_addr's (x86-64; other targets
# use descriptors by default or have no such flag).
TLS = ["-mtls-dialect=gnu2"] if platform.machine() in ("x86_64", "AMD64") else []

def nvtx_include():
    """Where NVTX v3's headers (header-only: nvtx3/nvToolsExt.h) are, for the
    NVTX ranges (SHAPEPROF_NVTX=1), or None: NVTX_INCLUDE_DIR, the NVIDIA
    wheels that CUDA builds of torch install (nvidia-nvtx-cu12, CUDA 13's
    nvidia/cu13), or the CUDA toolkit. Without them the build has no NVTX
    ranges, and asking for them says so."""
    found = [os.environ.get("NVTX_INCLUDE_DIR", "")]
    for site in sys.path:
        found += [os.path.join(site, "nvidia", sub, "include") for sub in ("nvtx", "cu13", "cu12")]
    found.append(os.path.join(cpp_extension.CUDA_HOME or "/usr/local/cuda", "include"))
    return next((d for d in found if d and os.path.isfile(os.path.join(d, "nvtx3", "nvToolsExt.h"))), None)


NVTX_INCLUDE = nvtx_include()
print(f"sgl_shapeprof: NVTX ranges {'from ' + NVTX_INCLUDE if NVTX_INCLUDE else 'not built (no nvtx3 headers)'}",
      file=sys.stderr)
NVTX_FLAGS = ["-isystem", NVTX_INCLUDE, "-DSP_HAVE_NVTX=1"] if NVTX_INCLUDE else []

def cupti_major(include: str) -> "int | None":
    """The CUDA major of the CUPTI headers in include: CUPTI_API_VERSION is
    13xxyy from CUDA 13 on, and a small number (18 to 99) for CUDA 12."""
    import re
    try:
        with open(os.path.join(include, "cupti_version.h")) as f:
            m = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", f.read())
    except OSError:
        return None
    v = int(m.group(1)) if m else 0
    return v // 10000 if v >= 10000 else 12 if v >= 18 else None


def cupti_include():
    """Where CUPTI's headers (cupti.h) are, for GPU kernel times
    (SHAPEPROF_TIME=kernels), or None: CUPTI_INCLUDE_DIR, the NVIDIA wheels
    that CUDA builds of torch install (nvidia-cuda-cupti-cu12's
    nvidia/cuda_cupti, CUDA 13's nvidia/cu13), or the CUDA toolkit's
    extras. The library itself is loaded at run time, never linked."""
    cuda = cpp_extension.CUDA_HOME or "/usr/local/cuda"
    found = [os.environ.get("CUPTI_INCLUDE_DIR", "")]
    crt = [os.path.join(cuda, "include")]
    for site in sys.path:
        found += [os.path.join(site, "nvidia", sub, "include") for sub in ("cu13", "cuda_cupti", "cu12")]
        crt += [os.path.join(site, "nvidia", sub, "include") for sub in ("cu13", "cuda_runtime", "cuda_nvcc")]
        crt.append(os.path.join(site, "triton", "backends", "nvidia", "include"))
    found += [os.path.join(cuda, "extras", "CUPTI", "include"), os.path.join(cuda, "include")]
    found = [d for d in found if d and os.path.isfile(os.path.join(d, "cupti.h"))]
    # a CUDA build of torch runs its own CUPTI major (its wheel's libcupti):
    # headers of another major would read records of the wrong layout
    torch_cuda = (torch.version.cuda or "").split(".")[0]
    if torch_cuda.isdigit():
        found = [d for d in found if cupti_major(d) == int(torch_cuda)]
    cupti = found[0] if found else None
    # cupti.h includes the runtime's types, which include crt/host_defines.h:
    # CUDA 13's wheels leave crt/ to the compiler's wheel, which Triton carries
    host = next((d for d in [cupti] + crt if d and os.path.isfile(os.path.join(d, "crt", "host_defines.h"))), None)
    return (cupti, host) if cupti and host else (None, None)


CUPTI_INCLUDE, CUPTI_CRT = cupti_include()
print(f"sgl_shapeprof: GPU kernel times {'from ' + CUPTI_INCLUDE if CUPTI_INCLUDE else 'not built (no CUPTI headers)'}",
      file=sys.stderr)
CUPTI_FLAGS = (["-isystem", CUPTI_INCLUDE] + (["-idirafter", CUPTI_CRT] if CUPTI_CRT != CUPTI_INCLUDE else [])
               + ["-DSP_HAVE_CUPTI=1"]) if CUPTI_INCLUDE else []

extension = cpp_extension.CppExtension(
    "sgl_shapeprof._C",
    sources=["csrc/core/sp_core.c", "csrc/torch/sp_torch.cpp",
             "csrc/python/sp_pyerror.cpp", "csrc/python/sp_pytensor.cpp", "csrc/python/sp_module.c",
             "csrc/python/sp_pycall.c", "csrc/python/sp_launch.c", "csrc/python/sp_door.c"],
    extra_compile_args=WARNINGS + system_includes + NVTX_FLAGS + CUPTI_FLAGS + ["-iquote", "csrc", "-O2",
                                                     "-fvisibility=hidden"] + TLS,
    extra_link_args=[f"-Wl,-rpath,{torch_lib}", "-ldl"],  # dlopen: sync mode asks the CUDA driver
)


def license_metadata():
    """Apache-2.0, as the setuptools building us spells it: an SPDX
    expression from setuptools 77 on (PEP 639, where the old field is
    deprecated), the plain License field before (torch 2.11's environments
    pin setuptools < 82, and a fresh venv may have 65)."""
    major = int(setuptools.__version__.split(".")[0])
    return {"license_expression": "Apache-2.0"} if major >= 77 else {"license": "Apache-2.0"}


setup(
    **license_metadata(),
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    install_requires=[f"torch=={TORCH_VERSION}", "numpy"],
)
