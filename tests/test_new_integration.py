"""The claim of docs/how-it-works.md#adding-a-server-or-a-kernel-library,
proved (issue 51): a stand-in kernel library door and a stand-in server,
each a folder of its own, plus one line in integrations/registry.py, in a
copy of the package, and nothing else changed: analyze's ledger names the
door's calls, gemm reads them (its records are launches), `import
sgl_shapeprof` puts the door on, `run --server` offers the server (and says
what it needs when missing), srtctl's backend map has it, the start-up
hook patches its modules and `hook install` writes its unarmed target, and
the docs test asks for their docs (tests/integration_docs.py). The same
records read by the package without the line are the control.
"""
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
from integration_docs import integrations, undocumented

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "sgl_shapeprof")
HOOK_MODULE = os.path.join(ROOT, "sgl_shapeprof_autohook.py")

# each file of the two folders, as a contributor would write them
LIBRARY = {
    "__init__.py": "",
    "seam.py": '''"""A stand-in kernel library's seam."""
from ..registry import KERNEL_LIBRARY, Seam

API = "stand_in_kernels.api"
PREFIX = "standin"
_HERE = __package__
DOORS = {API: (f"{_HERE}.door", "patch_api_module")}
SEAM = Seam(KERNEL_LIBRARY, "stand_in_lib", doors=DOORS, door_prefixes=(PREFIX,), launches=True,
            imported_before="its functions defined by then are not wrapped")
''',
    "door.py": '''"""The stand-in's door: marks the module it patched."""


def patch_api_module(module) -> None:
    module.patched_by = __name__
''',
}
SERVER = {
    "__init__.py": "",
    "seam.py": '''"""A stand-in server's seam."""
from ..registry import SERVER, Seam

WORKER = "stand_in_server_pkg.worker"
TOKENIZER = "stand_in_server_pkg.tokenizer"
_HERE = __package__
HOOKS = {WORKER: (f"{_HERE}.workers", "patch_worker_module")}
UNARMED_HOOKS = {TOKENIZER: (f"{_HERE}.workers", "patch_worker_module")}
SEAM = Seam(SERVER, "stand_in_server", hooks=HOOKS, unarmed_hooks=UNARMED_HOOKS, engine=f"{_HERE}.engine",
            engine_api="stand_in_server_pkg.Engine", remote=f"{_HERE}.remote", concurrency_arg="max_batch",
            srtctl_backend="standin", display_name="Stand-in", module="stand_in_server_pkg",
            tested_release="1.0", install='pip install "stand-in==1.0"', tests="stand_in_server")
''',
    "workers.py": '''def patch_worker_module(module) -> None:
    module.patched_by = __name__
''',
    "engine.py": '''NOT_RECORDED_HINT = ""


def refuse(spec):
    return None


def prepare(spec, env):
    return []


def run_engine(spec, prompts):
    raise NotImplementedError
''',
    "remote.py": '''class RemoteError(Exception):
    pass
''',
}
NAMES = ("stand_in_lib", "stand_in_server")

RECORDS = [
    {"call_id": 1, "forward_pass": 1, "operation": "aten.mm.default",
     "inputs": {"self": {"shape": [4, 8], "dtype": "torch.float32"},
                "mat2": {"shape": [8, 16], "dtype": "torch.float32"}},
     "outputs": {"shape": [4, 16], "dtype": "torch.float32"}},
    {"call_id": 2, "forward_pass": 1, "operation": "standin:kernels._w8a8_block_int8_matmul",
     "inputs": {"A": {"shape": [4, 64], "dtype": "torch.int8"}, "B": {"shape": [32, 64], "dtype": "torch.int8"},
                "C": {"shape": [4, 32], "dtype": "torch.bfloat16"}},
     "args": {"M": 4, "N": 32, "K": 64, "grid": [1]}, "outputs": None},
]

# what the package on the path says of them, in one child
PROBE = r'''
import json, sys
import sgl_shapeprof
import stand_in_kernels.api as api
from sgl_shapeprof.integrations import install, registry, startup_hook
print(json.dumps({"door": getattr(api, "patched_by", None), "targets": list(startup_hook.TARGETS),
                  "written": install.pth_text(),
                  "srtctl": registry.srtctl_backends(), "tests": [s.tests for s in registry.seams() if s.tests]}))
'''


def _write(folder, files):
    os.makedirs(folder)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)


@pytest.fixture(scope="module")
def added():
    """A copy of the package with the two folders and the registry line;
    a stand-in library and server package beside it; a records file."""
    top = tempfile.mkdtemp(prefix="shapeprof-new-integration-")
    pkg = os.path.join(top, "sgl_shapeprof")
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so", "_build.py"))
    shutil.copy(HOOK_MODULE, top)
    _write(os.path.join(pkg, "integrations", "stand_in_lib"), LIBRARY)
    _write(os.path.join(pkg, "integrations", "stand_in_server"), SERVER)
    registry = os.path.join(pkg, "integrations", "registry.py")
    with open(registry) as f:
        text = f.read()
    line = re.search(r"^INTEGRATIONS = \((.*)\)$", text, re.M)
    with open(registry, "w") as f:
        f.write(text.replace(line.group(0), f"INTEGRATIONS = ({line.group(1)}, {NAMES[0]!r}, {NAMES[1]!r})"))
    lib = os.path.join(top, "lib")
    _write(os.path.join(lib, "stand_in_kernels"), {"__init__.py": "", "api.py": "patched_by = None\n"})
    records = os.path.join(top, "run.jsonl")
    with open(records, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in RECORDS))
    model = os.path.join(top, "model")
    _write(model, {"config.json": "{}"})
    yield {"top": top, "pkg": pkg, "lib": lib, "records": records, "model": model}
    shutil.rmtree(top, ignore_errors=True)


def _changed(a, b):
    """Files that differ or exist on one side only, relative to a and b."""
    out = []
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])

    def walk(c, rel):
        out.extend(os.path.join(rel, n) for n in c.left_only + c.right_only + c.diff_files
                   if not n.endswith(".so") and n != "_build.py")
        for name, sub in c.subdirs.items():
            walk(sub, os.path.join(rel, name))
    walk(cmp, "")
    return sorted(out)


def _run(added, *args, copy=True):
    env = dict(os.environ)
    env.pop("SHAPEPROF", None)
    env.pop("SGLANG_PROFILE_SHAPES", None)
    paths = ([added["top"]] if copy else []) + [added["lib"]]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=tempfile.gettempdir(), env=env)


def test_only_the_folders_and_the_registry_line_were_added(added):
    assert _changed(PKG, added["pkg"]) == sorted(
        [os.path.join("integrations", "registry.py")] + [os.path.join("integrations", n) for n in NAMES])
    with open(os.path.join(PKG, "integrations", "registry.py")) as a, \
            open(os.path.join(added["pkg"], "integrations", "registry.py")) as b:
        old, new = a.read().splitlines(), b.read().splitlines()
    assert len(old) == len(new) and sum(x != y for x, y in zip(old, new)) == 1


def test_the_copy_is_the_package_under_test(added):
    r = _run(added, "-c", "import sgl_shapeprof; print(sgl_shapeprof.__file__)")
    assert r.returncode == 0 and r.stdout.strip() == os.path.join(added["pkg"], "__init__.py"), r.stderr


def test_analyze_s_ledger_names_the_door(added):
    without = _run(added, "-m", "sgl_shapeprof", "analyze", added["records"], copy=False)
    assert "  doors: dispatcher 1, standin 1\n" in without.stdout, without.stdout + without.stderr
    r = _run(added, "-m", "sgl_shapeprof", "analyze", added["records"])
    assert "  doors: dispatcher 1, stand in lib 1\n" in r.stdout, r.stdout + r.stderr


def test_gemm_reads_the_door_s_launches(added):
    without = _run(added, "-m", "sgl_shapeprof", "gemm", added["records"], copy=False)
    assert "1 distinct GEMMs" in without.stdout and "standin:" not in without.stdout, without.stdout
    r = _run(added, "-m", "sgl_shapeprof", "gemm", added["records"])
    assert "2 distinct GEMMs" in r.stdout, r.stdout + r.stderr
    [row] = [line.split() for line in r.stdout.splitlines() if "standin:" in line]
    assert row[:4] == ["4", "32", "64", "1"] and row[-1] == "standin:kernels._w8a8_block_int8_matmul"


def test_run_offers_the_server_and_says_what_it_needs(added):
    r = _run(added, "-m", "sgl_shapeprof", "run", "--help")
    assert re.search(r"--server \{sglang,vllm,stand_in_server\}", r.stdout), r.stdout
    assert "Stand-in's max_batch" in " ".join(r.stdout.split())
    r = _run(added, "-m", "sgl_shapeprof", "run", "--server", "stand_in_server", "--model-path", added["model"],
             "-o", os.path.join(added["top"], "out"))
    assert r.returncode == 2 and r.stderr == (
        f"sgl-shapeprof run: --server stand_in_server: Stand-in is not installed in this Python ({sys.executable}): "
        'pip install "stand-in==1.0" installs the release tested; or run sgl-shapeprof from Stand-in\'s '
        "environment\n")


def test_the_hooks_doors_srtctl_and_placement_take_them(added):
    r = _run(added, "-c", PROBE)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["door"] == "sgl_shapeprof.integrations.stand_in_lib.door"  # import sgl_shapeprof put it on
    assert {"stand_in_kernels.api", "stand_in_server_pkg.worker"} <= set(got["targets"])
    assert "'stand_in_server_pkg.tokenizer'" in got["written"]  # what hook install writes into the .pth line
    assert got["srtctl"]["standin"] == "stand_in_server"
    assert "stand_in_server" in got["tests"]  # tests/placement.py's engine folders


def test_the_docs_test_asks_for_their_docs(added):
    assert undocumented(os.path.join(ROOT, "docs"), integrations(added["top"])) == [
        "how-it-works.md: the code map has no integrations/stand_in_lib/",
        "FORMAT.md: no operation `standin:...` (stand_in_lib's door)",
        "how-it-works.md: the code map has no integrations/stand_in_server/",
        "cli.md: run's synopsis does not say --server sglang|vllm|stand_in_server"]
