"""The fixtures the vLLM tests share (tests/vllm/); the plain helpers for
the real API server are in vllm_server_helpers.py."""
import os
import subprocess
import sys

import pytest
from helpers import ROOT


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny random Llama for vLLM (tests/sglang_env/make_models.py --only vllm)."""
    out = tmp_path_factory.mktemp("models")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "sglang_env", "make_models.py"), str(out),
                        "--only", "vllm"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return out / "tiny-llama-vllm"
