"""The fixtures the tests of SGLang's real engine and server share
(tests/sglang/); their plain helpers are in sglang_engine_helpers.py.
test_sglang.py and test_sglang_graphs.py define a patched_tree of their own
(other files patched), which takes the place of this one there."""
import os
import subprocess
import sys

import pytest
from helpers import patched_sglang_tree
from sglang_engine_helpers import ENV_DIR, SGLANG_VERSION, WORKERS


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    r = subprocess.run([sys.executable, os.path.join(ENV_DIR, "make_models.py"), str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def patched_tree(tmp_path_factory):
    """SGLang's two worker files, as installed, with our patches applied."""
    return patched_sglang_tree(tmp_path_factory.mktemp("patched"), WORKERS, SGLANG_VERSION)
