"""The environment SGLang's CPU engine needs here, for run_llm.py and
run_diffusion.py (variables the caller set are kept)."""
import os
import sys


def cpu_environment() -> None:
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # The CUDA torch wheel ships nvidia-nccl; SGLang would find it and try an
    # NCCL communicator on a CPU device. Point it at a file that does not exist.
    os.environ.setdefault("SGLANG_NCCL_SO_PATH", "/nonexistent/libnccl.so.2")
    # The placeholder sgl_kernel, for this process and (through PYTHONPATH)
    # the worker processes SGLang spawns.
    stubs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubs")
    pp = os.environ.get("PYTHONPATH", "")
    if stubs not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = stubs + (os.pathsep + pp if pp else "")
    if stubs not in sys.path:
        sys.path.insert(0, stubs)
