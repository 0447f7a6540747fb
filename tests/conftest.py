import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from placement import engine, every_torch, second_route  # noqa: E402

# `SHAPEPROF_TEST_FAKE_OWNER=1 pytest ...`: the suites on the second route
# (tests/fake_owner/sitecustomize.py), here and in every child
if os.environ.get("SHAPEPROF_TEST_FAKE_OWNER") == "1":
    FAKE_OWNER = os.path.join(ROOT, "tests", "fake_owner")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (FAKE_OWNER, os.environ.get("PYTHONPATH")) if p)
    from fake_owner.sitecustomize import take_fake  # noqa: E402
    take_fake()

# the profiler's variables under their neutral spelling (SHAPEPROF_WERROR and
# the tests' own SHAPEPROF_* settings are not among them)
NEUTRAL_VARS = {"SHAPEPROF" + s for s in ("", "_RANK", "_FILE", "_SKIP_WARMUP", "_LOG_N_PASSES", "_DEDUPE",
                                          "_PHASES", "_ARGS", "_CONTROL_DIR", "_SYNC")}


@pytest.fixture(autouse=True)
def _clean_profiler_env(monkeypatch):
    """Each test sets the SGLANG_PROFILE_SHAPES* / SHAPEPROF* variables it needs."""
    for k in list(os.environ):
        if k.startswith("SGLANG_PROFILE_SHAPES") or k in NEUTRAL_VARS or k in ("RANK", "LOCAL_RANK"):
            monkeypatch.delenv(k, raising=False)


@pytest.fixture(autouse=True)
def _neutral_cwd(tmp_path, monkeypatch):
    """Child processes (`python -c ...`) put their cwd first on sys.path:
    run from a scratch folder, so that they import the sgl_shapeprof under
    test (site-packages in the torch matrix), never the checkout's build."""
    monkeypatch.chdir(tmp_path)


def pytest_configure(config):
    config.addinivalue_line("markers", "every_torch: runs on every supported torch (tests/placement.py)")
    config.addinivalue_line("markers", "second_route: also runs on the second route on every torch "
                                       "(tests/placement.py)")
    config.addinivalue_line("markers", "engine: a server's real-engine test (tests/sglang/, tests/vllm/)")


def pytest_collection_modifyitems(config, items):
    """Mark each test by tests/placement.py's rule: `-m every_torch` is
    what a torch other than the default runs."""
    for item in items:
        path = str(item.fspath)
        if every_torch(path):
            item.add_marker(pytest.mark.every_torch)
        if second_route(path):
            item.add_marker(pytest.mark.second_route)
        if engine(path):
            item.add_marker(pytest.mark.engine)
