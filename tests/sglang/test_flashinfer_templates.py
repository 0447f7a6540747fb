"""The FlashInfer templates gemm, cost and tune read
(sgl_shapeprof/integrations/flashinfer/templates.json) are FlashInfer's
own: made again from the real flashinfer-python 0.7.2 (SGLang 0.5.23's pin,
tests/sglang_env/setup.sh) by tests/sglang_env/flashinfer_templates.py, they are equal to
the shipped file. A FlashInfer upgrade that changes a template fails here
until the file is made again."""
import json
import os
import subprocess
import sys

import pytest
from sglang_engine_helpers import ENV_DIR

FLASHINFER_DIR = os.path.join(sys.prefix, "flashinfer-0.7.2")  # tests/sglang_env/setup.sh's


def test_the_shipped_templates_are_the_installed_flashinfers(tmp_path):
    if not os.path.isfile(os.path.join(FLASHINFER_DIR, "flashinfer", "__init__.py")):
        pytest.skip(f"flashinfer-python 0.7.2 is not in {FLASHINFER_DIR} (tests/sglang_env/setup.sh)")
    from sgl_shapeprof.integrations.flashinfer import templates
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [FLASHINFER_DIR, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, os.path.join(ENV_DIR, "flashinfer_templates.py")], capture_output=True,
                       text=True, env=env, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    made = json.loads(r.stdout)
    assert made["flashinfer"] == "0.7.2"
    assert made == templates.snapshot()
    # what the GEMM reading stands on: FlashInfer's own axes of bmm_fp8
    [bmm] = made["functions"]["gemm.gemm_base.bmm_fp8"]
    assert (bmm["inputs"]["A"]["dims"], bmm["inputs"]["B"]["dims"]) == (["batch_size", "M", "K"],
                                                                        ["batch_size", "K", "N"])
