"""GPU kernel times (ShapeProfiler(time="kernels"), SHAPEPROF_TIME=kernels):
the process's CUPTI collector (csrc/core/sp_cupti.c), started as a
kernels-timed profiler opens and stopped as it closes. It writes the
kernels file beside the records (FORMAT.md "Kernels"); records/kernels.py
joins it to the records.

CUPTI directly, not torch.profiler's Kineto: Kineto correlates through its
own RecordFunction callbacks on every operator, the per-call cost this
profiler exists to avoid; our core pushes CUPTI's external correlation id
beside its own record instead. The library is loaded at run time from the
nvidia-cuda-cupti wheel that CUDA builds of torch depend on (or the CUDA
toolkit's, or the one SHAPEPROF_CUPTI_LIBRARY names).

It is refused, in one line, and the profiler keeps each call's CPU time:
without a CUDA device, in a build without CUPTI's headers, with no library
of the build's major version, under torch.profiler (one CUPTI client per
process), or while another profiler of this process collects."""
from __future__ import annotations

import glob
import os
import sys
from typing import List, Optional

from ..records.reader import kernels_path_for
from .config import ENV_CUPTI_LIBRARY, cupti_library, neutral_name


STANDIN_VAR = "SHAPEPROF_TEST_CUPTI_STANDIN"  # tests only: CUPTI is the stand-in, no device needed


def libraries(version: int) -> List[str]:
    """Where CUPTI of the build's major version may be, best first: the
    wheels beside torch (CUDA 13's nvidia/cu13, CUDA 12's
    nvidia/cuda_cupti), then CUDA_HOME's, then the loader's search."""
    # CUPTI_API_VERSION: CUDA 13's are 130000 and on; CUDA 12's were small numbers
    soname = f"libcupti.so.{version // 10000 if version >= 10000 else 12}"
    found: List[str] = loaded(soname)
    for site in sys.path:
        for sub in ("cu13", "cuda_cupti", "cu12"):
            found += sorted(glob.glob(os.path.join(site, "nvidia", sub, "lib", soname)))
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    for sub in ("lib64", os.path.join("extras", "CUPTI", "lib64")):
        path = os.path.join(cuda, sub, soname)
        if os.path.exists(path):
            found.append(path)
    found.append(soname)  # the loader's own search (LD_LIBRARY_PATH, ldconfig)
    return list(dict.fromkeys(found))


def loaded(soname: str) -> List[str]:
    """The CUPTI of that name this process has loaded already (torch's own,
    say): the one to use, never a second copy beside it."""
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if line.rstrip().endswith("/" + soname)})
    except OSError:
        return []


def refusal(native) -> Optional[str]:
    """Why GPU kernel times cannot be collected here, before CUPTI is
    touched, or None."""
    if not native.cupti_built():
        return ("this build of sgl_shapeprof has no CUPTI: its headers (cupti.h) were not found when it was "
                "built; pip install nvidia-cuda-cupti-cu12 (CUDA 12) or use a CUDA build of torch, then "
                "reinstall sgl_shapeprof (--no-build-isolation)")
    torch = sys.modules.get("torch")
    autograd = getattr(getattr(torch, "_C", None), "_autograd", None)
    enabled = getattr(autograd, "_profiler_enabled", None)
    if enabled is not None and enabled():
        return "torch.profiler is running, and CUPTI takes one client per process: stop it first"
    # Never touch CUPTI without a device: a real libcupti with no driver may
    # crash the process (CUPTI 13.x under torch 2.15 did, here). The tests'
    # stand-in CUPTI (tests/cupti_standin.c) is let through by STANDIN_VAR.
    if os.environ.get(STANDIN_VAR) != "1" and not (torch is not None and torch.cuda.is_available()):
        return "there is no CUDA device (torch.cuda.is_available() is False)"
    return None


def start(native, profiler) -> "tuple[Optional[str], Optional[str]]":
    """Starts the collector for the native profiler (its calls only; the
    kernels file beside its records): (the kernels file's path, None), or
    (None, why not, in one line)."""
    why = refusal(native)
    if why:
        return None, why
    out = kernels_path_for(profiler.path)
    named = cupti_library()
    tried = [named[1]] if named else libraries(native.cupti_built())
    errors = []
    for lib in tried:
        try:
            native.cupti_start(lib, out, profiler)
            return out, None
        except ImportError as e:  # that library cannot be used: the next may
            errors.append(str(e))
        except OSError as e:  # CUPTI itself refused: another library would too
            errors.append(str(e))
            break
    hint = (f"{named[0]} names the library" if named else
            f"name libcupti.so.<CUDA major> in {neutral_name(ENV_CUPTI_LIBRARY)}")
    return None, f"{'; '.join(errors[-2:])} ({hint})"


def stop(native) -> Optional[str]:
    """Waits for the devices (CUPTI's flush does not: a kernel still
    running has no time yet), flushes the kernels and stops: None, or what
    was lost."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            for d in range(torch.cuda.device_count()):
                torch.cuda.synchronize(d)
    except Exception:  # a device in a bad state: its kernels' records say what they can
        pass
    try:
        native.cupti_stop()
    except OSError as e:
        return str(e)
    return None
