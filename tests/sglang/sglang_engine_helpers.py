"""What the tests of SGLang's real engine and server share (tests/sglang/;
plain helpers, not fixtures: those are in conftest.py): SGLang's version,
tests/sglang_env's paths, and the oracles read from SGLang's workers."""
import json
import os
import subprocess
import sys
import sysconfig

from helpers import ROOT

SGLANG_VERSION = "0.5.23"
ENV_DIR = os.path.join(ROOT, "tests", "sglang_env")
STUBS = os.path.join(ENV_DIR, "stubs")
PROBE = os.path.join(ENV_DIR, "trace_hook")  # SGLENV_PARALLEL: SGLang's get_parallel() per worker
OVERLAY = os.path.join(ENV_DIR, "patched_overlay")
# patches/sglang-<version>-<name>.patch -> the file it patches
WORKERS = {"tp_worker": "sglang/srt/managers/tp_worker.py",
           "gpu_worker": "sglang/multimodal_gen/runtime/managers/gpu_worker.py",
           "profiler_manager": "sglang/srt/managers/scheduler_components/profiler_manager.py",
           "tokenizer_control_mixin": "sglang/srt/managers/tokenizer_control_mixin.py",
           "http_server": "sglang/srt/entrypoints/http_server.py"}


def zero_edit_hook_installed():
    return os.path.exists(os.path.join(sysconfig.get_paths()["purelib"], "sgl_shapeprof_autohook.pth"))


def workers_said_by_sglang(parallel_dir):
    """pid -> what SGLang's own get_parallel() said in that worker."""
    return {int(os.path.splitext(f)[0]): json.load(open(os.path.join(parallel_dir, f)))
            for f in os.listdir(parallel_dir)}


def outputs_last_dim(records, n):
    return [r for r in records if isinstance(r.get("outputs"), dict) and r["outputs"]["shape"][-1:] == [n]]


def assert_patched_and_compiling(tree, files):
    """Each of SGLang's files (paths relative to tree), as patched there,
    calls sgl_shapeprof and compiles."""
    for rel in files:
        text = open(tree / rel).read()
        assert "sgl_shapeprof" in text
        r = subprocess.run([sys.executable, "-m", "py_compile", str(tree / rel)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
