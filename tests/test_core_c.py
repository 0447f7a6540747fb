"""The C core's own unit tests (csrc/tests/test_core.c): built without torch
or Python, and run plain, under AddressSanitizer + UndefinedBehaviorSanitizer,
and under ThreadSanitizer (also `make test-core`, which needs no torch)."""
import os
import re
import shutil
import subprocess

import pytest
from helpers import ROOT

CSRC = os.path.join(ROOT, "csrc")
# SP_DEBUG: the test build asserts the calling protocol
FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-DSP_DEBUG"]
VARIANTS = {
    "plain": ["-O2"],
    "asan-ubsan": ["-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                   "-fno-omit-frame-pointer"],
    # the flusher thread runs beside the tests' passes
    "tsan": ["-O1", "-fsanitize=thread"],
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_core_unit_tests(tmp_path, variant):
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = str(tmp_path / "test_core")
    build = subprocess.run(
        [cc, *FLAGS, *VARIANTS[variant], "-o", exe, os.path.join(CSRC, "tests", "test_core.c"),
         os.path.join(CSRC, "core", "sp_core.c"), "-lpthread"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", TSAN_OPTIONS="halt_on_error=1")
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    src = open(os.path.join(CSRC, "tests", "test_core.c")).read()
    n_tests = len(re.findall(r"^static void test_\w+\(void\) \{", src, re.M))
    assert run.stdout.strip() == f"{n_tests} passed, 0 failed"
